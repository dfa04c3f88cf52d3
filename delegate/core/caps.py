"""The concurrency cap: how many jobs may run at once, for all agents and per agent.

Pure, and light on purpose: `delegate.toml` is read into `Caps` by config/profiles, which the
lock fast path imports, so this module imports nothing beyond the core's model.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

from delegate.core.model import Job, JobState, Session, SessionState


class Caps(NamedTuple):
    """`max_running` from delegate.toml: for all jobs, and per profile (agent name)."""

    total: int | None = None
    per_agent: Mapping[str, int] = MappingProxyType({})


def occupies_slot(job: Job) -> bool:
    """A job that counts against the cap: running, or admitted to start (pending with a spec)."""
    return job.status is JobState.RUNNING or (job.status is JobState.PENDING and bool(job.launch))


def may_start(
    job: Job,
    others: Sequence[Job],
    caps: Caps,
    busy: Mapping[str, str | None] | None = None,
) -> bool:
    """Whether `job` may start now beside `others` (the other open jobs).

    `busy` (job id -> agent) names the jobs whose session is still recorded running: a job
    that just ended holds its slot until its session is stopped, so the session history never
    shows more sessions running than the cap allows.
    """
    active = {j.job_id: j.agent for j in others if occupies_slot(j)}
    for job_id, agent in (busy or {}).items():
        active.setdefault(job_id, agent)
    active.pop(job.job_id, None)
    if caps.total is not None and len(active) >= caps.total:
        return False
    agent_cap = caps.per_agent.get(job.agent or "")
    if agent_cap is not None and sum(1 for a in active.values() if a == job.agent) >= agent_cap:
        return False
    return job.max_running is None or len(active) < job.max_running


def busy_sessions(rows: Sequence[Session]) -> dict[str, str | None]:
    """Job id -> agent of the session rows still recorded running a job."""
    return {r.job_id: r.agent for r in rows if r.state is SessionState.RUNNING and r.job_id}
