"""The real Claude Code and Codex CLIs, installed by `make` into .cache/agents: our profiles'
flags exist in them, and a real `claude -p` without credentials ends its job in error with the
CLI's own message. These fail, never skip, when the install is missing."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from delegate.config.profiles import BUILTIN
from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import json_lines, run_cli

ROOT = Path(__file__).resolve().parent.parent
AGENT_BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"


def _help(*argv: str) -> str:
    program = AGENT_BIN / argv[0]
    assert program.exists(), f"{program} is missing: `make agents` installs it"
    result = subprocess.run(
        [str(program), *argv[1:], "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout + result.stderr


def _flags(command: tuple[str, ...] | None) -> list[str]:
    """The options of `command` by name (`--resume=ID`: `--resume`; `-` and `--` are none)."""
    names = [part.split("=", 1)[0] for part in command or () if part.startswith("-")]
    return [name for name in names if name not in ("-", "--")]


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_every_flag_our_profiles_pass_exists_in_the_real_cli(agent: str):
    profile = BUILTIN[agent]
    for command in (profile.command, profile.resume):
        assert command is not None
        if agent == "claude":
            text = _help("claude")
        elif "resume" in command:
            text = _help("codex", "exec", "resume")
            assert "SESSION_ID" in text.upper()
        else:
            text = _help("codex", "exec")
        for flag in _flags(command):
            if agent == "codex" and "resume" in command and flag == "--json":
                text_exec = _help("codex", "exec")  # an `exec` option, before `resume`
                assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text_exec), flag
                continue
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), (agent, flag)


def test_a_real_claude_without_credentials_ends_in_error(home: Path, tmux_env, tmp_path: Path):
    env = {**tmux_env, "PATH": f"{AGENT_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"):
        env[name] = ""  # present but empty: no credentials, whatever this machine has
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "claude",
        "--prompt",
        "Say hello.",
        "--workdir",
        str(tmp_path),
        "--idle-timeout",
        "120",
        env=env,
        timeout=180,
    )
    assert result.returncode == 1, result.stderr
    events = json_lines(result.stdout)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job = state.registry.get(events[0]["job_id"])
    assert job.status is JobState.ERROR
    log = (home / "logs" / job.job_id / "agent.log").read_text()
    message = json_lines("\n".join(line for line in log.splitlines() if '"type":"result"' in line))[
        -1
    ]["result"]
    # the CLI's own words, as redaction leaves them in `detail` ("/login" reads as a path)
    from delegate.core.protocol import redact

    assert "Not logged in" in message
    assert job.error == f"agent_error: {redact(message)}", (message, job.error)
    assert job.conversation_id  # its system/init line named the conversation
