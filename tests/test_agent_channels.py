"""Agents' own channels: a fake Claude Code (stream-json and hooks from its --settings file)
and a fake Codex (`exec --json`) in real tmux, and the parsers on garbled transcripts."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

from delegate.core.channels import ClaudeStream, CodexJson, hook_events
from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import json_lines, run_cli

AGENTS = Path(__file__).resolve().parent / "agents"


def _profiles(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    claude = [sys.executable, str(AGENTS / "fake_claude.py")]
    codex = [sys.executable, str(AGENTS / "fake_codex.py")]
    stream = ["--output-format", "stream-json", "--verbose", "--settings", "{settings_file}"]
    (home / "delegate.toml").write_text(
        textwrap.dedent(f"""
        # the fake agent's permission request waits for a decision: nobody answers here, so
        # the timeout does (deny) after a second
        [approvals]
        timeout = 1

        [profiles.fakeclaude]
        command = {json.dumps([*claude, "-p", *stream])}
        resume = {json.dumps([*claude, "-p", "--resume", "{conversation_id}", *stream])}
        prompt = "stdin"
        preamble = false
        channel = "claude-stream"

        [profiles.fakecodex]
        command = {json.dumps([*codex, "exec", "--json", "-"])}
        resume = {json.dumps([*codex, "exec", "--json", "resume", "{conversation_id}", "-"])}
        prompt = "stdin"
        preamble = false
        channel = "codex-json"
    """)
    )


def test_a_claude_like_agent_reports_through_its_channel(home: Path, tmux_env, tmp_path):
    _profiles(home)
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "fakeclaude",
        "--prompt",
        "tidy the build",
        "--workdir",
        str(tmp_path),
        "--session",
        "claude-work",
        env=tmux_env,
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "started" and kinds[-1] == "completed"
    asked = [e for e in events if e["event"] == "permission_required"]
    assert asked and asked[0]["data"]["tool_name"] == "Bash"
    assert asked[0]["data"]["tool_input"] == {"command": "rm -rf build"}
    assert any(e["detail"] == "turn ended" for e in events if e["event"] == "progress")
    done = events[-1]
    assert done["data"]["num_turns"] == 3 and done["data"]["cost_usd"] == 0.0123
    assert done["detail"] == "All done"
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job = state.registry.get(done["job_id"])
    assert job.status is JobState.COMPLETED
    assert job.conversation_id and job.conversation_id.startswith("conv-")
    assert (job.cost_usd, job.tokens_in, job.tokens_out) == (0.0123, 100, 50)
    status = state.audit.read_status(job.job_id)  # what `delegate report` reads
    assert status is not None and (status["cost_usd"], status["tokens_out"]) == (0.0123, 50)
    assert state.audit.read_events(job.job_id, kind="channel_malformed")[0]["lines"] == 1
    settings = json.loads((home / "logs" / job.job_id / "claude-settings.json").read_text())
    assert set(settings["hooks"]) == {
        "PreToolUse",
        "PermissionRequest",
        "Notification",
        "Stop",
        "SessionStart",
    }

    resumed = run_cli(home, "session", "resume", "claude-work", "--wait", env=tmux_env)
    assert resumed.returncode == 0, resumed.stderr
    assert f"continues conversation {job.conversation_id}" in resumed.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[argv.index("--resume") + 1] == job.conversation_id
    listed = json_lines(run_cli(home, "session", "list", "--json", env=tmux_env).stdout)
    assert listed[0]["conversation_id"] == job.conversation_id
    assert len(listed[0]["jobs"]) == 2


def test_a_codex_like_agent_reports_through_its_channel(home: Path, tmux_env, tmp_path):
    _profiles(home)
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "fakecodex",
        "--prompt",
        "do it",
        "--workdir",
        str(tmp_path),
        "--session",
        "codex-work",
        env=tmux_env,
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    assert events[1]["data"]["usage"]["output_tokens"] == 7
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job = state.registry.get(events[0]["job_id"])
    assert job.conversation_id and job.conversation_id.startswith("thread-")
    resumed = run_cli(
        home, "session", "resume", "codex-work", "--prompt", "FAIL now", "--wait", env=tmux_env
    )
    assert resumed.returncode == 1, resumed.stderr
    argv = json.loads((tmp_path / "codex-argv.json").read_text())
    assert argv[argv.index("resume") + 1] == job.conversation_id
    failed = json_lines(resumed.stdout)
    assert failed[-1]["event"] == "error" and failed[-1]["detail"] == "model refused the task"


def test_stream_parsers_count_garbage_and_never_fail():
    claude = ClaudeStream()
    lines = [
        b'{"type": "system", "subtype": "init", "session_id": "abc"}',
        b"not json at all",
        b'{"type": "result", "subtype": "error_max_turns", "is_error": true, "num_turns": 9',
        b"[1, 2, 3]",
        b"",
        b'{"type": "result", "subtype": "error_max_turns", "is_error": true, "num_turns": 9}',
    ]
    out = [event for line in lines for event in claude.feed(line)]
    assert out[0].conversation_id == "abc"
    assert out[1].event == "error" and out[1].data["num_turns"] == 9
    assert claude.malformed == 3
    codex = CodexJson()
    assert codex.feed(b"\xff\xfe garbage") == [] and codex.malformed == 1
    assert codex.finish() == []  # it never spoke: the exit status decides
    codex.feed(b'{"type": "error", "message": "stream disconnected"}')
    assert codex.finish() == []  # failed: no completion after it


def test_hook_payloads_map_to_events():
    assert hook_events({"hook_event_name": "Notification", "message": "idle"}) == []
    [asked] = hook_events(
        {
            "hook_event_name": "Notification",
            "notification_type": "elicitation_dialog",
            "message": "Which branch?",
        }
    )
    assert asked.event == "permission_required" and asked.detail == "Which branch?"
    assert hook_events({"hook_event_name": "SessionStart"}) == []  # no id: nothing to record
    assert hook_events({"hook_event_name": "Bogus"}) == []


def test_delegate_hook_never_blocks_on_bad_input(home: Path):
    for stdin in ("", "{not json", "[1]", '{"hook_event_name": "Stop"}'):
        result = run_cli(home, "hook", input=stdin)
        assert result.returncode == 0, result.stderr
        assert "Traceback" not in result.stderr
