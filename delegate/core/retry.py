"""Attempts: which endings start a new attempt of a job, after how long, and whether it resumes
the agent's conversation. Pure: the caller passes the random number and the time.

A job submitted with `--retries N --retry-on REASONS --backoff MIN..MAX` keeps that rule in its
record (`retry`), and so does each of its attempts (`attempt` counts them from 1, `retry_of`
names the previous one, `retried_by` the next). An attempt that ends with a listed reason while
attempts remain is followed by one more, `queued` until `not_before` (exponential backoff with
jitter). `on_interrupt = "requeue"` (profile or `submit --on-interrupt`) queues a new attempt at
once when the pane, the tmux server or the host vanished, resuming the conversation when one was
recorded; such requeues do not use up `--retries` but are bounded by `MAX_REQUEUES`.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import time
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple

from delegate.core.errors import UsageError
from delegate.core.model import RATE_LIMITED, Job, JobState
from delegate.core.timefmt import parse_iso

# `--retry-on` names -> the end-reason codes (the text before `:` in a record's `error`).
RETRY_ON: dict[str, tuple[str, ...]] = {
    "error": ("agent_error",),  # the agent (or the wrapper's exit report) said error
    "agent_exited": ("agent_exited",),
    "idle_timeout": ("idle_timeout",),
    "wall_timeout": ("wall_timeout",),
    "launch_failed": ("launch_failed", "never_launched", "assign_failed"),
    "host_lost": ("host_lost",),
    "lost": ("lost",),
    "tmux_gone": ("tmux_gone",),
}
# What `on_interrupt = "requeue"` picks up: the work was cut off, not finished badly.
INTERRUPTED = ("tmux_gone", "lost", "host_lost")
PANE_VANISHED = "agent_exited: its tmux session is gone"
ON_INTERRUPT = ("fail", "requeue")
MAX_REQUEUES = 3  # interruptions picked up again per job, beyond its --retries
JITTER = 0.25  # a delay is shortened by up to this share, so retries of many jobs spread out
RETRY_KEY_PREFIX = "retry-of-"  # the idempotency key of the attempt after job X
# An agent out of its usage or rate limit: `rate_limited: resets at 2026-11-26T01:00:03Z` (or
# `rate_limited: no reset time`); the attempt after it resumes the conversation at the reset.
RATE_LIMIT_MAX_WAIT_S = 6 * 3600.0  # `[rate_limit] max_wait`: a later reset is not waited for
MAX_RATE_LIMIT_RESUMES = 10  # rate-limited attempts picked up again per job, beyond --retries
RATE_LIMIT_BACKOFF = (60.0, 3600.0)  # no reset time given: exponential backoff between these
RATE_LIMIT_JITTER_S = 5.0  # a resume waits up to this much past the reset, so many spread out


class RetryRule(NamedTuple):
    """`submit --retries N --retry-on REASONS --backoff MIN..MAX` as stored in the record."""

    retries: int = 0
    on: tuple[str, ...] = ()
    backoff: tuple[float, float] = (1.0, 60.0)

    def to_dict(self) -> dict[str, Any]:
        return {"retries": self.retries, "on": list(self.on), "backoff": list(self.backoff)}

    @classmethod
    def of(cls, job: Job) -> "RetryRule":
        data: Mapping[str, Any] = job.retry or {}
        backoff = data.get("backoff") or (1.0, 60.0)
        return cls(
            int(data.get("retries") or 0),
            tuple(data.get("on") or ()),
            (float(backoff[0]), float(backoff[1])),
        )


class NextAttempt(NamedTuple):
    """What follows an ended attempt: a retry after `delay_s`, or a requeue that resumes."""

    kind: str  # "retry" or "requeue"
    delay_s: float
    resume: bool  # continue the recorded conversation


_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}  # "ms" before "s" and "m"


def parse_duration(text: str, what: str) -> float:
    """`1.5`, `30s`, `2m`, `1h`, `250ms` in seconds; UsageError naming `what` otherwise."""
    body = text.strip()
    unit = next((u for u in _UNIT_S if body.endswith(u)), None)
    number = body[: -len(unit)].rstrip() if unit else body
    whole, dot, fraction = number.partition(".")
    if not _digits(whole) or (dot and not _digits(fraction)):
        raise UsageError(f"{what}: {text!r} is not a duration (like 30s, 2m, 1h)")
    return float(number) * (_UNIT_S[unit] if unit else 1.0)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_backoff(text: str) -> tuple[float, float]:
    """`--backoff MIN..MAX` (`1s..4s`, `30..600`): two durations, 0 < MIN <= MAX."""
    low, sep, high = text.partition("..")
    if not sep:
        raise UsageError(f"--backoff {text!r}: expected MIN..MAX, like 1s..4s")
    first = parse_duration(low, "--backoff")
    last = parse_duration(high, "--backoff")
    if first <= 0 or last < first:
        raise UsageError(f"--backoff {text!r}: need 0 < MIN <= MAX")
    return first, last


def parse_retry_on(text: str) -> tuple[str, ...]:
    """`--retry-on error,idle_timeout`: the names of RETRY_ON; `cancelled` never retries."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise UsageError("--retry-on is empty")
    for name in names:
        if name == "cancelled":
            raise UsageError("--retry-on cancelled: a cancelled job is never retried")
        if name not in RETRY_ON:
            raise UsageError(
                f"--retry-on {name!r}: unknown; expected some of {', '.join(RETRY_ON)}"
            )
    return names


def retry_rule(retries: int | None, retry_on: str | None, backoff: str | None) -> RetryRule | None:
    """The rule the three submit options give, checked; None without `--retries`."""
    if retries is None:
        if retry_on is not None or backoff is not None:
            raise UsageError("--retry-on and --backoff need --retries N")
        return None
    if retries < 0:
        raise UsageError("--retries must be 0 or more")
    on = parse_retry_on(retry_on) if retry_on is not None else ("error",)
    bounds = parse_backoff(backoff) if backoff is not None else RetryRule().backoff
    return RetryRule(retries, on, bounds)


def check_on_interrupt(value: str | None) -> str | None:
    if value is not None and value not in ON_INTERRUPT:
        raise UsageError(f"--on-interrupt {value!r}: expected {' or '.join(ON_INTERRUPT)}")
    return value


def reason_code(reason: str | None) -> str:
    """`agent_exited: exit status 3` -> `agent_exited`."""
    return (reason or "").partition(":")[0].strip()


def interrupted(reason: str | None) -> bool:
    """Whether an ending cut the work off: its tmux server, its host or its pane vanished."""
    return reason_code(reason) in INTERRUPTED or (reason or "").startswith(PANE_VANISHED)


def backoff_s(attempt: int, low: float, high: float, rand: float) -> float:
    """The wait before attempt `attempt + 1`: LOW doubled per attempt, at most HIGH, less up
    to JITTER of it (`rand` in [0, 1))."""
    base = min(high, low * 2.0 ** max(0, attempt - 1))
    return float(base * (1.0 - JITTER * rand))


def rate_limit_reason(reset_epoch: float | None) -> str:
    """The end reason of an attempt that hit its agent's usage or rate limit."""
    if reset_epoch is None:
        return f"{RATE_LIMITED}: no reset time"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(reset_epoch))
    return f"{RATE_LIMITED}: resets at {stamp}"


def _rate_limit_wait(
    job: Job, rand: float, now: datetime | None, max_wait_s: float, jitter_s: float
) -> float | None:
    """Seconds until the rate-limited `job` may resume: its reset (plus up to `jitter_s`),
    else a backoff; None when the reset is further off than `max_wait_s`."""
    reset = parse_iso((job.error or "").partition(" resets at ")[2].strip() or None)
    if reset is None or now is None:
        return backoff_s(job.attempt or 1, *RATE_LIMIT_BACKOFF, rand) if reset is None else 0.0
    wait = max(0.0, (reset - now).total_seconds()) + jitter_s * rand
    return wait if wait <= max_wait_s else None


def next_attempt(
    job: Job,
    rand: float = 0.0,
    *,
    now: datetime | None = None,
    max_wait_s: float = RATE_LIMIT_MAX_WAIT_S,
    jitter_s: float = RATE_LIMIT_JITTER_S,
) -> NextAttempt | None:
    """What follows `job` (ended): None when nothing does (completed, cancelled, a reason not
    listed, attempts used up, a rate limit resetting later than `max_wait_s`, or a next attempt
    exists already). `now` times a rate-limited resume (without it, its delay is 0), which
    waits up to `jitter_s` past the reset (`rand` of it)."""
    if job.status is not JobState.ERROR or job.retried_by:
        return None
    attempt = job.attempt or 1
    rule = RetryRule.of(job)
    code = reason_code(job.error)
    if code == RATE_LIMITED and attempt <= rule.retries + MAX_RATE_LIMIT_RESUMES:
        wait = _rate_limit_wait(job, rand, now, max_wait_s, jitter_s)
        return None if wait is None else NextAttempt("resume", wait, bool(job.conversation_id))
    requeue = interrupted(job.error) and job.on_interrupt == "requeue"
    if requeue and attempt <= rule.retries + MAX_REQUEUES:
        return NextAttempt("requeue", 0.0, bool(job.conversation_id))
    listed = {c for name in rule.on for c in RETRY_ON.get(name, ())}
    if code in listed and attempt < rule.retries + 1:
        return NextAttempt("retry", backoff_s(attempt, *rule.backoff, rand), False)
    return None


def effective_state(job: Job) -> JobState:
    """The state a dependent sees: an attempt that ended and will be followed by another (not
    yet recorded) counts as queued, so its dependents wait for the final attempt."""
    if job.status.terminal and next_attempt(job) is not None:
        return JobState.QUEUED
    return job.status


def attempt_label(job: Job) -> str:
    """`2/3` (attempt of the attempts allowed), `2` for a job retried by hand, `` for one."""
    attempt = job.attempt or 1
    allowed = RetryRule.of(job).retries + 1 if job.retry else None
    if allowed is not None and allowed > 1:
        return f"{attempt}/{allowed}"
    return str(attempt) if attempt > 1 else ""
