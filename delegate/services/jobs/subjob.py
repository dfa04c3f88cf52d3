"""Sub-jobs: a job an agent submits from inside its own job (`delegate mcp`'s `job_submit`).

A sub-job lives inside its parent; nothing an agent asks for widens what its own job may do:
- it records its parent (`Job.parent`) and is refused beyond `MAX_DEPTH` levels below a job a
  person submitted;
- it works in the parent's folder, or a folder inside it (resolved: `..` and links do not lead
  out);
- its wall deadline is no later than its parent's, and its budget no more than what the parent
  has left (`--max-cost`, `--max-tokens`);
- it runs its parent's own profile, never a shell command, unless `[mcp] sub_jobs = "any"`;
- at most `[mcp] max_sub_jobs` (8) of a parent's sub-jobs are open at once;
- it is cancelled when its parent ends for good (retry.cancel_sub_jobs, by whoever follows the
  parent's end).
Everything else is an ordinary submit. (Not yet: the budget is what the parent had left when
the sub-job was submitted, not one counter the two share.)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from delegate.config.profiles import SubJobRules, read_config, sub_job_rules
from delegate.core.errors import UsageError
from delegate.core.model import Job
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs.submit import SubmitRequest, SubmitResult, submit
from delegate.services.state import State

MAX_DEPTH = 3  # a person's job is depth 0; its sub-jobs 1, theirs 2, theirs 3


def depth(state: State, job_id: str) -> int:
    """How many parents stand above `job_id` (0 for a job a person submitted)."""
    level, seen = 0, {job_id}
    parent = state.registry.get(job_id).parent
    while parent is not None and parent not in seen:
        seen.add(parent)
        level += 1
        parent = state.registry.get(parent).parent
    return level


def submit_subjob(state: State, parent_id: str, request: SubmitRequest) -> SubmitResult:
    """Submit `request` as a sub-job of `parent_id` without waiting for it; UsageError when the
    parent is already `MAX_DEPTH` levels down."""
    if request.agent is None and request.cmd is None:
        raise UsageError("a sub-job needs an agent profile or a command")
    level = depth(state, parent_id) + 1
    if level > MAX_DEPTH:
        raise UsageError(
            f"job {parent_id} is {level - 1} levels below a submitted job; sub-jobs stop at"
            f" depth {MAX_DEPTH}"
        )
    parent = state.registry.get(parent_id)
    config = read_config(state.layout.home, state.env)
    rules = sub_job_rules(config.tables, config.path)
    _check_profile(parent, request, rules)
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
        **_budget_inside(parent, request),
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


def _budget_inside(parent: Job, request: SubmitRequest) -> dict[str, Any]:
    """Its budget: what it asked for, never more than its parent has left."""
    limits: dict[str, Any] = {}
    if parent.max_cost_usd is not None:
        left = parent.max_cost_usd - (parent.cost_usd or 0.0)
        if left <= 0:
            raise UsageError(f"job {parent.job_id} has no budget left for a sub-job")
        asked = request.max_cost_usd
        limits["max_cost_usd"] = left if asked is None else min(asked, left)
    if parent.max_tokens is not None:
        left_tokens = parent.max_tokens - (parent.tokens_in or 0) - (parent.tokens_out or 0)
        if left_tokens <= 0:
            raise UsageError(f"job {parent.job_id} has no tokens left for a sub-job")
        asked_tokens = request.max_tokens
        limits["max_tokens"] = (
            left_tokens if asked_tokens is None else min(asked_tokens, left_tokens)
        )
    return limits
