"""Whether a job may start now: the concurrency caps (for all jobs, per agent, per group, its
own `--max-running`), its group being paused, and its dependencies (`submit --after`).

`waiting_for` says in words why a job may not start yet (what `ps` shows for a queued job);
`may_start` is its yes or no. Pure, and light on purpose: `delegate.toml` is read into `Caps`
by config/profiles, which the lock fast path imports, so this module imports nothing beyond the
core's model.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import NamedTuple

from delegate.core.model import Job, JobState, Session, SessionState
from delegate.core.retry import attempt_label
from delegate.core.timefmt import local_time, parse_iso


class Caps(NamedTuple):
    """`max_running` from delegate.toml: for all jobs, and per profile (agent name)."""

    total: int | None = None
    per_agent: Mapping[str, int] = MappingProxyType({})


class GroupRule(NamedTuple):
    """A queue group's own rule (`delegate group add|set|pause|resume`): its cap, whether it is
    paused, its daily budget, and what its ended jobs spent today."""

    max_running: int | None = None
    paused: bool = False
    daily_cost_usd: float | None = None
    spent_today_usd: float = 0.0


class Gate(NamedTuple):
    """What besides the caps decides a start: the state of each job some open job waits for
    (`dependencies`, by id, each by its latest attempt; an id absent was not found), the
    groups' rules (by name), and the time now (a retry waits until its `not_before`)."""

    dependencies: Mapping[str, JobState] = MappingProxyType({})
    groups: Mapping[str, GroupRule] = MappingProxyType({})
    now: datetime | None = None


# `submit --after-rule`: what a dependency's ending must be for the job to start.
AFTER_RULES = ("succeeded", "finished", "failed")
DEPENDENCY_FAILED = "dependency_failed"


def rule_holds(rule: str, dependency: JobState | None) -> bool | None:
    """True when `dependency` (its state; None: not found) satisfies `rule`, False when it
    never can any more, None while it has not ended."""
    if dependency is None:
        return False
    if not dependency.terminal:
        return None
    if rule == "finished":
        return True
    if rule == "failed":
        return dependency is JobState.ERROR
    return dependency is JobState.COMPLETED


def broken_dependency(after: Sequence[str] | None, rule: str | None, gate: Gate) -> str | None:
    """The first of the jobs `after` names whose ending can no longer satisfy `rule` (None:
    `succeeded`), or None."""
    rule = rule or AFTER_RULES[0]
    for dep in after or ():
        if rule_holds(rule, gate.dependencies.get(dep)) is False:
            return dep
    return None


def dependency_failure(dep: str, gate: Gate) -> str:
    """The end reason of a job whose dependency `dep` broke its rule: `dependency_failed: ID
    error` (its state, or `not found`)."""
    state = gate.dependencies.get(dep)
    return f"{DEPENDENCY_FAILED}: {dep} {state.value if state is not None else 'not found'}"


def _unmet_dependencies(job: Job, gate: Gate) -> list[str]:
    rule = job.after_rule or AFTER_RULES[0]
    return [d for d in job.after or () if rule_holds(rule, gate.dependencies.get(d)) is not True]


def occupies_slot(job: Job) -> bool:
    """A job that counts against the cap: running, or admitted to start (pending with a spec)."""
    return job.status is JobState.RUNNING or (job.status is JobState.PENDING and bool(job.launch))


class Slots:
    """The slots in use, counted once: by whom (job id -> agent, and group), in all, per
    agent and per group. Built from the open jobs and the busy sessions, so judging each of
    10,000 queued jobs costs a few look-ups, not a walk over all the others; `take` counts a
    job the caller just let start."""

    def __init__(self, others: Sequence[Job], busy: Mapping[str, str | None] | None = None) -> None:
        by_id = {j.job_id: j for j in others}
        self.agents: dict[str, str | None] = {j.job_id: j.agent for j in others if occupies_slot(j)}
        for job_id, agent in (busy or {}).items():
            self.agents.setdefault(job_id, agent)
        # a job only `busy` names that is not open (ended, its session not yet stopped) counts
        # for no group
        self.groups: dict[str, str | None] = {
            i: (by_id[i].group if i in by_id else None) for i in self.agents
        }
        self.per_agent: dict[str | None, int] = {}
        self.per_group: dict[str | None, int] = {}
        for job_id, agent in self.agents.items():
            self._count(agent, self.groups[job_id], 1)

    def _count(self, agent: str | None, group: str | None, step: int) -> None:
        self.per_agent[agent] = self.per_agent.get(agent, 0) + step
        self.per_group[group] = self.per_group.get(group, 0) + step

    def take(self, job: Job) -> None:
        """`job` was let start: it holds a slot now (as pending with its spec would)."""
        if occupies_slot(job._replace(status=JobState.PENDING)) and job.job_id not in self.agents:
            self.agents[job.job_id], self.groups[job.job_id] = job.agent, job.group
            self._count(job.agent, job.group, 1)

    def beside(self, job: Job) -> tuple[int, int, int]:
        """In use by jobs other than `job`: in all, by its agent, in its group."""
        own = job.job_id in self.agents
        mine = 1 if own else 0
        agent_own = 1 if own and self.agents[job.job_id] == job.agent else 0
        group_own = 1 if own and self.groups[job.job_id] == job.group else 0
        return (
            len(self.agents) - mine,
            self.per_agent.get(job.agent, 0) - agent_own,
            self.per_group.get(job.group, 0) - group_own if job.group else 0,
        )


def may_start(
    job: Job,
    others: Sequence[Job],
    caps: Caps,
    busy: Mapping[str, str | None] | None = None,
    gate: Gate | None = None,
    slots: Slots | None = None,
) -> bool:
    """Whether `job` may start now beside `others` (the other open jobs): see `waiting_for`."""
    return waiting_for(job, others, caps, busy, gate, slots) is None


def waiting_for(
    job: Job,
    others: Sequence[Job],
    caps: Caps,
    busy: Mapping[str, str | None] | None = None,
    gate: Gate | None = None,
    slots: Slots | None = None,
) -> str | None:
    """Why `job` may not start now beside `others` (the other open jobs), in words; None when
    it may. A job on an agent host waits here only for its backoff (and what its host says of
    its own caps is the host's business).

    `busy` (job id -> agent) names the jobs whose session is still recorded running: a job
    that just ended holds its slot until its session is stopped, so the session history never
    shows more sessions running than the cap allows. `slots`: the same counted once for many
    calls (`others` and `busy` are then not looked at).
    """
    gate = gate or Gate()
    backoff = _backoff_left(job, gate.now)
    if backoff is not None:
        return backoff
    unmet = _unmet_dependencies(job, gate)
    if unmet:
        return f"waits for {', '.join(unmet)} ({job.after_rule or AFTER_RULES[0]})"
    rule = gate.groups.get(job.group) if job.group else None
    held = group_holds(str(job.group), rule) if rule is not None else None
    if held is not None:
        return held
    if job.host is not None:
        return None  # it runs on its agent host, which counts its slots (its own caps there)
    total, by_agent, in_group = (slots or Slots(others, busy)).beside(job)
    if caps.total is not None and total >= caps.total:
        return f"max_running {caps.total} reached"
    agent_cap = caps.per_agent.get(job.agent or "")
    if agent_cap is not None and by_agent >= agent_cap:
        return f"{job.agent} runs {agent_cap} of its max_running {agent_cap}"
    if rule is not None and rule.max_running is not None and in_group >= rule.max_running:
        return f"group {job.group} runs {in_group} of its max_running {rule.max_running}"
    if job.max_running is not None and total >= job.max_running:
        return f"its --max-running {job.max_running} reached"
    return None


def group_holds(group: str, rule: GroupRule) -> str | None:
    """Why the group itself holds its jobs back (paused, or its day's budget spent), or None."""
    if rule.paused:
        return f"group {group} is paused"
    if rule.daily_cost_usd is not None and rule.spent_today_usd >= rule.daily_cost_usd:
        spent, budget = rule.spent_today_usd, rule.daily_cost_usd
        return f"group {group} spent ${spent:.4f} of its ${budget:.2f} today"
    return None


# A timer set to a `not_before` fires this long after it: never before it (a launch refused for
# a few microseconds would wait for the next look), and well under what anyone notices.
DUE_AFTER_S = 0.005


def due_in_s(job: Job, now: datetime) -> float | None:
    """Seconds until queued `job` may start as far as its `not_before` goes (a retry's backoff,
    a rate limit's reset): 0.0 once it has passed, None for a job not waiting for a time.
    What whoever launches queued jobs sets its timer by, so the launch comes at that time."""
    if job.status is not JobState.QUEUED:
        return None
    eligible = parse_iso(job.not_before)
    if eligible is None:
        return None
    return max(0.0, (eligible - now).total_seconds())


def _backoff_left(job: Job, now: datetime | None) -> str | None:
    """`retry 2/3 at 14:05:07` while a retry waits out its backoff; None once it may start (or
    when no time was given: the caller does not judge backoffs)."""
    eligible = parse_iso(job.not_before)
    if eligible is None or now is None or now >= eligible:
        return None
    at = local_time(job.not_before, now=now)
    return f"retry {attempt_label(job) or job.attempt or 2} at {at}"


def busy_sessions(rows: Sequence[Session]) -> dict[str, str | None]:
    """Job id -> agent of the session rows still recorded running a job."""
    return {r.job_id: r.agent for r in rows if r.state is SessionState.RUNNING and r.job_id}
