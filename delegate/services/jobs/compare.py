"""`delegate compare`: the jobs of one fan-out side by side.

Per job: how it ended, how long it took and what it cost, the files and lines it changed against
its base, and the result of a `--check` command run in its worktree.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import Job
from delegate.core.outcome import outcome_words
from delegate.services import worktrees
from delegate.services.jobs.merge import CheckResult, run_check
from delegate.services.ps import job_timing
from delegate.services.state import State


def members(state: State, job_or_fan_out: str) -> list[Job]:
    """The jobs of the fan-out `job_or_fan_out` names (its id, or any member's), oldest first."""
    job = state.registry.get(job_or_fan_out)
    if job.fan_out is None:
        raise UsageError(f"job {job.job_id} is not part of a fan-out (submit --fan-out)")
    return [j for j in state.registry.list(None) if j.fan_out == job.fan_out]


class CompareRow(NamedTuple):
    job_id: str
    agent: str | None
    outcome: str  # its state, and for an error or cancel the reason
    duration_s: float | None
    cost_usd: float | None
    files: int | None  # None: the worktree could not be read
    added: int | None
    removed: int | None
    check: CheckResult | None = None
    problem: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self._asdict()
        data["check"] = self.check.to_dict() if self.check else None
        return data


def compare(state: State, job_or_fan_out: str, check: list[str] | None) -> list[CompareRow]:
    """Each job of the fan-out side by side; `check` is run in each worktree in turn."""
    now = datetime.now(UTC)
    return [_compare_row(state, job, now, check) for job in members(state, job_or_fan_out)]


def _compare_row(state: State, job: Job, now: datetime, check: list[str] | None) -> CompareRow:
    outcome = outcome_words(job.status.value, job.denied_tools)  # a completion's denials too
    if job.status.terminal and job.error:
        outcome = f"{outcome}: {job.error}"
    row = CompareRow(
        job.job_id, job.agent, outcome, job_timing(job, now)[0], job.cost_usd, None, None, None
    )
    try:
        entry = worktrees.worktree_of(job)
        counts = worktrees.diff_counts(state, job.job_id)
    except DelegateError as exc:
        return row._replace(problem=str(exc))
    row = row._replace(
        files=len(counts),
        added=sum(c["added"] or 0 for c in counts),
        removed=sum(c["removed"] or 0 for c in counts),
    )
    if check is None:
        return row
    return row._replace(check=run_check(check, Path(entry["path"]), state.env))
