"""Pure logic and single-file adapters of the tmux issue: profiles, job files, the inventory."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from delegate.adapters.sessions_db import SessionError, SessionInventory
from delegate.config.profiles import BUILTIN, load_config, one_off, profiles, resolve
from delegate.core.errors import ConfigError, UsageError
from delegate.core.model import SessionState
from delegate.runtime.wrapper import outcome_for
from delegate.services.jobs.jobfile import merge_job_file
from delegate.services.jobs.submit import build_prompt, preamble


def test_builtin_profiles():
    assert BUILTIN["shell"].argv(prompt_file=Path("/p"), workdir=Path("/w"), job_id="0123abcd") == [
        "bash",
        "/p",
    ]
    assert BUILTIN["claude"].prompt == "stdin" and BUILTIN["claude"].preamble
    assert not BUILTIN["shell"].preamble
    assert one_off("make test").command == ("/bin/sh", "-c", "make test")


def test_custom_profiles_from_toml(tmp_path: Path):
    path = tmp_path / "delegate.toml"
    path.write_text(
        textwrap.dedent("""
        [profiles.aider]
        command = "aider --yes --message-file {prompt_file}"
        prompt = "file"
        clean_exit = "error"
    """)
    )
    found = profiles(load_config(path), path)
    aider = found["aider"]
    assert aider.clean_exit == "error" and aider.preamble
    assert aider.argv(prompt_file=Path("/x y/p"), workdir=Path("/w"), job_id="0123abcd") == [
        "aider",
        "--yes",
        "--message-file",
        "/x y/p",
    ]
    assert "shell" in found  # built-ins stay


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[profiles.x]\ncommand = []\n", "non-empty list"),
        ("[profiles.x]\ncommand = ['a']\nprompt = 'carrier'\n", "prompt must be"),
        ("[profiles.x]\ncommand = ['a']\nclean_exit = 'maybe'\n", "clean_exit must be"),
        ("[profiles.x]\ncommand = ['a']\ncolour = 'blue'\n", "unknown key"),
        ("[profiles.x]\ncommand = ['a']\npreamble = 'yes'\n", "preamble must be"),
        ("profiles = 3\n", "must be a table"),
        ("[profiles\n", "delegate.toml"),
    ],
    ids=[
        "empty-command",
        "bad-prompt",
        "bad-exit",
        "unknown-key",
        "bad-preamble",
        "not-table",
        "broken-toml",
    ],
)
def test_bad_profiles_are_explained(tmp_path: Path, text: str, message: str):
    path = tmp_path / "delegate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        profiles(load_config(path), path)


def test_resolve_needs_exactly_one_of_agent_and_cmd(tmp_path: Path):
    source = tmp_path / "none.toml"
    with pytest.raises(UsageError):
        resolve(agent=None, cmd=None, config={}, source=source)
    with pytest.raises(UsageError):
        resolve(agent="shell", cmd="x", config={}, source=source)
    with pytest.raises(UsageError, match="unknown agent"):
        resolve(agent="gpt-99", cmd=None, config={}, source=source)
    assert resolve(agent="codex", cmd=None, config={}, source=source).name == "codex"


def test_preamble_is_the_skill_without_front_matter():
    text = preamble()
    assert "delegate publish --event progress" in text
    assert "name: delegate-job" not in text
    skill = Path(__file__).resolve().parent.parent / "skills" / "delegate-job" / "SKILL.md"
    front = skill.read_text().split("---")[1]
    assert "name: delegate-job" in front and "description:" in front
    assert build_prompt(BUILTIN["claude"], b"task").endswith(b"\n---\n\ntask")
    assert build_prompt(BUILTIN["shell"], b"echo hi") == b"echo hi"


@pytest.mark.parametrize(
    ("code", "clean", "expected"),
    [
        (0, "completed", "completed"),
        (0, "error", "error"),
        (3, "completed", "error"),
        (-9, "completed", "error"),
    ],
    ids=["clean-completed", "clean-means-error", "exit-3", "killed"],
)
def test_wrapper_outcome(code: int, clean: str, expected: str):
    event, detail = outcome_for(code, clean)
    assert event == expected
    assert str(abs(code)) in detail


def test_job_file_merge(tmp_path: Path):
    path = tmp_path / "jobs" / "nightly.toml"
    path.parent.mkdir()
    path.write_text('agent = "shell"\nprompt_file = "task.sh"\nidle_timeout = 30\nwait = false\n')
    flags = dict(
        agent=None,
        cmd=None,
        prompt=None,
        prompt_file=None,
        workdir=None,
        session=None,
        wall_timeout=None,
        idle_timeout=90.0,
        bus=None,
        wait=None,
        idempotency_key=None,
    )
    merged = merge_job_file(path, **flags)
    assert merged["agent"] == "shell"
    assert merged["prompt_file"] == path.parent / "task.sh"
    assert merged["idle_timeout"] == 90.0  # the flag wins
    assert merged["wait"] is False
    assert merge_job_file(None, **flags)["wait"] is None  # the caller decides: a terminal waits
    path.write_text('agent = "shell"\nspeed = "fast"\n')
    with pytest.raises(ConfigError, match="unknown field"):
        merge_job_file(path, **flags)
    path.write_text('idle_timeout = "soon"\n')
    with pytest.raises(ConfigError, match="number"):
        merge_job_file(path, **flags)


def test_session_inventory_history(tmp_path: Path):
    inv = SessionInventory(tmp_path / "sessions.db")
    inv.record_start("dlg-a", job_id="0123abcd", agent="shell", workdir="/w", pane_pid=None)
    inv.set_pane_pid("dlg-a", 42)
    with pytest.raises(SessionError, match="already running"):
        inv.record_start("dlg-a", job_id="fedcba98", agent="shell", workdir="/w", pane_pid=1)
    assert inv.set_state("dlg-a", SessionState.STOPPED, reason="job done")[1]
    assert not inv.set_state("dlg-a", SessionState.STOPPED, reason="again")[1]  # idempotent
    inv.record_start("dlg-a", job_id="fedcba98", agent="shell", workdir="/w", pane_pid=7)
    assert inv.get("dlg-a").job_id == "fedcba98"  # one session, two jobs in turn
    assert inv.set_state("dlg-a", SessionState.TERMINATED, reason="killed")[1]
    assert not inv.set_state("dlg-a", SessionState.RUNNING, reason="no")[1]  # terminal
    history = inv.history("dlg-a")
    assert [(h.previous, h.state, h.job_id) for h in history] == [
        (None, "running", "0123abcd"),
        ("running", "stopped", "0123abcd"),
        ("stopped", "running", "fedcba98"),
        ("running", "terminated", "fedcba98"),
    ]
    assert inv.for_job("0123abcd").name == "dlg-a"
    assert inv.get("nope") is None
    with pytest.raises(SessionError):
        inv.set_state("nope", SessionState.STOPPED, reason="x")


def test_max_running_and_notify_from_delegate_toml(tmp_path):
    import tomllib

    from delegate.config.profiles import max_running_caps, notifier, profiles
    from delegate.core.errors import ConfigError

    source = tmp_path / "delegate.toml"
    config = tomllib.loads(
        "max_running = 4\n[profiles.claude]\nmax_running = 2\n"
        '[profiles.mine]\ncommand = ["mine"]\nmax_running = 1\n'
        '[notify]\ncommand = ["notify-send", "delegate"]\n'
    )
    caps = max_running_caps(config)
    assert caps.total == 4 and dict(caps.per_agent) == {"claude": 2, "mine": 1}
    found = profiles(config, source)
    assert found["claude"] == BUILTIN["claude"]  # a cap alone keeps the built-in
    assert notifier(config, source) == (
        ["notify-send", "delegate"],
        ("permission_required", "completed", "error"),
    )
    for bad in (
        "max_running = 0\n",
        "max_running = true\n",
        "[notify]\ncommand = 'notify-send'\n",
        '[notify]\ncommand = ["x"]\nevents = ["nope"]\n',
    ):
        with pytest.raises(ConfigError):
            parsed = tomllib.loads(bad)
            max_running_caps(parsed)
            notifier(parsed, source)
