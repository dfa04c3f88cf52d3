"""The agent's environment is explicit: nothing of the submitter's or the tmux server's leaks in,
and an agent's command is found at submit time on the PATH a login shell would have."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from delegate.services.jobs.agent_env import BASE
from delegate.services.state import State

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli

SECRETS = {
    "MQTT_PASSWORD": "delegator-password",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "LEAK_MARKER": "leaked-marker",
}
DELEGATE_VARS = {
    "DELEGATE_JOB_ID",
    "DELEGATE_HOME",
    "DELEGATE_BUS",
    "DELEGATE_TMUX_SOCKET",
    "DELEGATE_PUBLISH_SOCKET",
}


def _agent_env(home: Path, job_id: str) -> dict[str, str]:
    text = (home / "logs" / job_id / "agent.log").read_text()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_agent_gets_exactly_the_documented_environment(home: Path, tmux_env, tmp_path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        textwrap.dedent("""
        [profiles.envdump]
        command = ["env"]
        preamble = false
        env = { PROFILE_SET = "from-the-profile" }
        pass_env = ["PASSED_ON", "NOT_SET_ANYWHERE"]
    """)
    )
    socket = tmux_env["DELEGATE_TMUX_SOCKET"]
    # a tmux server started earlier, from a shell full of secrets, with more in its global env
    polluted = {**tmux_env, **SECRETS, "PATH": "/usr/bin:/bin"}
    subprocess.run(
        ["tmux", "-L", socket, "new-session", "-d", "-s", "seed", "sleep 300"],
        env=polluted,
        check=True,
    )
    subprocess.run(
        ["tmux", "-L", socket, "set-environment", "-g", "GLOBAL_LEAK", "tmux-global-value"],
        check=True,
    )
    submitter = {**tmux_env, **SECRETS, "PASSED_ON": "wanted", "TZ": "UTC"}
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "envdump",
        "--prompt",
        "x",
        "--workdir",
        str(tmp_path),
        env=submitter,
    )
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[0]["job_id"]
    env = _agent_env(home, job_id)
    allowed = set(BASE) | {"PATH", "PROFILE_SET", "PASSED_ON"} | DELEGATE_VARS
    assert set(env) <= allowed, set(env) - allowed
    assert env["PROFILE_SET"] == "from-the-profile" and env["PASSED_ON"] == "wanted"
    assert env["DELEGATE_JOB_ID"] == job_id and env["TZ"] == "UTC"
    assert "NOT_SET_ANYWHERE" not in env
    log = (home / "logs" / job_id / "agent.log").read_text()
    for value in [*SECRETS.values(), "tmux-global-value"]:
        assert value not in log
    # and none of it is in the pane's argv either
    record = (home / "jobs" / f"{job_id}.json").read_text()
    assert "delegator-password" not in record


def _fake_home(tmp_path: Path) -> Path:
    user_home = tmp_path / "user"
    local_bin = user_home / ".local" / "bin"
    local_bin.mkdir(parents=True)
    agent = local_bin / "fake-agent"
    agent.write_text('#!/bin/sh\ncat > "$1"\n')
    agent.chmod(0o755)
    return user_home


def _cron_submit(home: Path, user_home: Path, socket: str, *args: str):
    env = {  # what cron gives: no terminal, HOME and a minimal PATH, and what the line sets
        "HOME": str(user_home),
        "PATH": "/usr/bin:/bin",
        "DELEGATE_HOME": str(home),
        "DELEGATE_TMUX_SOCKET": socket,
        "TMUX_TMPDIR": os.environ["TMUX_TMPDIR"],
    }
    return subprocess.run(
        [sys.executable, "-m", "delegate", "submit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_cron_submit_finds_the_agent_in_local_bin(home: Path, tmux_env, tmp_path: Path):
    user_home = _fake_home(tmp_path)
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[profiles.local]\ncommand = ["fake-agent", "{workdir}/done.txt"]\npreamble = false\n'
    )
    result = _cron_submit(
        home,
        user_home,
        tmux_env["DELEGATE_TMUX_SOCKET"],
        "--agent",
        "local",
        "--prompt",
        "ran from cron",
        "--workdir",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    # no TTY, as under cron: submit returned the job id at once; the agent runs on
    done = tmp_path / "done.txt"
    assert retry_until(lambda: done.exists() and done.read_text()) == "ran from cron"
    [job] = State.open(env={"DELEGATE_HOME": str(home)}).registry.list()
    assert job.launch["argv"][0] == str(user_home / ".local" / "bin" / "fake-agent")


def test_a_missing_command_is_refused_before_anything_exists(home: Path, tmux_env, tmp_path):
    user_home = _fake_home(tmp_path)
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text('[profiles.gone]\ncommand = ["no-such-agent-x"]\n')
    socket = tmux_env["DELEGATE_TMUX_SOCKET"]
    for args in (
        ["--agent", "gone"],
        ["--cmd", "no-such-tool-y --flag"],
        ["--cmd", "FOO=1 /no/such/path/z"],
    ):
        result = _cron_submit(home, user_home, socket, *args, "--prompt", "x")
        assert result.returncode == 64, result.stderr
        assert_one_line_error(result)
        assert "not found" in result.stderr
    for args in (["--cmd", "cd /tmp && true"], ["--cmd", "exit 0"], ["--cmd", "fake-agent out"]):
        result = _cron_submit(
            home, user_home, socket, *args, "--prompt", "x", "--workdir", str(tmp_path)
        )
        assert result.returncode == 0, (args, result.stderr)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    assert len(state.registry.list()) == 3  # only the accepted ones became jobs
    sessions = subprocess.run(
        ["tmux", "-L", socket, "list-sessions", "-F", "#{session_name}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    assert len(sessions) == 3
