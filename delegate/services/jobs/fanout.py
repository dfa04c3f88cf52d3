"""`submit --worktree --fan-out N` (or several `--agent`s): N jobs on the same prompt.

Each job runs in its own worktree made from the same base commit (checked once), and all are
linked by `Job.fan_out`: the id of the first job (services/jobs/compare sets them side by side).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from delegate.config.profiles import read_config, resolve
from delegate.core.errors import UsageError
from delegate.services import worktrees
from delegate.services.jobs.submit import SubmitRequest, SubmitResult, submit
from delegate.services.state import State

MAX_FAN_OUT = 32


def fan_out_agents(agents: list[str], count: int | None) -> list[str | None]:
    """The agent of each job: `--fan-out N` copies of the one agent, or one job per
    `--agent`; both together repeat the list N times."""
    if count is not None and not 1 <= count <= MAX_FAN_OUT:
        raise UsageError(f"--fan-out must be between 1 and {MAX_FAN_OUT}")
    chosen: list[str | None] = list(agents) or [None]
    return chosen * (count or 1)


def submit_fan_out(
    state: State,
    request: SubmitRequest,
    agents: list[str | None],
    *,
    note: Callable[[str], None] = lambda text: None,
) -> list[SubmitResult]:
    """Submit one job per entry of `agents` (none waited for), each in its own worktree from
    the same base; every job's `fan_out` is the first job's id."""
    if request.worktree is False:
        raise UsageError("a fan-out gives each job its own worktree: drop --no-worktree")
    for given, flag in (
        (request.branch, "--branch"),
        (request.session, "--session"),
        (request.idempotency_key, "--idempotency-key"),
    ):
        if given is not None:
            raise UsageError(f"{flag} names one job; a fan-out starts several")
    workdir = (request.workdir or Path.cwd()).expanduser().absolute()
    config = read_config(state.layout.home, state.env)
    for agent in dict.fromkeys(agents):  # every profile found before any job starts
        resolve(agent=agent, cmd=request.cmd, config=config.tables, source=config.path)
    plan = worktrees.plan(workdir, branch=None, base=request.base)
    results: list[SubmitResult] = []
    first: str | None = None
    for agent in agents:
        one = request._replace(agent=agent, worktree=True, worktree_plan=plan)
        result = submit(state, one, wait=False, note=note)
        first = first or result.job.job_id
        job = state.registry.update(result.job.job_id, fan_out=first)
        results.append(result._replace(job=job))
    return results
