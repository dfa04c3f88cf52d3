"""Sub-jobs: a job an agent submits from inside its own job (`delegate mcp`'s `job_submit`).

A sub-job records its parent (`Job.parent`), starts in the parent's working folder unless told
otherwise, and is refused beyond `MAX_DEPTH` levels below a job a person submitted, so agents
that delegate to agents cannot fan out without end. Everything else is an ordinary submit.
"""

from __future__ import annotations

from pathlib import Path

from delegate.core.errors import UsageError
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
    workdir = request.workdir
    if workdir is None and parent.workdir:
        workdir = Path(parent.workdir)
    return submit(state, request._replace(parent=parent_id, workdir=workdir), wait=False)
