"""A private tmux server per test (its own socket), killed afterwards, with a pinned shell."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.adapters.procfs import processes_with_environ


@pytest.fixture
def tmux_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A new, empty TMUX_TMPDIR for this test, as on a machine where tmux never ran: its
    `tmux-UID` folder does not exist until the code under test makes it. Short (under /tmp),
    since a socket's path must fit in 107 bytes."""
    folder = Path(tempfile.mkdtemp(prefix="dlt-", dir="/tmp"))
    monkeypatch.setenv("TMUX_TMPDIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def tmux_socket(tmux_tmpdir: Path) -> Iterator[str]:
    """A `-L` socket name on this test's own TMUX_TMPDIR (set in os.environ, so every CLI and
    tmux the test starts finds the same server)."""
    name = f"dlgtest-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


def socket_path(name: str) -> str:
    """Where a `-L name` socket of this test lives."""
    return f"{os.environ['TMUX_TMPDIR']}/tmux-{os.getuid()}/{name}"


@pytest.fixture
def tmux_env(tmux_socket: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for CLI runs: isolated tmux, and a pane shell/home that behave the same
    everywhere (as tmuxp's tests pin them).

    Afterwards every process this test's toolkit started (supervisors, wrappers, agents: all
    carry the test's own DELEGATE_HOME) is killed before the tmux server, so no supervisor is
    left to launch a queued job onto a fresh server after the test.
    """
    fake_home = tmp_path / "userhome"
    fake_home.mkdir()
    yield {
        "DELEGATE_TMUX_SOCKET": tmux_socket,
        "TMUX_TMPDIR": os.environ["TMUX_TMPDIR"],
        "HOME": str(fake_home),
        "SHELL": "/bin/sh",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    kill_processes_of(tmp_path / "state")


def kill_processes_of(home: Path) -> None:
    """SIGKILL every process whose environment names `home` as its DELEGATE_HOME, all of them
    stopped first, as a power cut would: none sees another die (a wrapper whose tmux server
    went first would get its SIGHUP and report the job's end)."""
    found = []
    for pid in processes_with_environ(f"DELEGATE_HOME={home}"):
        try:
            os.kill(pid, signal.SIGSTOP)
            found.append(pid)
        except ProcessLookupError:
            continue
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
