"""What a job's record says beyond its state, in words every view shares. Pure: no I/O.

Three facts a bare state hides:
- a `completed` job whose agent CLI denied some tool calls (`denied_tools`) did not do all it
  was asked: `completed, 2 tool calls denied`, never a plain success;
- a running job whose agent CLI is retrying its model API (`agent_retry`) is waiting, not
  working: `rate limited, retry 4/10 in 4s`, `API error 500, retry 2/10 in 1s`,
  `reconnecting, retry 2/5`;
- a queued attempt held until `not_before` (a rate limit's reset, a backoff) says when it
  starts: `waiting, resumes 14:05`.

`ps`, `show`, `why`, `top`, `submit --wait` and the dashboard (its page's script says the same
in JavaScript: keep the two alike) take their text from here. Every function accepts whatever
a record or a row holds (a damaged one too) and never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from delegate.core.timefmt import human_duration, local_minute, parse_iso

COMPLETED = "completed"
QUEUED = "queued"
TERMINAL = ("completed", "error", "cancelled", "failed")  # "failed": rows of older code
RATE_LIMIT_STATUS = 429
RATE_LIMIT_ERROR = "rate_limit"
RECONNECTING = "reconnecting"  # codex: its stream dropped and it connects again
# The agent CLIs as a person knows them (the `agent` of a job is its profile's name).
AGENT_NAMES = {"claude": "Claude Code", "codex": "Codex"}


def _tools(value: object) -> list[str]:
    """The denied tool names of a record or row (anything else: none)."""
    if not isinstance(value, list):
        return []
    return [str(name) for name in value]


def denied_count(denied_tools: object) -> str:
    """`1 tool call denied`, `3 tool calls denied`; `` when none were."""
    count = len(_tools(denied_tools))
    if not count:
        return ""
    return f"{count} tool call denied" if count == 1 else f"{count} tool calls denied"


def denied_summary(denied_tools: object) -> str:
    """The tools denied, each once in the order first denied: `Bash x2, WebFetch`."""
    counts: dict[str, int] = {}
    for name in _tools(denied_tools):
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


def outcome_words(status: object, denied_tools: object) -> str:
    """The state as a person should read it: `completed, 2 tool calls denied` for a job that
    completed with denials, else the state itself."""
    said = str(status or "-")
    denied = denied_count(denied_tools)
    return f"{said}, {denied}" if said == COMPLETED and denied else said


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) < 1e15 else None  # NaN, infinities


def _count(value: object) -> str | None:
    number = _number(value)
    return None if number is None else str(int(number))


def _ordinal(value: object) -> str | None:
    """An attempt or a most-attempts count; 0 is what the wrapper records when its CLI did not
    say, so it is not shown (`retry 4`, not `retry 4/0`)."""
    count = _count(value)
    return None if count in (None, "0") else count


def retry_left_s(agent_retry: object, now: datetime | None = None) -> float | None:
    """Seconds until the agent CLI's next try: seen `at`, plus its delay, less the time since;
    never negative. None when the record does not say (no delay, or no time it was seen)."""
    if not isinstance(agent_retry, Mapping):
        return None
    delay_ms = _number(agent_retry.get("retry_delay_ms"))
    seen = parse_iso(agent_retry.get("at"))
    if delay_ms is None or seen is None:
        return None
    now = now or datetime.now(UTC)
    # timestamps, not datetimes: a damaged year 9999 plus a delay must not overflow
    return max(0.0, seen.timestamp() + delay_ms / 1000.0 - now.timestamp())


def _retry_kind(agent_retry: Mapping[str, Any]) -> str:
    error, status = agent_retry.get("error"), _count(agent_retry.get("error_status"))
    if error == RECONNECTING:
        return "reconnecting"
    if status == str(RATE_LIMIT_STATUS) or error == RATE_LIMIT_ERROR:
        return "rate limited"
    if status is not None:
        return f"API error {status}"
    return f"API error ({error})" if isinstance(error, str) and error else "API error"


def agent_retry_words(agent_retry: object, now: datetime | None = None) -> str:
    """`rate limited, retry 4/10 in 4s`, `API error 500, retry 2/10 in 1s`, `reconnecting,
    retry 2/5`; `` when the agent is not retrying."""
    if not isinstance(agent_retry, Mapping):
        return ""
    attempt, most = _ordinal(agent_retry.get("attempt")), _ordinal(agent_retry.get("max_retries"))
    which = "retry" if attempt is None else f"retry {attempt}" + (f"/{most}" if most else "")
    left = retry_left_s(agent_retry, now)
    when = "" if left is None else f" in {human_duration(left)}"
    return f"{_retry_kind(agent_retry)}, {which}{when}"


def agent_name(agent: object) -> str:
    """`Claude Code` for the claude profile, `Codex` for codex, else `the agent (NAME)`."""
    name = str(agent or "")
    return AGENT_NAMES.get(name) or (f"the agent ({name})" if name else "the agent")


def agent_retry_sentence(agent: object, agent_retry: object) -> str:
    """`Claude Code is retrying its API after HTTP 429 (rate_limit): attempt 4 of 10`; ``
    when the agent is not retrying."""
    if not isinstance(agent_retry, Mapping):
        return ""
    who = agent_name(agent)
    attempt, most = _ordinal(agent_retry.get("attempt")), _ordinal(agent_retry.get("max_retries"))
    which = "" if attempt is None else f": attempt {attempt}" + (f" of {most}" if most else "")
    error, status = agent_retry.get("error"), _count(agent_retry.get("error_status"))
    error = error if isinstance(error, str) and error else None
    if error == RECONNECTING:
        return f"{who} is reconnecting to its API{which}"
    if status is not None:
        cause = f"HTTP {status}" + (f" ({error})" if error else "")
    else:
        cause = f"an error ({error})" if error else "an error"
    return f"{who} is retrying its API after {cause}{which}"


def resumes_at(status: object, not_before: object, now: datetime | None = None) -> str | None:
    """A queued job's `not_before` while it is still ahead (when it may start), else None."""
    moment = parse_iso(not_before)
    if status != QUEUED or moment is None:
        return None
    now = now or datetime.now(UTC)
    return str(not_before) if moment.timestamp() > now.timestamp() else None


def resumes_words(not_before: object, now: datetime | None = None, tz: object = None) -> str:
    """`waiting, resumes 14:05` (local time; another day's date before it)."""
    return f"waiting, resumes {local_minute(not_before, now=now, tz=tz)}"


def status_note(
    status: object,
    *,
    denied_tools: object = None,
    agent_retry: object = None,
    not_before: object = None,
    now: datetime | None = None,
    tz: object = None,
) -> str:
    """What a view says of a job beside its state, or ``: the wait of a queued attempt held
    until `not_before`, the agent's own API retry of an open job, or a completion's denials."""
    now = now or datetime.now(UTC)
    if resumes_at(status, not_before, now) is not None:
        return resumes_words(not_before, now, tz)
    if status not in TERMINAL and isinstance(agent_retry, Mapping):
        return agent_retry_words(agent_retry, now)
    if status == COMPLETED and denied_count(denied_tools):
        return outcome_words(status, denied_tools)
    return ""


def record_note(record: Mapping[str, Any], now: datetime | None = None, tz: object = None) -> str:
    """`status_note` of a record as `Job.public_dict` gives it."""
    return status_note(
        record.get("status"),
        denied_tools=record.get("denied_tools"),
        agent_retry=record.get("agent_retry"),
        not_before=record.get("not_before"),
        now=now,
        tz=tz,
    )
