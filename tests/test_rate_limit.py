"""Rate limits: the words each CLI ends with when it is out of its limit, read into a
`rate_limited` ending. Resuming at the reset with the real CLIs: tests/test_real_claude.py and
tests/test_real_codex.py; whoever runs, on time: tests/test_rate_limit_resume.py."""

from __future__ import annotations

import json
from datetime import UTC

from delegate.core.channels import ClaudeStream, CodexJson, codex_wait_s, usage_limit

CODEX_LIMIT = (
    "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try"
    " again in 5 days 22 hours 11\nminutes."
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
