"""`delegate why JOB` and the attempts and transitions `show` lists: read from the records and
the audit logs, put into words by core/why."""

from __future__ import annotations

from typing import Any

from delegate.adapters.audit import REGISTERED, STATUS_CHANGED
from delegate.core.model import Job
from delegate.core.retry import attempt_label
from delegate.core.why import transitions, why_text
from delegate.services.state import State


def job_transitions(state: State, job: Job) -> list[dict[str, Any]]:
    """The job's state changes, oldest first, each with its source and sentence."""
    entries = (
        e
        for e in state.audit.iter_events(job.job_id)
        if e.get("kind") in (REGISTERED, STATUS_CHANGED)
    )
    return transitions(entries, job.public_dict())


def attempts(state: State, job: Job) -> list[dict[str, Any]]:
    """Every attempt of `job`'s chain, first to last: its id, number, state, reason and why."""
    out = []
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
                "why": why_text(steps),
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
        "why": why_text(steps),
        "transitions": steps,
        "attempts": attempts(state, job),
    }
