"""delegate.adapters.tmux against a real tmux server on an isolated socket."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from delegate.adapters.tmux import Tmux, alive, descendants, settle, validate_session_name
from delegate.core.errors import UsageError

from .helpers import retry_until


def test_start_capture_send_keys_and_kill(tmux_socket: str, tmp_path: Path):
    tmux = Tmux(tmux_socket)
    assert tmux.panes() == []  # no server yet: nothing, not an error
    script = "import sys\nfor line in sys.stdin:\n    print('got:' + line.strip(), flush=True)\n"
    pid = tmux.start(
        "dlg-test",
        [sys.executable, "-c", script],
        workdir=tmp_path,
        env={"DELEGATE_JOB_ID": "0123abcd"},
        job_id="0123abcd",
    )
    assert alive(pid)
    # a session the toolkit did not make is not ours
    subprocess.run(
        ["tmux", "-L", tmux_socket, "new-session", "-d", "-s", "users-own", "sleep 60"], check=True
    )
    ours = tmux.panes()
    assert [(p.session, p.job_id, p.pid, p.dead) for p in ours] == [
        ("dlg-test", "0123abcd", pid, False)
    ]
    assert {p.session for p in tmux.panes(owned_only=False)} == {"dlg-test", "users-own"}
    tmux.send_keys("dlg-test", "Enter $(touch x) `y` C-c")
    text = retry_until(
        lambda: (t := tmux.capture("dlg-test")) and "got:Enter $(touch x)" in t and t
    )
    assert "got:Enter $(touch x) `y` C-c" in text
    assert not (tmp_path / "x").exists()
    killed = tmux.kill("dlg-test")
    assert pid in killed and not alive(pid)
    assert [p.session for p in tmux.panes(owned_only=False)] == ["users-own"]


def test_a_finished_pane_keeps_its_exit_status(tmux_socket: str, tmp_path: Path):
    tmux = Tmux(tmux_socket)
    tmux.start("dlg-exit", ["sh", "-c", "exit 5"], workdir=tmp_path, env={}, job_id="0badc0de")
    # as the reconciler sees it: tmux's view, completed from /proc when tmux has not reaped it
    pane = retry_until(
        lambda: next(
            (s for p in tmux.panes() if (s := settle(p)).dead and s.exit_status is not None), None
        )
    )
    assert pane.exit_status == 5


def test_descendants_finds_the_whole_tree():
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & sh -c 'sleep 30' & wait"])
    try:
        tree = retry_until(lambda: len(d := descendants(proc.pid)) >= 3 and d)
        assert all(alive(pid) for pid in tree)
    finally:
        for pid in descendants(proc.pid):
            subprocess.run(["kill", str(pid)])
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("name", ["a:b", "a.b", "", "x" * 65, "sp ace"])
def test_session_names_are_checked(name: str):
    with pytest.raises(UsageError):
        validate_session_name(name)
