"""`delegate why JOB` and the attempts and transitions `show` lists: read from the records and
the audit logs, put into words by core/why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from delegate.adapters.audit import REGISTERED, STATUS_CHANGED
from delegate.core.errors import DelegateError
from delegate.core.model import Job
from delegate.core.retry import attempt_label
from delegate.core.why import present_fact, transitions, why_text
from delegate.services.state import State


def job_transitions(state: State, job: Job) -> list[dict[str, Any]]:
    """The job's state changes, oldest first, each with its source and sentence."""
    entries = (
        e
        for e in state.audit.iter_events(job.job_id)
        if e.get("kind") in (REGISTERED, STATUS_CHANGED)
    )
    return transitions(entries, job.public_dict())


def _why(state: State, job: Job, steps: list[dict[str, Any]], now: datetime) -> str:
    """The chain of changes, then what holds the job now (core/why.present_fact)."""
    previous = None
    if job.retry_of:
        try:
            previous = state.registry.get(job.retry_of).error
        except DelegateError:
            previous = None  # a chain's record removed by hand: say the rest
    now_fact = present_fact(job.public_dict(), now, previous_error=previous)
    return why_text(steps) + (f"; now {now_fact}" if now_fact else "")


def attempts(state: State, job: Job) -> list[dict[str, Any]]:
    """Every attempt of `job`'s chain, first to last: its id, number, state, reason and why."""
    out = []
    now = datetime.now(UTC)
    for one in state.attempts(job):
        steps = job_transitions(state, one)
        out.append(
            {
                "job_id": one.job_id,
                "attempt": one.attempt or 1,
                "label": attempt_label(one) or str(one.attempt or 1),
                "status": one.status.value,
                "reason": one.error,
                "not_before": one.not_before,
                "why": _why(state, one, steps, now),
            }
        )
    return out


def explain(state: State, job_id: str) -> dict[str, Any]:
    """What `why` prints: the job's transitions, its sentence, and its attempts."""
    job = state.registry.get(job_id)
    steps = job_transitions(state, job)
    return {
        "job_id": job.job_id,
        "status": job.status.value,
        "why": _why(state, job, steps, datetime.now(UTC)),
        "transitions": steps,
        "attempts": attempts(state, job),
    }
