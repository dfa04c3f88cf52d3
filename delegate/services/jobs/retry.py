"""New attempts of a job: `delegate retry JOB`, the automatic retry its rule asks for, and the
requeue of interrupted work (core/retry decides which; this makes it).

An attempt is a new job with the whole spec of the one it follows (profile, workdir, timeouts,
bus, caps, group, dependencies, retry rule, budgets, `--no-mcp`, parent: `spec_of`; what it does
not take, and why, is in NOT_CARRIED), `attempt` one more and `retry_of` the previous attempt,
which gets `retried_by`; one that resumes a conversation starts from its running token totals.
It is submitted like any job (its own supervisor, its place in the queue), under the idempotency
key `retry-of-<previous id>`: however many callers try, one attempt follows each ended attempt.
Its prompt is the one the previous attempt was given, read back from `logs/<job>/prompt` with
the toolkit's preamble taken off (the preamble is added again for the new attempt); `--prompt`
replaces it; a requeue that resumes a conversation says "Continue where you left off." as
`session resume` does.
"""

from __future__ import annotations

import base64
import random
import shlex
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delegate.adapters.tmux import Tmux
from delegate.config.budget import rate_limit_max_wait
from delegate.config.logsetup import get_logger
from delegate.config.profiles import profiles, read_config
from delegate.config.settings import rate_limit_jitter_s
from delegate.core.caps import due_in_s
from delegate.core.errors import DelegateError, JobNotFound, UsageError
from delegate.core.limits import Limits
from delegate.core.model import SESSION_PREFIX, Job
from delegate.core.retry import RATE_LIMIT_JITTER_S, RETRY_KEY_PREFIX, attempt_label, next_attempt
from delegate.core.timefmt import human_duration, local_time, record_timestamp
from delegate.services.jobs.submit import (
    SubmitRequest,
    SubmitResult,
    cancel,
    follow_existing,
    preamble,
    submit,
    submit_remote,
)
from delegate.services.state import State
from delegate.services.supervisor import ensure_supervisor

log = get_logger(__name__)
RETRIED = "retried"  # the audit kind on the previous attempt: which attempt follows it
RETRY_FAILED = "retry_failed"  # the audit kind: a due next attempt could not be made
CONTINUE_PROMPT = b"Continue where you left off.\n"
ATTEMPT_APPEAR_S = 10.0  # how long `submit --wait` waits for a due attempt to be recorded


def given_prompt(state: State, job: Job) -> bytes:
    """The prompt the person gave `job`: what its agent got, without the toolkit's preamble
    (for a job on an agent host: what its assignment carried)."""
    if job.host:
        return _assigned_prompt(state, job)
    try:
        data = (state.audit.job_dir(job.job_id) / "prompt").read_bytes()
    except OSError as exc:
        raise UsageError(f"job {job.job_id}: its prompt cannot be read ({exc.strerror})") from None
    lead = preamble().encode("utf-8") + b"\n---\n\n"
    return data[len(lead) :] if data.startswith(lead) else data


def _host_assignment(state: State, job: Job) -> dict[str, Any]:
    # services.remote (uuid, platform, the MQTT wire): only for a job on an agent host
    from delegate.services.remote import saved_assignment

    return saved_assignment(state, job)


def _assigned_prompt(state: State, job: Job) -> bytes:
    try:
        return base64.b64decode(str(_host_assignment(state, job).get("prompt_b64", "")))
    except ValueError:
        raise UsageError(f"job {job.job_id}: its assignment's prompt is not base64") from None


def _as_assigned(state: State, job: Job) -> dict[str, Any]:
    """The spec a job on an agent host was assigned with, which its host resolved (its
    profile there, its folder, its session, `--max-running` counted there, its worktree)."""
    sent = _host_assignment(state, job)
    return {
        "agent": sent.get("agent"),
        "cmd": sent.get("cmd"),
        "workdir": Path(sent["workdir"]) if sent.get("workdir") else None,
        "session": sent.get("session"),
        "max_running": sent.get("max_running"),
        "worktree": sent.get("worktree"),
        "branch": sent.get("branch"),
        "base": sent.get("base"),
    }


def _agent_or_cmd(state: State, job: Job) -> tuple[str | None, str | None]:
    """How the job named its agent: a profile still configured, or its `--cmd` text."""
    source, config = read_config(state.layout.home, state.env)
    if job.agent in profiles(config, source):
        return job.agent, None
    argv = list(job.launch.get("argv") or [])
    if job.agent == "cmd" and len(argv) == 3:
        return None, argv[2]
    raise UsageError(f"job {job.job_id}: its agent profile {job.agent!r} is gone")


# What a SubmitRequest holds that an attempt does not take from the job it follows, and why;
# every other field is the job's spec, carried whole (`spec_of`). A test enumerates the fields
# (tests/test_rate_limit_resume.py): a new one must be carried or named here.
NOT_CARRIED: dict[str, str] = {
    "prompt": "the caller's: the prompt the job was given, a new one (`retry --prompt`), or"
    " 'Continue where you left off.' when the attempt resumes the conversation",
    "idempotency_key": "the attempt's own, retry-of-<job>: one attempt follows each ended one",
    "conversation_id": "the caller's: the job's conversation when the attempt resumes it",
    "conversation_usage": "the job's running totals, only with its conversation (carried_usage)",
    "attempt": "the job's attempt number, plus one",
    "retry_of": "the job it follows",
    "not_before": "the caller's: when the backoff, or the rate limit's reset, has passed",
    "job_id": "an agent host's launch of the delegator's job; an attempt is a new job",
    "token_for": "an agent host's launch of the delegator's job (its token)",
    "worktree": "never a worktree of its own: the job's worktree is handed over to the attempt"
    " (_hand_over_worktree); a job on an agent host's as it was assigned (_as_assigned)",
    "branch": "the handed-over worktree keeps its branch (see worktree)",
    "base": "the handed-over worktree keeps its base (see worktree)",
    "worktree_plan": "a fan-out's plan for the worktrees of new jobs (see worktree)",
}


def spec_of(state: State, job: Job) -> dict[str, Any]:
    """The spec `job` was submitted with, as SubmitRequest fields: everything an attempt
    repeats (what it does not is in NOT_CARRIED). Its limits are the ones recorded (the flags,
    else `[budget]` as it was then), for the attempt as for the job."""
    if job.host:
        agent, cmd = None, None  # as it was assigned: its host resolves them (below)
    else:
        agent, cmd = _agent_or_cmd(state, job)
    own_session = job.session and job.session != f"{SESSION_PREFIX}{job.job_id}"
    spec: dict[str, Any] = {
        "agent": agent,
        "cmd": cmd,
        "workdir": Path(job.workdir) if job.workdir else None,  # none: where submit defaults
        "session": job.session if own_session else None,
        "wall_timeout_s": job.wall_timeout_s,
        "idle_timeout_s": job.idle_timeout_s,
        "bus_url": job.bus.get("url"),
        "max_running": job.max_running,
        "on_event": shlex.join(job.notify) if job.notify else None,
        "after": tuple(job.after or ()),
        "after_rule": job.after_rule,
        "group": job.group,
        "retry": job.retry,
        "on_interrupt": job.on_interrupt,
        "parent": job.parent,  # a sub-job's attempt stays inside its parent
        "detached": bool(job.detached),
        # `--no-mcp`: its launch registered no `delegate mcp` (for a profile that registers
        # none anyway, the same launch either way)
        "no_mcp": job.launch.get("mcp") is False,
        "max_cost_usd": job.max_cost_usd,
        "max_tokens": job.max_tokens,
        # its box as it was: an attempt is limited and sandboxed as the job it follows
        "limits": Limits.from_dict(job.launch.get("limits")),
        "sandbox": bool(job.launch.get("sandbox")),
    }
    return {**spec, **_as_assigned(state, job)} if job.host else spec


def carried_usage(job: Job, conversation_id: str | None) -> dict[str, Any] | None:
    """The conversation's running token totals the attempt counts on from: the job's, when the
    attempt resumes the job's conversation; None otherwise, or when the record keeps none."""
    if not conversation_id or conversation_id != job.conversation_id:
        return None
    usage = job.conversation_usage
    return dict(usage) if isinstance(usage, dict) else None


def attempt_request(
    state: State,
    job: Job,
    prompt: bytes,
    *,
    conversation_id: str | None = None,
    not_before: str | None = None,
) -> SubmitRequest:
    """The request of the attempt after `job`: its whole spec, one attempt more."""
    # never a worktree of its own: a worktree job's attempt takes over that worktree
    # (_hand_over_worktree), a job without one had none (whatever [worktree] says now); a job
    # on an agent host's spec says it as it was assigned
    spec = {"worktree": False, **spec_of(state, job)}
    request = SubmitRequest(
        prompt=prompt,
        idempotency_key=f"{RETRY_KEY_PREFIX}{job.job_id}",
        conversation_id=conversation_id,
        attempt=(job.attempt or 1) + 1,
        retry_of=job.job_id,
        not_before=not_before,
        conversation_usage=carried_usage(job, conversation_id),
        **spec,
    )
    return request


def _submit_attempt(state: State, job: Job, request: SubmitRequest, how: str) -> SubmitResult:
    tmux = Tmux(job.tmux_socket, state.env) if job.tmux_socket else None
    if job.host:
        result = submit_remote(state, request, job.host, wait=False)
    else:
        result = submit(state, request, wait=False, tmux=tmux)
    if result.created or not state.registry.get(job.job_id).retried_by:
        # (not created: a caller that died after registering the attempt left it unlinked)
        state.registry.update(job.job_id, stamp=False, retried_by=result.job.job_id)
    if result.created and not job.host:
        _hand_over_worktree(state, job, result.job.job_id)
    if result.created:
        state.audit.append(
            job.job_id,
            RETRIED,
            attempt=result.job.job_id,
            how=how,
            not_before=request.not_before,
            conversation_id=request.conversation_id,
        )
    return result


def _hand_over_worktree(state: State, ended: Job, attempt_id: str) -> None:
    """The next attempt works on in `ended`'s worktree and branch (it runs in that folder),
    and from now on the worktree is the attempt's, as a review's follow-up takes it over:
    `diff`, `merge` and `worktree clean` follow the attempt."""
    entry = ended.worktree
    if not entry or entry.get("handed_to"):
        return
    state.registry.update(ended.job_id, stamp=False, worktree={**entry, "handed_to": attempt_id})
    state.registry.update(attempt_id, worktree=dict(entry))


def follow_up(state: State, job_id: str) -> Job | None:
    """Make the next attempt of job `job_id` when it has ended and its rule asks for one, once
    (the attempt's idempotency key): what follows an ending, done by whoever follows the job
    (its supervisor, `submit --wait`, the monitor's pass), never inside `end_job`, which
    submit itself calls. A failure is audited (`retry_failed`), never raised.

    The job's follow-up note (`Registry.mark_follow_up`) is dropped once the attempt is made
    or none is due, and when it can never be made as things are configured (a UsageError: its
    profile or prompt is gone); a passing failure (a broker out of reach) keeps it, so the
    monitor's next pass tries again."""
    try:
        job = state.registry.get(job_id)
    except JobNotFound:
        state.registry.follow_up_settled(job_id)
        return None
    if not job.status.terminal:
        return None  # noted by an ender not yet done (or one that died before the end)
    if job.retried_by or next_attempt(job) is None:
        if not job.retried_by:  # its work is over for good: its sub-jobs' with it
            cancel_sub_jobs(state, job)
        state.registry.follow_up_settled(job_id)
        return None
    try:
        made = schedule_next_attempt(state, job)
    except DelegateError as exc:
        log.warning("job %s: its next attempt could not be made: %s", job_id, exc)
        state.audit.append(job_id, RETRY_FAILED, reason=str(exc))
        if isinstance(exc, UsageError):
            state.registry.follow_up_settled(job_id)
        return None
    state.registry.follow_up_settled(job_id)  # made, or (a rate limit too far off) not due
    return made


def cancel_sub_jobs(state: State, parent: Job) -> list[str]:
    """Cancel every open sub-job of `parent` (and theirs, as each is cancelled in turn by
    whoever follows it), audited on the parent; a sub-job lives no longer than its parent."""
    cancelled = []
    # followed: a supervisor asks at every ending, and reads again only what changed since
    for job in state.registry.followed_sub_jobs(parent.job_id):
        if job.detached:
            continue
        try:
            cancel(state, job.job_id)
        except DelegateError as exc:  # ended meanwhile, or its session out of reach
            log.warning(
                "job %s: its sub-job %s was not cancelled: %s", parent.job_id, job.job_id, exc
            )
            continue
        state.audit.append(parent.job_id, "sub_job_cancelled", sub_job=job.job_id)
        cancelled.append(job.job_id)
    return cancelled


def schedule_next_attempt(state: State, ended: Job, *, rand: float | None = None) -> Job | None:
    """Queue the attempt `ended`'s rule asks for (end_job calls this once, for the caller whose
    ending landed); None when it asks for none."""
    chance = random.random() if rand is None else rand  # noqa: S311 - jitter, not a secret
    config = read_config(state.layout.home, state.env)
    max_wait = rate_limit_max_wait(config.tables, config.path)
    jitter = rate_limit_jitter_s(state.env)
    nxt = next_attempt(
        ended,
        chance,
        now=datetime.now(UTC),
        max_wait_s=max_wait,
        jitter_s=RATE_LIMIT_JITTER_S if jitter is None else jitter,
    )
    if nxt is None:
        return None
    conversation = ended.conversation_id if nxt.resume else None
    try:
        prompt = CONTINUE_PROMPT if conversation else given_prompt(state, ended)
    except UsageError:
        if not ended.conversation_id:
            raise
        prompt, conversation = CONTINUE_PROMPT, ended.conversation_id
    eligible = None
    if nxt.delay_s > 0:
        eligible = record_timestamp(datetime.now(UTC) + timedelta(seconds=nxt.delay_s))
    request = attempt_request(
        state, ended, prompt, conversation_id=conversation, not_before=eligible
    )
    how = f"{nxt.kind} after {ended.error}"
    if conversation:
        how += f", resuming conversation {conversation}"
    return _submit_attempt(state, ended, request, how).job


def retry(state: State, job_id: str, *, prompt: bytes | None = None) -> SubmitResult:
    """`delegate retry JOB [--prompt TEXT]`: a new attempt of an ended job, started now."""
    job = state.registry.get(job_id)
    if not job.status.terminal:
        raise UsageError(f"job {job_id} is {job.status.value}: only an ended job is retried")
    if job.retried_by:
        latest = state.latest_attempt(job)
        raise UsageError(
            f"job {job_id} was retried already as {job.retried_by}"
            f" (latest attempt {latest.job_id}, {latest.status.value}): retry that one"
        )
    text = prompt if prompt is not None else given_prompt(state, job)
    return _submit_attempt(state, job, attempt_request(state, job, text), "retried by hand")


def follow_attempts(
    state: State,
    result: SubmitResult,
    *,
    emit: Callable[[dict[str, Any]], None],
    note: Callable[[str], None],
    appear_s: float = ATTEMPT_APPEAR_S,
) -> SubmitResult:
    """`submit --wait` past a retry: while the attempt it followed ended and another follows
    (or is due), follow that one, so the outcome is the final attempt's."""
    while result.outcome is not None:
        job = state.registry.get(result.job.job_id)
        if next_attempt(job) is not None and not job.retried_by:
            ensure_supervisor(state)  # it makes the attempt (a follower only reads)
        if next_attempt(job) is None and not job.retried_by:
            return result
        deadline = time.monotonic() + appear_s
        while not job.retried_by and time.monotonic() < deadline:
            time.sleep(0.1)  # its ender is making the attempt (a registry write away)
            job = state.registry.get(job.job_id)
        if not job.retried_by:
            return result
        following = state.registry.get(job.retried_by)
        while following.attempt is None and time.monotonic() < deadline:
            time.sleep(0.05)  # registered by the supervisor, its spec a registry write away
            following = state.registry.get(following.job_id)
        note(attempt_note(job, following))
        result = follow_existing(state, following, wait=True, emit=emit, note=note)
    return result


def attempt_note(ended: Job, following: Job, *, now: datetime | None = None) -> str:
    """What `submit --wait` says while it waits for the next attempt: which ending it follows,
    the conversation it resumes, and when it starts when it waits for a time (a backoff, a
    rate limit's reset): `job A ended (rate_limited: resets at ...); attempt 2 follows as B,
    resuming conversation C at 14:05:07 (in 3s)`."""
    label = attempt_label(following)
    text = f"job {ended.job_id} ended ({ended.error}); attempt {label} follows as"
    text += f" {following.job_id}"
    if following.conversation_id:
        text += f", resuming conversation {following.conversation_id}"
    moment = now or datetime.now(UTC)
    due = due_in_s(following, moment)
    if due:
        text += f" at {local_time(following.not_before, now=moment)} (in {human_duration(due)})"
    return text
