"""`delegate review JOB`: a review handed back to the job's agent.

A running job gets it typed into its pane, as `delegate send` does. An ended job gets a
follow-up job in the same worktree and branch: it continues the agent's conversation where the
profile can (`resume` with the recorded `conversation_id`), else starts afresh with the review
and the job's diff in its prompt. The follow-up records `follow_up_of`; the worktree entry moves
to it (the earlier job's says `handed_to`), so `worktree list|clean` and `merge` follow the
latest job of the chain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from delegate.config.profiles import profiles, read_config
from delegate.core.errors import GitError, UsageError
from delegate.core.model import JobState
from delegate.services import session, worktrees
from delegate.services.jobs.submit import SubmitRequest, SubmitResult, submit
from delegate.services.jobs.watch import watch_job
from delegate.services.state import State

MAX_DIFF_BYTES = 200_000  # a fresh agent gets the diff in its prompt; past this, only the stat


def review_text(comments: list[str], files: list[Path], lines: list[str]) -> str:
    """The review as the agent reads it: comments, then each file's text, then the notes on
    lines (`FILE:N TEXT`, one argument each)."""
    parts = [*comments]
    for path in files:
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read --file {path}: {exc}") from None
    for note in lines:
        where, _, text = note.strip().partition(" ")
        name, _, number = where.rpartition(":")
        if not name or not number.isdigit() or not text.strip():
            raise UsageError(f"--line {note!r}: expected 'FILE:N TEXT'")
        parts.append(f"{name}, line {number}: {text}")
    if not parts:
        raise UsageError("give --comment TEXT, --file F or --line FILE:N TEXT")
    return "Review of your work:\n\n" + "\n\n".join(p.strip() for p in parts) + "\n"


class ReviewResult(NamedTuple):
    how: str  # one sentence: sent, or which follow-up and whether it continues a conversation
    submitted: SubmitResult | None = None  # the follow-up job, for an ended job


def review(
    state: State,
    job_id: str,
    text: str,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None] = lambda envelope: None,
    note: Callable[[str], None] = lambda line: None,
) -> ReviewResult:
    job = state.registry.get(job_id)
    if job.status is JobState.RUNNING and job.session:
        # one line: a newline typed into an agent's terminal would end its input early
        line = " ".join(part.strip() for part in text.splitlines() if part.strip())
        session.send(state, job.session, line)
        return ReviewResult(f"review sent to job {job_id} in session {job.session}")
    if not job.status.terminal:
        raise UsageError(f"job {job_id} is {job.status.value}; review it once it runs or ends")
    entry = worktrees.worktree_of(job)
    if entry.get("handed_to"):
        raise GitError(f"job {job_id} was followed up by {entry['handed_to']}; review that one")
    request, how = _follow_up_request(state, job_id, text)
    result = submit(state, request, wait=False, emit=emit, note=note)
    new_id = result.job.job_id
    state.registry.update(job_id, worktree={**entry, "handed_to": new_id})
    followed = state.registry.update(new_id, worktree=dict(entry), follow_up_of=job_id)
    result = result._replace(job=followed)
    if wait:  # followed once both records say where the worktree is
        result = _follow(state, new_id, emit=emit, note=note)
    return ReviewResult(f"follow-up job {new_id} {how}", result)


def _follow_up_request(state: State, job_id: str, text: str) -> tuple[SubmitRequest, str]:
    """The follow-up's submit: the same agent in the same folder, resuming where it can."""
    job = state.registry.get(job_id)
    source, config = read_config(state.layout.home, state.env)
    known = profiles(config, source)
    agent, cmd = job.agent, None
    if agent not in known:
        argv = list(job.launch.get("argv") or [])
        if agent != "cmd" or len(argv) != 3:
            raise UsageError(f"job {job_id}: its agent profile {agent!r} is gone")
        agent, cmd = None, argv[2]  # a `--cmd` job: /bin/sh -c TEXT
    profile = known.get(agent or "")
    conversation = job.conversation_id if profile is not None and profile.resume else None
    if conversation:
        prompt, how = text, f"continues conversation {conversation}"
    else:
        prompt, how = text + _diff_for_prompt(state, job_id), "starts afresh with the diff"
    request = SubmitRequest(
        prompt=prompt.encode("utf-8", "surrogateescape"),
        agent=agent,
        cmd=cmd,
        workdir=Path(job.workdir or "."),
        wall_timeout_s=job.wall_timeout_s,
        idle_timeout_s=job.idle_timeout_s,
        bus_url=job.bus.get("url"),
        conversation_id=conversation,
        worktree=False,  # it works in the job's worktree, already made
    )
    return request, how


def _diff_for_prompt(state: State, job_id: str) -> str:
    patch = worktrees.diff(state, job_id, [], color=False)
    if len(patch) > MAX_DIFF_BYTES:
        patch = worktrees.diff(state, job_id, ["--stat"], color=False)
    body = patch.decode("utf-8", "replace") or "(no changes)\n"
    return f"\nYour changes so far (git diff against your base):\n\n{body}"


def _follow(
    state: State,
    job_id: str,
    *,
    emit: Callable[[dict[str, Any]], None],
    note: Callable[[str], None],
) -> SubmitResult:
    outcome = watch_job(state, job_id, emit=emit, note=note)
    return SubmitResult(state.registry.get(job_id), True, outcome)
