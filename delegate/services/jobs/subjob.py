"""Sub-jobs: a job an agent submits from inside its own job (`delegate mcp`'s `job_submit`).

A sub-job lives inside its parent; nothing an agent asks for widens what its own job may do:
- it records its parent (`Job.parent`) and is refused beyond `MAX_DEPTH` levels below a job a
  person submitted;
- it works in the parent's folder, or a folder inside it (resolved: `..` and links do not lead
  out);
- its wall deadline is no later than its parent's, and its budget no more than what the parent
  (and every job above) has left (`--max-cost`, `--max-tokens`);
- it runs its parent's own profile, never a shell command, unless `[mcp] sub_jobs = "any"`;
- at most `[mcp] max_sub_jobs` (8) of a parent's sub-jobs are open at once;
- its spending counts against the budget of every job above it too: one counter per budget
  (runtime/spending), so a parent's sub-jobs together spend no more than the parent may;
- it is cancelled when its parent ends for good (retry.cancel_sub_jobs, by whoever follows the
  parent's end), unless it asked to `detach` and `[mcp] detach = true` allows that.
Everything else is an ordinary submit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from delegate.config.profiles import SubJobRules, read_config, sub_job_rules
from delegate.core.budget import with_sub_jobs
from delegate.core.errors import JobNotFound, UsageError
from delegate.core.model import Job
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs.submit import SubmitRequest, SubmitResult, submit
from delegate.services.state import State

MAX_DEPTH = 3  # a person's job is depth 0; its sub-jobs 1, theirs 2, theirs 3


def ancestors(state: State, job_id: str) -> list[Job]:
    """The jobs above `job_id`, its parent first (none for a job a person submitted)."""
    above: list[Job] = []
    seen = {job_id}
    parent = state.registry.get(job_id).parent
    while parent is not None and parent not in seen:
        seen.add(parent)
        try:
            job = state.registry.get(parent)
        except JobNotFound:  # removed by `gc`: nothing above it to count or keep to
            break
        above.append(job)
        parent = job.parent
    return above


def submit_subjob(state: State, parent_id: str, request: SubmitRequest) -> SubmitResult:
    """Submit `request` as a sub-job of `parent_id` without waiting for it; UsageError when the
    parent is already `MAX_DEPTH` levels down."""
    above = [state.registry.get(parent_id), *ancestors(state, parent_id)]
    level = len(above)
    if level > MAX_DEPTH:
        raise UsageError(
            f"job {parent_id} is {level - 1} levels below a submitted job; sub-jobs stop at"
            f" depth {MAX_DEPTH}"
        )
    parent = above[0]
    if request.agent is None and request.cmd is None:  # its parent's own profile
        if parent.agent in (None, "cmd"):
            raise UsageError("a sub-job of a command needs an agent profile or a command")
        request = request._replace(agent=parent.agent)
    config = read_config(state.layout.home, state.env)
    rules = sub_job_rules(config.tables, config.path)
    _check_profile(parent, request, rules)
    if request.detached and not rules.detach:
        raise UsageError("a sub-job ends with its parent here ([mcp] detach = true allows detach)")
    open_ones = [j for j in state.registry.open_jobs() if j.parent == parent_id]
    if len(open_ones) >= rules.max_sub_jobs:
        raise UsageError(
            f"job {parent_id} has {len(open_ones)} sub-jobs open, the most [mcp] max_sub_jobs"
            f" allows ({rules.max_sub_jobs})"
        )
    inside = {
        "parent": parent_id,
        "workdir": _workdir_inside(parent, request.workdir),
        "wall_timeout_s": _deadline_inside(parent, request.wall_timeout_s, time.time()),
        **_budget_inside(above, request),
    }
    return submit(state, request._replace(**inside), wait=False)


def _check_profile(parent: Job, request: SubmitRequest, rules: SubJobRules) -> None:
    """Its parent's own profile, never a shell command (it would run outside the approvals of
    its parent's agent), unless `[mcp] sub_jobs = "any"`."""
    if rules.sub_jobs == "any":
        return
    if request.cmd is not None:
        raise UsageError('a sub-job runs an agent profile, not a command ([mcp] sub_jobs = "any")')
    own = parent.agent if parent.agent not in (None, "cmd") else None
    if own is not None and request.agent != own:
        raise UsageError(
            f"a sub-job of job {parent.job_id} runs its profile {own!r}, not {request.agent!r}"
            ' ([mcp] sub_jobs = "any" allows others)'
        )


def _workdir_inside(parent: Job, asked: Path | None) -> Path | None:
    """The parent's folder, or `asked` when it resolves to a folder inside it."""
    if not parent.workdir:
        return asked
    home = Path(parent.workdir).resolve()
    if asked is None:
        return home
    where = (home / asked).resolve()  # an absolute `asked` stays itself
    if where != home and home not in where.parents:
        raise UsageError(f"a sub-job works inside its parent's folder {home}, not {where}")
    return where


def _deadline_inside(parent: Job, asked: float | None, now: float) -> float | None:
    """Its wall timeout: what it asked for, never past its parent's own deadline."""
    if parent.wall_timeout_s is None:
        return asked
    started = parse_timestamp(parent.started_at).timestamp() if parent.started_at else now
    left = started + parent.wall_timeout_s - now
    if left <= 0:
        raise UsageError(f"job {parent.job_id} is past its own wall deadline")
    return left if asked is None else min(asked, left)


def _budget_inside(above: list[Job], request: SubmitRequest) -> dict[str, Any]:
    """Its budget: what it asked for, never more than any job above it has left (each counts
    what its sub-jobs spent: runtime/spending adds a sub-job's spending to every job above it,
    so the limit set here is only where it starts)."""
    limits: dict[str, Any] = {}
    for job in above:
        spent = with_sub_jobs(job)
        if job.max_cost_usd is not None:
            left = job.max_cost_usd - spent.cost_usd
            if left <= 0:
                raise UsageError(f"job {job.job_id} has no budget left for a sub-job")
            limits["max_cost_usd"] = min(left, limits.get("max_cost_usd", left))
        if job.max_tokens is not None:
            left_tokens = job.max_tokens - spent.tokens
            if left_tokens <= 0:
                raise UsageError(f"job {job.job_id} has no tokens left for a sub-job")
            limits["max_tokens"] = min(left_tokens, limits.get("max_tokens", left_tokens))
    for name in ("max_cost_usd", "max_tokens"):
        asked = getattr(request, name)
        if asked is not None:
            limits[name] = min(asked, limits.get(name, asked))
    return limits
