"""Agents' own channels: the parsers on garbled transcripts, and `delegate hook` on bad input.
The real Claude Code and Codex through their channels: tests/test_real_claude.py and
tests/test_real_codex.py."""

from __future__ import annotations

from pathlib import Path

from delegate.core.channels import ClaudeStream, CodexJson, hook_events

from .helpers import run_cli


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
