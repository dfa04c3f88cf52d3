"""Rate limits (issue 22, item 3): an agent that reports its usage limit with a reset time ends
that attempt `rate_limited`, and the next attempt resumes the same conversation after the
reset, on real tmux with a stand-in speaking the pinned Claude CLI's stream-json."""

from __future__ import annotations

import json
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path

from delegate.core.channels import ClaudeStream, CodexJson, codex_wait_s, usage_limit
from delegate.core.model import JobState
from delegate.core.timefmt import parse_timestamp

from .helpers import run_cli
from .test_monitor import open_state

LIMITED = Path(__file__).parent / "agents" / "limited.py"
FAKE_CODEX = Path(__file__).parent / "agents" / "fake_codex.py"
CODEX_LIMIT = (
    "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try"
    " again in 5 days 22 hours 11\nminutes."
)


def stand_in_profile(
    home: Path, name: str, command: list[str], resume: list[str], channel: str
) -> None:
    """delegate.toml with profile `name`: a stand-in agent reading its prompt on stdin."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        textwrap.dedent(f"""
        [profiles.{name}]
        command = {json.dumps(command)}
        resume = {json.dumps(resume)}
        prompt = "stdin"
        preamble = false
        channel = "{channel}"
        """)
    )


def test_the_codex_usage_limit_message_becomes_a_rate_limited_ending():
    assert codex_wait_s(CODEX_LIMIT) == 5 * 86400 + 22 * 3600 + 11 * 60
    assert codex_wait_s("try again in 1 hour 1 minute") == 3660
    assert usage_limit(CODEX_LIMIT, now=0) == "rate_limited: resets at 1970-01-06T22:11:00Z"
    # a date and clock time (codex past a day), read in the agent's zone (UTC here)
    at = "You've hit your usage limit. Upgrade to Plus, or try again at Jul 5th, 2026 8:19 PM."
    assert usage_limit(at, now=0, tz=UTC) == "rate_limited: resets at 2026-07-05T20:20:00Z"
    too_many = "stream error: exceeded retry limit, last status: 429 Too Many Requests"
    assert usage_limit(too_many, now=0) == "rate_limited: no reset time"
    assert usage_limit("model refused the task", now=0) is None
    parser = CodexJson(clock=lambda: 100.0)
    [event] = parser.feed(json.dumps({"type": "turn.failed", "error": {"message": CODEX_LIMIT}}))
    assert event.event == "error" and event.detail == "rate_limited: resets at 1970-01-06T22:12:40Z"


def test_the_claude_usage_limit_message_becomes_a_rate_limited_ending():
    assert usage_limit("Claude AI usage limit reached|1764118800") == (
        "rate_limited: resets at 2025-11-26T01:00:00Z"
    )
    assert usage_limit("API Error: rate limit exceeded") == "rate_limited: no reset time"
    assert usage_limit("the tests failed") is None
    [event] = ClaudeStream().feed(
        json.dumps(
            {"type": "result", "is_error": True, "result": "Claude AI usage limit reached|0"}
        ).encode()
    )
    assert (event.event, event.detail) == ("error", "rate_limited: resets at 1970-01-01T00:00:00Z")


def test_a_rate_limited_attempt_resumes_after_the_reset(home: Path, tmux_env, tmp_path: Path):
    command = [sys.executable, str(LIMITED), "-p", "--output-format", "stream-json"]
    resume = [*command, "--resume", "{conversation_id}"]
    stand_in_profile(home, "limited", command, resume, "claude-stream")
    result = run_cli(
        home,
        "submit",
        "--agent",
        "limited",
        "--prompt",
        "go",
        "--workdir",
        str(tmp_path),
        "--wait",
        "--json",
        env=tmux_env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr  # the final attempt's outcome
    state = open_state(home)
    [first] = [j for j in state.registry.list() if not j.retry_of]
    assert first.status is JobState.ERROR
    assert first.error is not None and first.error.startswith("rate_limited: resets at ")
    assert first.conversation_id == "conv-limited"
    second = state.registry.get(str(first.retried_by))
    assert second.status is JobState.COMPLETED and second.attempt == 2
    reset = datetime.strptime(first.error.split(" at ")[1], "%Y-%m-%dT%H:%M:%SZ")
    assert parse_timestamp(second.started_at or "") >= reset.replace(tzinfo=UTC)
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 2
    assert runs[1]["argv"][-2:] == ["--resume", "conv-limited"]  # the same conversation


def test_a_rate_limited_codex_attempt_resumes_its_thread_after_the_wait(
    home: Path, tmux_env, tmp_path: Path
):
    command = [sys.executable, str(FAKE_CODEX), "exec", "--json", "-"]
    resume = [sys.executable, str(FAKE_CODEX), "exec", "--json", "resume", "{conversation_id}", "-"]
    stand_in_profile(home, "codexlimited", command, resume, "codex-json")
    argv = ["submit", "--agent", "codexlimited", "--prompt", "LIMITED work", "--wait", "--json"]
    result = run_cli(home, *argv, "--workdir", str(tmp_path), env=tmux_env, timeout=120)
    assert result.returncode == 0, result.stderr  # the final attempt's outcome
    state = open_state(home)
    [first] = [j for j in state.registry.list() if not j.retry_of]
    assert first.status is JobState.ERROR
    assert first.error is not None and first.error.startswith("rate_limited: resets at ")
    thread = first.conversation_id
    assert thread and thread.startswith("thread-")
    second = state.registry.get(str(first.retried_by))
    assert second.status is JobState.COMPLETED and second.attempt == 2
    runs = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 2
    assert runs[1]["argv"][-3:] == ["resume", thread, "-"]  # the same thread
    # the reset is kept to the second: at least 2 s of the 3 were waited, not a quick retry
    assert runs[1]["at"] - runs[0]["at"] >= 2.0
