"""The real Claude Code CLI (installed by `make` into .cache/agents) through `delegate`, in real
tmux, against the suite's scripted Anthropic Messages server (tests/models): approvals through
its PreToolUse hook, denied work, its retries as a waiting state, a refused key, MCP tools,
resume, and failures in its own words. Only `delegate` commands act; the registry is read to
check what they recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import json_lines, popen_cli, retry_until, run_cli
from .models import AnthropicServer, bash, claude_env, claude_mcp, text
from .models.cli import AGENT_BIN
from .models.script import Drop, rate_limited, server_error, unauthorized

API_KEY = "sk-ant-scripted-0123456789"
VENV_BIN = str(Path(sys.executable).parent)


def _setup(
    home: Path, server: AnthropicServer, extra: str = "", profile: str = "", **options: Any
) -> None:
    """delegate.toml: the built-in claude profile pointed at the scripted server (what a person
    does for a gateway; the key comes from the environment through its `pass_env`), with
    `profile` lines in its table and `extra` tables after it."""
    env = {k: v for k, v in claude_env(server, **options).items() if v and "KEY" not in k}
    env.pop("CLAUDE_CODE_OAUTH_TOKEN", None)
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in sorted(env.items()))
    home.mkdir(parents=True, exist_ok=True)
    config = f"[profiles.claude]\nenv = {{ {pairs} }}\n{profile}\n{extra}"
    (home / "delegate.toml").write_text(config)


def _env(tmux_env: dict[str, str], **more: str) -> dict[str, str]:
    path = f"{VENV_BIN}:{AGENT_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**tmux_env, "PATH": path, "ANTHROPIC_API_KEY": API_KEY, **more}


def _submit(home: Path, env: dict[str, str], workdir: Path, *extra: str, wait: bool = False):
    workdir.mkdir(parents=True, exist_ok=True)
    args = ["submit", "--agent", "claude", "--prompt", "Do the task.", "--workdir", str(workdir)]
    args += ["--idle-timeout", "60", "--wall-timeout", "120", *extra]
    if wait:
        return run_cli(home, *args, "--wait", env=env, timeout=150)
    result = run_cli(home, *args, "--no-wait", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json_lines(result.stdout)[-1]["job_id"]


def _job(home: Path, job_id: str):
    return State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id)


def _ended(home: Path, job_id: str, timeout: float = 60.0):
    return retry_until(
        lambda: (job := _job(home, job_id)).status.terminal and job, timeout=timeout, interval=0.1
    )


def _waiting(home: Path, env: dict[str, str], timeout: float = 30.0) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]]:
        out = run_cli(home, "approvals", "--json", env=env)
        return json_lines(out.stdout) if out.returncode == 0 else []

    return retry_until(listed, timeout=timeout, interval=0.1)


def _tool_results(server: AnthropicServer) -> list[dict[str, Any]]:
    """The tool_result blocks claude sent back to the model, in order."""
    found = []
    for request in server.turn_requests:
        for message in request.body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result" and block not in found:
                    found.append(block)
    return found


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content)
    return str(content)


def test_a_gated_call_waits_for_a_person_and_runs_once_approved(home, tmux_env, tmp_path):
    server = AnthropicServer([bash("touch made-by-bash"), text("made it")]).start()
    try:
        _setup(home, server)
        env = _env(tmux_env)
        work = tmp_path / "work"
        job_id = _submit(home, env, work)
        waiting = _waiting(home, env)
        assert len(waiting) == 1, waiting
        (request,) = waiting
        assert request["job_id"] == job_id and request["tool"] == "Bash"
        assert "touch made-by-bash" in request["summary"]
        assert not (work / "made-by-bash").exists()  # it waits: nothing ran before the answer
        approved = run_cli(home, "approve", job_id, env=env)
        assert approved.returncode == 0, approved.stderr
        job = _ended(home, job_id)
        assert job.status is JobState.COMPLETED, job.error
        assert (work / "made-by-bash").exists()
        assert not job.denied_tools
        (result,) = _tool_results(server)
        assert not result.get("is_error"), result
        decided = State.open(env={"DELEGATE_HOME": str(home)}).audit.read_events(
            job_id, kind="permission_decided"
        )
        assert [(d["tool"], d["behavior"]) for d in decided] == [("Bash", "allow")]
        assert decided[0]["maker"] not in ("timeout", "remembered")
    finally:
        server.stop()


def test_a_denied_call_is_never_a_plain_success(home, tmux_env, tmp_path):
    server = AnthropicServer([bash("touch nope"), text("could not")]).start()
    try:
        _setup(home, server)
        env = _env(tmux_env)
        work = tmp_path / "work"
        job_id = _submit(home, env, work)
        _waiting(home, env)
        denied = run_cli(home, "approve", job_id, "--deny", "--reason", "not today", env=env)
        assert denied.returncode == 0, denied.stderr
        job = _ended(home, job_id)
        assert not (work / "nope").exists()
        assert job.status is JobState.COMPLETED
        assert job.denied_tools == ["Bash"]
        (result,) = _tool_results(server)
        assert result.get("is_error") and "not today" in _text(result)
        shown = run_cli(home, "show", job_id, env=env)
        assert "1 tool call denied" in shown.stdout, shown.stdout
        audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
        assert [e["tool_name"] for e in audit.read_events(job_id, kind="tool_denied")] == ["Bash"]
    finally:
        server.stop()


def test_rules_and_profile_settings_decide_without_a_person(home, tmux_env, tmp_path):
    """A rule allows `touch *`; `allowed_tools` lets Claude run Write itself; `dontAsk` makes
    Claude deny what nothing allowed, on the spot, and the record says so."""
    server = AnthropicServer(
        [
            bash("touch by-rule"),
            bash("rm -f by-rule"),
            text("done"),
        ]
    ).start()
    try:
        rule = '[[approvals.rules]]\ntool = "Bash"\nmatch = "touch *"\ndecision = "allow"\n'
        _setup(home, server, rule, profile='permission_mode = "dontAsk"\n')
        env = _env(tmux_env)
        work = tmp_path / "work"
        started = time.monotonic()
        job_id = _submit(home, env, work)
        job = _ended(home, job_id)
        assert time.monotonic() - started < 40  # no person was waited for
        assert (work / "by-rule").exists()  # the rule allowed the touch, the rm was not run
        assert job.status is JobState.COMPLETED and job.denied_tools == ["Bash"]
        launch = job.launch["argv"]
        assert "--permission-mode=dontAsk" in launch
        audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
        makers = [d["maker"] for d in audit.read_events(job_id, kind="permission_decided")]
        assert makers == ["rule 1 (allow Bash touch *)"]
    finally:
        server.stop()
