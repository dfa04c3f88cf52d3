"""`delegate ps`: jobs and their sessions side by side, from one tmux query per socket.

It reads the open index and the tail of the finished log, never the whole history (unless
`--all`), and says when tmux could not be asked rather than showing sessions as gone.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import os
from datetime import UTC, datetime
from typing import Any, NamedTuple

from delegate.adapters.procfs import tree_memory
from delegate.adapters.sessions_db import SessionInventory
from delegate.adapters.tmux import Tmux, socket_path_for
from delegate.config.settings import TMUX_SOCKET_ENV
from delegate.core import fastjson
from delegate.core.caps import Slots, waiting_for
from delegate.core.errors import DelegateError
from delegate.core.model import Job, JobState, Pane, Session, SessionState, TmuxView
from delegate.core.outcome import resumes_at, status_note
from delegate.core.retry import attempt_label
from delegate.core.timefmt import parse_timestamp, record_timestamp, seconds_between
from delegate.services.state import State


class Row(NamedTuple):
    job_id: str
    job_state: str
    session: str
    session_state: str
    tmux: str
    agent: str
    age_s: float
    last_event: str
    queue_position: int | None = None
    host: str | None = None  # the agent host it runs on; None: this machine
    # For the table only (never in to_dict, whose keys `ps --json` keeps): how long it ran (or
    # runs, or has waited), why it ended, when it started and ended, its last event's detail.
    duration_s: float | None = None
    end_reason: str = ""
    started_at: str | None = None
    ended_at: str | None = None
    last_detail: str = ""
    group: str | None = None
    waiting_for: str | None = None  # a queued job: why it has not started yet
    attempt: str = ""  # `2/3`: which attempt of how many its --retries allow (core/retry)
    # What its record says beyond its state (core/outcome): the tool calls its agent CLI
    # denied, the agent CLI's own API retry under way, and a queued attempt's earliest start
    # (`resumes_at`: that time while it is still ahead, else None).
    denied_tools: list[str] | None = None
    agent_retry: dict[str, Any] | None = None
    not_before: str | None = None
    resumes_at: str | None = None
    note: str = ""  # the table's REASON when core/outcome says something (never in to_dict)
    fan_out: str | None = None  # the fan-out it is one of (`delegate compare FAN_OUT`)

    def to_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in JSON_KEYS}


JSON_KEYS = (
    "job_id",
    "job_state",
    "session",
    "session_state",
    "tmux",
    "agent",
    "age_s",
    "last_event",
    "queue_position",
    "host",
    "group",
    "waiting_for",
    "attempt",
    "denied_tools",
    "agent_retry",
    "not_before",
    "resumes_at",
    "fan_out",
)


class Listing(NamedTuple):
    rows: list[Row]
    tmux_note: str | None = None


def last_event(state: State, job_id: str) -> str:
    """The newest published or received event of a job, read from the end of its log."""
    return _last_event(state, job_id)[0]


def last_event_detail(state: State, job_id: str) -> tuple[str, str]:
    """The newest published or received event (`3 progress`) and its detail."""
    return _last_event(state, job_id)


def _last_event(state: State, job_id: str) -> tuple[str, str]:
    """The newest published or received event (`3 progress`) and its detail."""
    path = state.audit.events_path(job_id)
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            tail = handle.read().splitlines()
    except FileNotFoundError:
        return "", ""
    for line in reversed(tail):
        try:
            entry = fastjson.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("kind") in ("published", "received"):
            envelope = entry.get("envelope")
            detail = envelope.get("detail") if isinstance(envelope, dict) else None
            return f"{entry.get('seq')} {entry.get('event')}", str(detail or "")
    return "", ""


def _age_s(job: Job, now: datetime) -> float:
    created = parse_timestamp(job.created_at)
    return max(0.0, (now - created).total_seconds())


def job_timing(job: Job, now: datetime) -> tuple[float | None, str | None]:
    """How long the job has run (running: since it started; finished: start to end, or its
    whole life when it never started; queued and pending: since it was registered), and when
    it ended (its record's last change, once terminal)."""

    stamp = record_timestamp(now)
    if job.status.terminal:
        ended = job.updated_at
        return seconds_between(job.started_at or job.created_at, ended), ended
    if job.status is JobState.RUNNING and job.started_at:
        return seconds_between(job.started_at, stamp), None
    return seconds_between(job.created_at, stamp), None


def _end_reason(job: Job, queue_position: int | None, waiting: str | None) -> str:
    if queue_position is not None:
        return f"queued #{queue_position}" + (f": {waiting}" if waiting else "")
    return (job.error or "-") if job.status.terminal else "-"


def waiting_reasons(
    state: State, jobs: list[Job], open_jobs: list[Job] | None = None
) -> dict[str, str]:
    """Why each queued job among `jobs` has not started: its dependencies, its group, a cap.
    `open_jobs`: the open jobs when the caller has them already (else read from the index)."""
    queued = [j for j in jobs if j.status is JobState.QUEUED]
    if not queued:
        return {}
    # services.jobs.launch (the caps of delegate.toml, tmux, the launcher): only with a queue
    from delegate.services.jobs.launch import busy_now, caps, gate_for

    cap, gate, busy = caps(state), gate_for(state, queued), busy_now(state)
    if open_jobs is None:
        open_jobs = state.registry.open_jobs()
    slots = Slots(open_jobs, busy)  # counted once for every queued job
    reasons = {}
    for job in queued:
        reasons[job.job_id] = (
            waiting_for(job, open_jobs, cap, busy, gate, slots) or "a slot is free"
        )
    return reasons


class TmuxFacts(NamedTuple):
    """What the session inventory and tmux said of some jobs' sessions, asked once for all."""

    default_socket: str
    sessions: dict[str, Session]
    views: dict[str, TmuxView]
    panes: dict[tuple[str, str], Pane]
    note: str | None  # tmux servers that could not be asked


class RowContext(NamedTuple):
    """What a row needs beyond its own job: the clock, the tmux facts, the queue."""

    now: datetime
    tmux: TmuxFacts
    positions: dict[str, int]  # a queued job's place in the queue, from 1
    waiting: dict[str, str]  # a queued job: why it has not started yet


def tmux_facts(state: State, jobs: list[Job], tmux: Tmux | None = None) -> TmuxFacts:
    """The sessions of `jobs` from the inventory and one tmux query per socket that may
    still hold one of them."""
    names = sorted({j.session for j in jobs if j.session})
    inventory = SessionInventory(state.layout.sessions_db)
    sessions = (
        inventory.by_names(names) if len(names) < 900 else {s.name: s for s in inventory.list()}
    )
    default = socket_path_for(state.env.get(TMUX_SOCKET_ENV), state.env)
    views = _tmux_views(state, jobs, sessions, default, tmux)
    unreachable = [v for v in views.values() if v.status == "unreachable"]
    note = None
    if unreachable:
        note = "; ".join(f"tmux on {v.socket} could not be asked: {v.reason}" for v in unreachable)
    panes: dict[tuple[str, str], Pane] = {
        (sock, p.session): p for sock, v in views.items() for p in v.panes
    }
    return TmuxFacts(default, sessions, views, panes, note)


def live_memory(jobs: list[Job], facts: TmuxFacts) -> dict[str, int]:
    """The resident memory now of each running job's agent (every process below its pane's
    wrapper, a sandbox's included), by job id: one pass over /proc for all of them."""
    roots: dict[str, int] = {}
    for job in jobs:
        pane = facts.panes.get((job.tmux_socket or facts.default_socket, job.session or ""))
        if job.status is JobState.RUNNING and not job.host and pane is not None and pane.pid > 0:
            roots[job.job_id] = pane.pid
    if not roots:
        return {}
    found = tree_memory(list(roots.values()))
    return {job_id: found[pid] for job_id, pid in roots.items() if pid in found}


def queue_positions(jobs: list[Job]) -> dict[str, int]:
    """Each queued job's place among the queued ones of `jobs`, in the order listed."""
    queued = (j.job_id for j in jobs if j.status is JobState.QUEUED)
    return {job_id: place for place, job_id in enumerate(queued, start=1)}


def row_context(state: State, jobs: list[Job], tmux: Tmux | None = None) -> RowContext:
    """Everything `row_for` needs for the rows of `jobs` (in their listed order)."""
    return RowContext(
        datetime.now(UTC),
        tmux_facts(state, jobs, tmux),
        queue_positions(jobs),
        waiting_reasons(state, jobs),
    )


def row_for(
    state: State, job: Job, context: RowContext, event: tuple[str, str] | None = None
) -> Row:
    """The one definition of a `ps` row. `event`: the job's last event and its detail when
    the caller knows them already (else read from the end of its audit log)."""
    facts = context.tmux
    session = facts.sessions.get(job.session or "")
    socket = job.tmux_socket or facts.default_socket
    pane = facts.panes.get((socket, job.session or ""))
    live = _liveness(job, session, facts.views.get(socket), pane)
    queue_position = context.positions.get(job.job_id)
    waiting = context.waiting.get(job.job_id)
    hosted = session is not None and session.job_id == job.job_id
    last, detail = event if event is not None else _last_event(state, job.job_id)
    duration, ended = job_timing(job, context.now)
    note = status_note(
        job.status.value,
        denied_tools=job.denied_tools,
        agent_retry=job.agent_retry,
        not_before=job.not_before,
        now=context.now,
    )
    return Row(
        job.job_id,
        job.status.value,
        job.session or "-",
        session.state.value if hosted and session else "-",
        live,
        job.agent or "-",
        round(_age_s(job, context.now), 1),
        last,
        queue_position,
        job.host,
        duration_s=duration,
        # what the record says beyond the state (core/outcome: a wait to resume, the agent's
        # API retry, a completion's denials) comes before the queue place or the ending
        end_reason=note or _end_reason(job, queue_position, waiting),
        started_at=job.started_at,
        ended_at=ended,
        last_detail=detail,
        group=job.group,
        fan_out=job.fan_out,
        waiting_for=waiting,
        attempt=attempt_label(job),
        denied_tools=list(job.denied_tools) if job.denied_tools is not None else None,
        agent_retry=dict(job.agent_retry) if job.agent_retry is not None else None,
        not_before=job.not_before,
        resumes_at=resumes_at(job.status.value, job.not_before, context.now),
        note=note,
    )


def rows(
    state: State,
    *,
    show_all: bool = False,
    limit: int = 10,
    tmux: Tmux | None = None,
    group: str | None = None,
) -> Listing:
    jobs = _listed_jobs(state, show_all=show_all, limit=limit, group=group)
    context = row_context(state, jobs, tmux)
    return Listing([row_for(state, job, context) for job in jobs], context.tmux.note)


def _listed_jobs(state: State, *, show_all: bool, limit: int, group: str | None) -> list[Job]:
    """Every job with `show_all`; else the open ones and the `limit` latest that ended; with
    `group`, only that group's (its finished ones looked for in the whole history)."""
    registry = state.registry
    if group is not None:  # the whole history is read: a group's jobs have no index
        listed = registry.list() if show_all or limit else registry.open_jobs()
        mine = [j for j in listed if j.group == group]
        if show_all:
            return mine
        ended = sorted(
            (j for j in mine if j.status.terminal), key=lambda j: (j.created_at, j.job_id)
        )
        return [j for j in mine if not j.status.terminal] + (ended[-limit:] if limit else [])
    if show_all:
        return registry.list()
    # an attempt that was retried is shown by its latest attempt (`show` lists them all)
    ended = [j for j in registry.recent_finished(limit) if not j.retried_by]
    return registry.open_jobs() + sorted(ended, key=lambda j: (j.created_at, j.job_id))


def _tmux_views(
    state: State,
    jobs: list[Job],
    sessions: dict[str, Session],
    default: str,
    tmux: Tmux | None,
) -> dict[str, TmuxView]:
    """What each tmux server that may still hold a listed job's session shows, by socket."""
    # tmux is asked only about servers where a listed session may still exist: a session whose
    # row is terminated is gone by the books, and an old history needs no tmux process at all.
    sockets = {
        (j.tmux_socket or default)
        for j in jobs
        if j.session
        and (
            (row := sessions.get(j.session)) is None
            or row.state is not SessionState.TERMINATED
            or not j.status.terminal
        )
    }
    views: dict[str, TmuxView] = {}
    for socket in sorted(sockets):
        server = (
            tmux if tmux is not None and tmux.socket_path == socket else Tmux(socket, state.env)
        )
        views[socket] = server.view()
    return views


def _liveness(job: Job, session: Session | None, view: TmuxView | None, pane: Pane | None) -> str:
    """The LIVE column: what tmux says of the job's pane (alive, exited N, gone, ...)."""
    if pane is not None and pane.job_id and pane.job_id != job.job_id:
        pane = None  # the name hosts a later job now
    if job.host is not None:
        return f"on {job.host}"  # its pane is on the agent host, asked by that host
    if job.session is None or (session is not None and session.job_id != job.job_id):
        return "-"
    if view is None and session is not None:
        return "gone"  # terminated by the books; tmux was not asked
    if view is not None and view.status == "unreachable":
        return "unknown"
    if pane is None:
        return "-" if session is None else "gone"
    if pane.dead:
        # tmux 3.3 now and then leaves a pane's process unreaped (seen with many panes
        # exiting at once) and cannot tell its status; the job's own record still has it.
        return f"exited {'?' if pane.exit_status is None else pane.exit_status}"
    return "alive"


class DependencyGraph(NamedTuple):
    """Open jobs with the jobs they wait for: the roots (waiting for none of them) and, per
    job id, the jobs that wait for it."""

    roots: list[Job]
    dependents: dict[str, list[Job]]
    waiting: dict[str, str]  # a queued job: why it has not started


def dependency_graph(state: State, *, group: str | None = None) -> DependencyGraph:
    """The `ps --tree` graph of the open jobs (of `group`), with the (maybe ended) jobs they
    wait for."""
    jobs = {j.job_id: j for j in state.registry.open_jobs() if group is None or j.group == group}
    for dep in {d for j in list(jobs.values()) for d in j.after or ()} - jobs.keys():
        try:
            jobs[dep] = state.registry.get(dep)
        except DelegateError:
            continue
    dependents: dict[str, list[Job]] = {}
    for job in sorted(jobs.values(), key=lambda j: (j.created_at, j.job_id)):
        for dep in job.after or ():
            dependents.setdefault(dep, []).append(job)
    roots = [j for j in jobs.values() if not set(j.after or ()) & jobs.keys()]
    roots.sort(key=lambda j: (j.created_at, j.job_id))
    return DependencyGraph(roots, dependents, waiting_reasons(state, list(jobs.values())))
