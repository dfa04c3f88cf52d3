"""`delegate session list/stop/resume`, `send` and `peek` against a real tmux server: after each
step tmux, sessions.db, the registry and `session list --json` agree."""

from __future__ import annotations

import json
from pathlib import Path

from delegate.adapters.sessions_db import SessionInventory
from delegate.adapters.tmux import Tmux, alive, processes_of_job
from delegate.core.model import JobState, SessionState
from delegate.services.state import State

from .helpers import assert_one_line_error, json_lines, read_pids, retry_until, run_cli
from .test_monitor import monitor_once, submit_no_wait, wait_running

WAITER = """
trap 'echo got-int > int.txt; exit 0' INT
echo $$ > pids
sleep 300
"""


def _tmux_session_id(env, name: str) -> str:
    import subprocess

    return subprocess.run(
        [
            "tmux",
            "-L",
            env["DELEGATE_TMUX_SOCKET"],
            "display",
            "-p",
            "-t",
            f"={name}:",
            "#{session_id}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def listed(home: Path, env, *args: str) -> dict[str, dict]:
    result = run_cli(home, "session", "list", "--json", *args, env=env)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json_lines(result.stdout)}


def agree(home: Path, env, name: str, *, state: str, job_state: JobState, tmux: str) -> dict:
    """tmux, sessions.db, the registry and `session list --json` tell the same story."""
    st = State.open(env={"DELEGATE_HOME": str(home)})
    row = SessionInventory(st.layout.sessions_db).get(name)
    assert row is not None and row.state.value == state
    job = st.registry.get(row.job_id or "")
    assert job.status is job_state
    panes = [
        p for p in Tmux(env["DELEGATE_TMUX_SOCKET"]).panes(owned_only=False) if p.session == name
    ]
    seen = "gone" if not panes else ("dead" if panes[0].dead else "alive")
    assert seen == tmux, (seen, tmux)
    everything = listed(home, env, "--all")
    assert everything[name]["state"] == state and everything[name]["job_id"] == job.job_id
    return everything[name]


def test_graceful_stop_then_resume(home: Path, tmux_env, tmp_path: Path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, WAITER, "--session", "work")
    wait_running(home, job_id)
    retry_until(lambda: read_pids(tmp_path / "pids"))
    agree(home, tmux_env, "work", state="running", job_state=JobState.RUNNING, tmux="alive")
    assert "work" in listed(home, tmux_env)

    stopped = run_cli(
        home,
        "session",
        "stop",
        "work",
        "--mode",
        "graceful",
        "--timeout",
        "5",
        "--json",
        env=tmux_env,
    )
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "stopped"
    assert (tmp_path / "int.txt").read_text() == "got-int\n"  # asked, not killed
    retry_until(lambda: any(p.dead for p in Tmux(tmux_env["DELEGATE_TMUX_SOCKET"]).panes()))
    agree(home, tmux_env, "work", state="stopped", job_state=JobState.CANCELLED, tmux="dead")
    job = State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id)
    assert job.error == "session stopped (graceful)"

    before = _tmux_session_id(tmux_env, "work")
    resumed = run_cli(
        home,
        "session",
        "resume",
        "work",
        "--prompt",
        "echo again > again.txt",
        "--wait",
        env=tmux_env,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "afresh" in resumed.stderr
    assert (tmp_path / "again.txt").read_text() == "again\n"
    view = agree(home, tmux_env, "work", state="stopped", job_state=JobState.COMPLETED, tmux="dead")
    second = json_lines(resumed.stdout)[0]["job_id"]
    assert view["jobs"] == [job_id, second]  # both jobs, in order
    assert _tmux_session_id(tmux_env, "work") == before  # the same tmux session, respawned


def test_soft_stop_leaves_the_agent_alive_and_refuses_its_reports(home, tmux_env, tmp_path):
    script = (
        "echo $$ > pids\n"
        "while [ ! -e go ]; do sleep 0.05; done\n"
        "delegate publish --event progress --detail late 2> late.err; echo $? > late.code\n"
        "sleep 300\n"
    )
    job_id = submit_no_wait(home, tmux_env, tmp_path, script, "--session", "look")
    wait_running(home, job_id)
    agent = retry_until(lambda: read_pids(tmp_path / "pids"))[0]
    result = run_cli(home, "session", "stop", "look", "--mode", "soft", env=tmux_env)
    assert result.returncode == 0, result.stderr
    agree(home, tmux_env, "look", state="archived", job_state=JobState.CANCELLED, tmux="alive")
    assert alive(agent)
    (tmp_path / "go").touch()
    code = retry_until(lambda: (tmp_path / "late.code").exists() and (tmp_path / "late.code"))
    assert code.read_text().strip() == "67"
    st = State.open(env={"DELEGATE_HOME": str(home)})
    refused = st.audit.read_events(job_id, kind="publish_refused")
    assert refused and refused[0]["event"] == "progress"
    assert [a for a in monitor_once(home, tmux_env) if a.get("session") == "look"] == []
    assert alive(agent)  # the monitor leaves an archived session to its person
    hard = run_cli(home, "session", "stop", "look", "--mode", "hard", env=tmux_env)
    assert hard.returncode == 0, hard.stderr
    agree(home, tmux_env, "look", state="terminated", job_state=JobState.CANCELLED, tmux="gone")
    assert not alive(agent) and processes_of_job(job_id) == set()


def test_hard_stop_kills_everything(home: Path, tmux_env, tmp_path: Path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, WAITER, "--session", "gone")
    wait_running(home, job_id)
    agent = retry_until(lambda: read_pids(tmp_path / "pids"))[0]
    result = run_cli(home, "session", "stop", "gone", "--mode", "hard", env=tmux_env)
    assert result.returncode == 0, result.stderr
    agree(home, tmux_env, "gone", state="terminated", job_state=JobState.CANCELLED, tmux="gone")
    assert not alive(agent)
    again = run_cli(home, "session", "stop", "gone", "--mode", "graceful", env=tmux_env)
    assert again.returncode == 67 and "terminated" in again.stderr
    assert_one_line_error(again)
    missing = run_cli(home, "session", "stop", "nope", env=tmux_env)
    assert missing.returncode == 66
    assert_one_line_error(missing)
    assert "gone" not in listed(home, tmux_env)  # only with --all


READER = """
touch reading
while IFS= read -r line < /dev/tty; do [ -n "$line" ] && break; done
printf 'got:%s\\n' "$line" > got.txt
printf 'line one\\n\\n\\nline two\\n'
"""


def test_send_is_literal_and_peek_shows_the_last_lines(home: Path, tmux_env, tmp_path: Path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, READER, "--session", "talk")
    wait_running(home, job_id)
    retry_until((tmp_path / "reading").exists)
    # `-N3` first: text, not an option of tmux's send-keys (issue 30)
    tricky = """-N3 it's "quoted" $(touch pwned) ; touch pwned2 C-c Enter"""
    sent = run_cli(home, "send", "talk", "--", tricky, env=tmux_env)
    assert sent.returncode == 0, sent.stderr
    got = retry_until(lambda: (tmp_path / "got.txt").exists() and (tmp_path / "got.txt"))
    assert got.read_text() == f"got:{tricky}\n"
    assert not list(tmp_path.glob("pwned*"))
    st = State.open(env={"DELEGATE_HOME": str(home)})
    retry_until(lambda: st.registry.get(job_id).status.terminal)
    tmux = Tmux(tmux_env["DELEGATE_TMUX_SOCKET"])
    retry_until(lambda: any(p.dead for p in tmux.panes() if p.session == "talk"))
    peeked = run_cli(home, "peek", "talk", "--lines", "2", "--json", env=tmux_env)
    assert peeked.returncode == 0, peeked.stderr
    # the agent's last two lines, blank ones and tmux's note on the dead pane left out
    assert json.loads(peeked.stdout)["lines"] == ["line one", "line two"]
    three = json_lines(run_cli(home, "peek", "talk", "--lines", "3", "--json", env=tmux_env).stdout)
    assert three[0]["lines"] == [tricky, "line one", "line two"]  # the typed line, echoed
    row = SessionInventory(st.layout.sessions_db).get("talk")
    assert row is not None and row.state in (SessionState.RUNNING, SessionState.STOPPED)


def test_graceful_stop_by_keys_or_by_a_typed_command(home: Path, tmux_env, tmp_path: Path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[profiles.keyed]\ncommand = ["bash", "{prompt_file}"]\nprompt = "file"\n'
        'preamble = false\nstop = { keys = ["C-c"] }\n\n'
        '[profiles.polite]\ncommand = ["bash", "{prompt_file}"]\nprompt = "file"\n'
        'preamble = false\nstop = { command = "/exit" }\n'
    )
    keyed = "trap 'echo got-int > keyed.txt; exit 0' INT\ntouch keyed-ready\nsleep 300\n"
    polite = (
        "touch polite-ready\n"
        'while IFS= read -r line < /dev/tty; do [ "$line" = /exit ] && break; done\n'
        "echo bye > polite.txt\n"
    )
    for agent, script, ready, said in (
        ("keyed", keyed, "keyed-ready", "keyed.txt"),
        ("polite", polite, "polite-ready", "polite.txt"),
    ):
        result = run_cli(
            home,
            "submit",
            "--agent",
            agent,
            "--prompt",
            script,
            "--workdir",
            str(tmp_path),
            "--session",
            agent,
            "--no-wait",
            env=tmux_env,
        )
        assert result.returncode == 0, result.stderr
        retry_until((tmp_path / ready).exists)
        stopped = run_cli(
            home, "session", "stop", agent, "--mode", "graceful", "--timeout", "10", env=tmux_env
        )
        assert stopped.returncode == 0, stopped.stderr
        assert (tmp_path / said).exists(), agent  # it was asked its own way, and listened
        agree(home, tmux_env, agent, state="stopped", job_state=JobState.CANCELLED, tmux="dead")
