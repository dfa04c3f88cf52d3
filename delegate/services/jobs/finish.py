"""Where a job ends: the one function every terminal transition goes through.

A job ends completed (its `completed` event), error (its `error` event, a deadline, a wrapper or
host that was lost, a launch that failed) or cancelled (`cancel`, `session stop`). Whoever
decides it calls `end_job`, which writes, each exactly once however many callers race:

- the session row's new state, when the ending decides it (a session stop), before the job is
  seen ended, so a supervisor that sees the job cancelled finds the session settled;
- the caller's reason line in the job's audit log (why the bus was bypassed, the reconcile
  action taken), then the terminal record and its `status_changed` line, all under the
  registry lock and only by the caller whose ending landed (`Registry.record_end`: the first
  terminal state wins);
- the notification of the job's own terminal event, once per event whoever recorded the end
  (the claim in services/jobs/notify): the publisher ends the job beside the agent and passes
  no envelope; a subscribing watcher passes the envelope it received.

Notifiers hear events (`--on-event`, `[notify]`): an ending that is not the job's own event (a
deadline, a cancel) has no envelope and notifies no one, as before. The monitor offers every
event it receives, a terminal one included, before its reconcile pass ends the job with it.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import os
import pwd
from typing import Any, NamedTuple

from delegate.config.logsetup import get_logger
from delegate.core.caps import DEPENDENCY_FAILED, Gate, broken_dependency, dependency_failure
from delegate.core.model import WRAPPER_REASONS, EventType, Job, JobState, SessionState
from delegate.core.retry import next_attempt
from delegate.services.state import State

log = get_logger(__name__)


class Ending(NamedTuple):
    """What `end_job` found: the job as it is now, and whether this call ended it."""

    job: Job
    changed: bool


class AuditLine(NamedTuple):
    """A line the caller that ends the job writes with the end: why, in its own words."""

    kind: str
    fields: dict[str, Any]


class SessionMove(NamedTuple):
    """The job's session row moving with its end (a session stop's target state)."""

    name: str
    state: SessionState
    reason: str
    strict: bool = False  # a person asked for it: an impossible move raises SessionError


def operator_cause(command: str) -> dict[str, Any]:
    """The cause of a change a person asked for: the command and the user who ran it."""
    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        user = f"uid {os.getuid()}"
    return {"source": "operator", "command": command, "user": user, "observed": True}


def event_ending(event: EventType, detail: str = "") -> tuple[JobState, str | None]:
    """The terminal state and reason the job's own terminal `event` means."""
    if event is EventType.COMPLETED:
        return JobState.COMPLETED, None
    if event is EventType.ERROR:
        if detail.startswith(tuple(f"{reason}:" for reason in WRAPPER_REASONS)):
            return JobState.ERROR, detail  # what the wrapper saw (its channel): its own reason
        return JobState.ERROR, f"agent_error: {detail}" if detail else "agent_error"
    raise ValueError(f"{event.value} does not end a job")


def ended_as(job: Job, target: JobState, reason: str | None) -> Job:
    """`job` as its end in `target` for `reason` will record it (what core/retry judges)."""
    if target is JobState.ERROR:
        return job._replace(status=target, error=reason or "error")
    return job._replace(status=target)


def end_job(
    state: State,
    job_id: str,
    target: JobState,
    *,
    reason: str | None = None,
    by_event: bool = False,
    envelope: dict[str, Any] | None = None,
    actor: str = "",
    because: AuditLine | None = None,
    session: SessionMove | None = None,
    cause: dict[str, Any] | None = None,
) -> Ending:
    """End job `job_id` in `target`; return the job and whether this call ended it.

    Idempotent: for a job that has ended already nothing is written (its session is not
    moved, no reason line is added) and `changed` is False; the envelope's notification, if
    any, is still offered once, since a notification belongs to the event, not to who ended
    the job; `actor` names the caller in the notification's audit line. `by_event`: the job's
    own terminal event (see `Registry.record_end`). A move the state table forbids raises
    IllegalTransition; JobNotFound when there is no such job.

    `cause`: where the ending came from and whether it was observed or inferred, kept on the
    `status_changed` line (`delegate why`). The one caller whose ending landed settles the
    jobs that wait for it; when the job's retry rule or `on_interrupt` asks for a next
    attempt, it notes so before the end is written (`Registry.mark_follow_up`): whoever follows
    the job makes the attempt (services/jobs/retry.follow_up, never here), and the monitor makes
    one its follower died before making.
    """
    registry = state.registry
    job = registry.get(job_id)
    if not job.status.terminal and session is not None:
        # deferred: sqlite3 is ~10 ms the publish hot path (which moves no session) never needs
        from delegate.adapters.sessions_db import SessionInventory

        SessionInventory(state.layout.sessions_db).set_state(
            session.name,
            session.state,
            reason=session.reason,
            job_id=job_id,
            strict=session.strict,
        )

    def before_end(ending: Job) -> None:
        if next_attempt(ended_as(ending, target, reason)) is not None:
            registry.mark_follow_up(job_id)  # kept until follow_up makes the attempt
        if because is not None:
            state.audit.append(job_id, because.kind, **because.fields)

    told: dict[str, Any] = {"actor": actor} if actor else {}
    if by_event:
        told.update(source="agent", observed=True)
    job, changed = registry.record_end(
        job_id,
        target,
        reason=reason,
        by_event=by_event,
        before=before_end,
        cause={**told, **(cause or {})},
    )
    if changed:
        settle_dependents(state, job)
        if job.group and job.cost_usd:  # a group's daily budget counts what its jobs cost
            # adapters.groups (json, datetime, the book's lock): only for a group's job
            from delegate.adapters.groups import GroupBook

            GroupBook(state.layout.groups_book).add_spending(job.group, job.cost_usd)
    if envelope is not None:
        # deferred: notifiers need subprocess, threading and tomllib (~15 ms), which the
        # publish hot path (it passes no envelope) never does
        from delegate.services.jobs.notify import notify

        notify(state, job, envelope, actor=actor)
    return Ending(job, changed)


def settle_dependents(state: State, ended: Job) -> None:
    """End at once every queued job waiting for `ended` (or an earlier attempt of it) whose
    rule it can no longer satisfy (`dependency_failed`, naming that dependency); ending one
    settles its own dependents in turn, so a failure travels down the whole graph in one go.
    An attempt that will be retried satisfies no rule and breaks none: they wait on."""
    chain = {j.job_id for j in state.attempts(ended)} if ended.retry_of else {ended.job_id}
    waiting = [
        j
        for j in state.registry.open_jobs()
        if j.status is JobState.QUEUED and chain & set(j.after or ())
    ]
    for job in waiting:
        gate = Gate(state.job_states(job.after or ()))
        broken = broken_dependency(job.after, job.after_rule, gate)
        if broken is None:
            continue
        reason = dependency_failure(broken, gate)
        end_job(
            state,
            job.job_id,
            JobState.ERROR,
            reason=reason,
            actor="dependency",
            because=AuditLine(DEPENDENCY_FAILED, {"dependency": broken, "reason": reason}),
            cause={"source": "rule", "rule": "after", "dependency": broken, "observed": True},
        )


def end_by_event(
    state: State,
    job_id: str,
    event: EventType,
    *,
    detail: str = "",
    envelope: dict[str, Any] | None = None,
    actor: str = "",
    because: AuditLine | None = None,
) -> Ending:
    """End a job with its own terminal event (`completed`, `error`)."""
    target, reason = event_ending(event, detail)
    told: dict[str, Any] = {"source": "agent", "event": event.value, "observed": True}
    if detail:
        told["detail"] = detail
    return end_job(
        state,
        job_id,
        target,
        reason=reason,
        by_event=True,
        envelope=envelope,
        actor=actor,
        because=because,
        cause=told,
    )
