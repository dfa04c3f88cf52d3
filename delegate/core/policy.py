"""The reconcile policy: whether jobs and sessions have ended, decided in one pure function.

`reconcile(snapshot, settings)` takes what one look at the world saw (open jobs, the tmux panes of
each server from one query each, the session rows, accepted events, `now`) and returns the actions
that make the books true (DESIGN 8). It does no I/O: the per-job supervisor and `delegate monitor`
gather the snapshot and carry the actions out (services/reconciler.py), so both decide alike.

Deadlines come from the record (`started_at`, `last_event_at`, the budgets), never from when the
caller started, so every caller computes the same instant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from delegate.core.model import (
    EVENT_TARGET_STATE,
    EventType,
    Job,
    JobState,
    Pane,
    Session,
    SessionState,
    TmuxView,
)
from delegate.core.timefmt import parse_timestamp, record_timestamp

SESSION_PREFIX = "dlg-"
DEFAULT_KEEP_FINISHED_S = 600.0

# Reasons a job is failed for, as they appear in the record's `error`.
AGENT_EXITED = "agent_exited"
TMUX_GONE = "tmux_gone"
WALL_TIMEOUT = "wall_timeout"
IDLE_TIMEOUT = "idle_timeout"
NEVER_LAUNCHED = "never_launched"
HOST_LOST = "host_lost"
# Errors a pass decides; a session whose job ended so is killed, never merely stopped.
ENDED_BY_RECONCILE = (
    AGENT_EXITED,
    TMUX_GONE,
    WALL_TIMEOUT,
    IDLE_TIMEOUT,
    NEVER_LAUNCHED,
    HOST_LOST,
)


# --- the concurrency cap -------------------------------------------------------------------


@dataclass(frozen=True)
class Caps:
    """`max_running` from delegate.toml: for all jobs, and per profile (agent name)."""

    total: int | None = None
    per_agent: Mapping[str, int] = field(default_factory=dict)


def occupies_slot(job: Job) -> bool:
    """A job that counts against the cap: running, or admitted to start (pending with a spec)."""
    return job.status is JobState.RUNNING or (job.status is JobState.PENDING and bool(job.launch))


def may_start(
    job: Job,
    others: Sequence[Job],
    caps: Caps,
    busy: Mapping[str, str | None] | None = None,
) -> bool:
    """Whether `job` may start now beside `others` (the other open jobs).

    `busy` (job id -> agent) names the jobs whose session is still recorded running: a job
    that just ended holds its slot until its session is stopped, so the session history never
    shows more sessions running than the cap allows.
    """
    active = {j.job_id: j.agent for j in others if occupies_slot(j)}
    for job_id, agent in (busy or {}).items():
        active.setdefault(job_id, agent)
    active.pop(job.job_id, None)
    if caps.total is not None and len(active) >= caps.total:
        return False
    agent_cap = caps.per_agent.get(job.agent or "")
    if agent_cap is not None and sum(1 for a in active.values() if a == job.agent) >= agent_cap:
        return False
    return job.max_running is None or len(active) < job.max_running


def busy_sessions(rows: Sequence[Session]) -> dict[str, str | None]:
    """Job id -> agent of the session rows still recorded running a job."""
    return {r.job_id: r.agent for r in rows if r.state is SessionState.RUNNING and r.job_id}


# --- what was seen -------------------------------------------------------------------------


class SeenEvent:
    """An accepted (verified) event of a job, as a subscriber received it."""

    __slots__ = ("detail", "event", "job_id", "seq")

    def __init__(self, job_id: str, event: str, seq: int, detail: str = "") -> None:
        self.job_id = job_id
        self.event = event
        self.seq = seq
        self.detail = detail


@dataclass(frozen=True)
class Snapshot:
    """One look at the world.

    `jobs`: the open jobs, plus the ended jobs that open session rows still name.
    `views`: per tmux socket path, what one `list-panes -a` saw (sockets not asked are absent).
    `sessions`: the live session rows (running, stopped, archived).
    `launchers_alive`: ids of pending jobs whose recorded launcher process still runs.
    `closed_sessions`: terminated rows of sessions tmux still shows (being killed, or a kill
    that failed): a record knows them, so they are no orphans.
    """

    jobs: Sequence[Job]
    views: Mapping[str, TmuxView]
    sessions: Sequence[Session]
    now: datetime
    events: Sequence[SeenEvent] = ()
    launchers_alive: frozenset[str] = frozenset()
    closed_sessions: Sequence[Session] = ()  # closed rows of sessions tmux still shows
    # per agent host of an open job: (seconds since it was last heard, its lost_after)
    hosts: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # per pending job on an agent host whose launcher is gone: when its assignment was sent
    # (absent: never sent)
    assigned_at: Mapping[str, str] = field(default_factory=dict)
    # jobs their host's last presence shows queued there (its own caps): waiting for a slot
    queued_on_host: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PolicySettings:
    """What the policy is told rather than sees (named apart from the configuration's Settings,
    which whoever runs the policy turns into these)."""

    keep_finished_s: float = DEFAULT_KEEP_FINISHED_S
    reap_orphans: bool = False
    caps: Caps | None = None  # None: whoever runs the policy reads them from delegate.toml
    launch_queued: bool = True
    report_orphans: bool = True
    default_socket: str | None = None  # where jobs without a recorded socket live


# --- actions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    kind: str
    job_id: str | None
    reason: str
    evidence: Mapping[str, Any]

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class ApplyEvent(Action):
    event: str = ""
    seq: int = 0
    detail: str = ""

    def describe(self) -> str:
        return f"job {self.job_id}: applied its {self.event} event (seq {self.seq})"


@dataclass(frozen=True)
class FailJob(Action):
    def describe(self) -> str:
        return f"job {self.job_id}: failed ({self.reason})"


@dataclass(frozen=True)
class SetSession(Action):
    session: str = ""
    state: SessionState = SessionState.TERMINATED
    follows_fail: bool = False  # only when the FailJob before it was applied by this caller

    def describe(self) -> str:
        return f"session {self.session}: {self.state.value} ({self.reason})"


@dataclass(frozen=True)
class KillSession(Action):
    """Kill a session with every process of its job, then record it terminated."""

    session: str = ""
    socket: str = ""
    follows_fail: bool = False  # only when the FailJob before it was applied by this caller

    def describe(self) -> str:
        return f"session {self.session}: killed ({self.reason})"


@dataclass(frozen=True)
class ReportOrphan(Action):
    session: str = ""
    socket: str = ""
    kill: bool = False

    def describe(self) -> str:
        verb = "killed" if self.kill else "reported"
        return f"orphan session {self.session} on {self.socket}: {verb} ({self.reason})"


@dataclass(frozen=True)
class LaunchJob(Action):
    expected_launcher: Mapping[str, Any] | None = None

    def describe(self) -> str:
        return f"job {self.job_id}: launched ({self.reason})"


@dataclass(frozen=True)
class SkipSocket(Action):
    """tmux could not be asked: no verdict for anything on that socket this pass."""

    socket: str = ""

    def describe(self) -> str:
        return f"tmux on {self.socket}: not asked this pass ({self.reason})"


# --- the policy ----------------------------------------------------------------------------


def _seconds_since(stamp: str | None, now: datetime) -> float | None:
    if not stamp:
        return None
    return (now - parse_timestamp(stamp)).total_seconds()


def deadline_passed(job: Job, now: datetime, *, launched_at: str | None = None) -> str | None:
    """`wall_timeout` or `idle_timeout` when the job is past that deadline, else None.

    Wall: from `started_at`. Idle: from the last event applied (or the start). A job launched but
    not yet started is measured from `launched_at` on both clocks.
    """
    start = job.started_at or launched_at
    if start is None:
        return None
    if job.wall_timeout_s:
        elapsed = _seconds_since(start, now)
        if elapsed is not None and elapsed >= job.wall_timeout_s:
            return WALL_TIMEOUT
    if job.idle_timeout_s:
        last = max(filter(None, (job.last_event_at, start)))
        silent = _seconds_since(last, now)
        if silent is not None and silent >= job.idle_timeout_s:
            return IDLE_TIMEOUT
    return None


def next_deadline_s(job: Job, now: datetime, *, launched_at: str | None = None) -> float | None:
    """Seconds from `now` until the job's nearest deadline (0 when passed), or None."""
    start = job.started_at or launched_at
    if start is None:
        return None
    waits = []
    if job.wall_timeout_s:
        waits.append(job.wall_timeout_s - (_seconds_since(start, now) or 0.0))
    if job.idle_timeout_s:
        last = max(filter(None, (job.last_event_at, start)))
        waits.append(job.idle_timeout_s - (_seconds_since(last, now) or 0.0))
    return max(0.0, min(waits)) if waits else None


def _pane_evidence(pane: Pane | None, view: TmuxView) -> dict[str, Any]:
    if pane is None:
        return {"socket": view.socket, "tmux": view.status, "pane": "absent"}
    return {
        "socket": view.socket,
        "tmux": view.status,
        "pane": pane.pane_id,
        "pane_dead": pane.dead,
        "exit_status": pane.exit_status,
        "exit_signal": pane.exit_signal,
    }


def _deadline_evidence(job: Job, now: datetime) -> dict[str, Any]:
    return {
        "started_at": job.started_at,
        "last_event_at": job.last_event_at,
        "wall_timeout_s": job.wall_timeout_s,
        "idle_timeout_s": job.idle_timeout_s,
        "now": record_timestamp(now),
    }


def _exited_reason(pane: Pane | None) -> str:
    if pane is None:
        return f"{AGENT_EXITED}: its tmux session is gone"
    if pane.exit_signal:
        return f"{AGENT_EXITED}: the wrapper was killed by signal {pane.exit_signal}"
    if pane.exit_status is not None:
        return f"{AGENT_EXITED}: the wrapper exited with status {pane.exit_status}"
    return f"{AGENT_EXITED}: its pane is dead"


def reconcile(snap: Snapshot, settings: PolicySettings = PolicySettings()) -> list[Action]:
    """The actions that make jobs and sessions agree with what was seen. Pure: no I/O.

    Applying the same snapshot's actions twice changes nothing the second time, since every
    action is a transition its executor makes only from the state the snapshot saw.
    """
    actions: list[Action] = []
    jobs = {j.job_id: j for j in snap.jobs}
    rows = {s.name: s for s in snap.sessions}
    panes: dict[tuple[str, str], Pane] = {}
    for socket, view in snap.views.items():
        for pane in view.panes:
            panes.setdefault((socket, pane.session), pane)
    for socket, view in sorted(snap.views.items()):
        if view.status == "unreachable":
            actions.append(SkipSocket("skip_socket", None, view.reason, {}, socket=socket))

    def socket_of(job: Job | None, row: Session | None) -> str | None:
        return (
            (row.socket if row else None)
            or (job.tmux_socket if job else None)
            or (settings.default_socket)
        )

    # 1. accepted events: a state-changing event of an open job is applied
    for seen in snap.events:
        job = jobs.get(seen.job_id)
        try:
            event = EventType(seen.event)
        except ValueError:
            continue
        if job is None or job.status.terminal or event not in EVENT_TARGET_STATE:
            continue
        actions.append(
            ApplyEvent(
                "apply_event",
                seen.job_id,
                f"{seen.event} received",
                {"seq": seen.seq},
                event=seen.event,
                seq=seen.seq,
                detail=seen.detail,
            )
        )
        if event.terminal:
            jobs[seen.job_id] = job._replace(
                status=JobState.COMPLETED if event is EventType.COMPLETED else JobState.ERROR
            )

    ended_by_this_pass: set[str] = set()
    killed: set[str] = set()

    def fail(job: Job, reason: str, evidence: dict[str, Any], *, kill_row: Session | None) -> None:
        actions.append(FailJob("fail_job", job.job_id, reason, evidence))
        ended_by_this_pass.add(job.job_id)
        if kill_row is not None and kill_row.name not in killed:
            killed.add(kill_row.name)
            sock = socket_of(job, kill_row) or ""
            view = snap.views.get(sock)
            if view is not None and view.status in ("gone", "unreachable"):
                actions.append(
                    SetSession(
                        "set_session",
                        job.job_id,
                        f"job {job.job_id} {reason}",
                        evidence,
                        session=kill_row.name,
                        state=SessionState.TERMINATED,
                        follows_fail=True,
                    )
                )
            else:
                actions.append(
                    KillSession(
                        "kill_session",
                        job.job_id,
                        f"job {job.job_id} {reason}",
                        evidence,
                        session=kill_row.name,
                        socket=sock,
                        follows_fail=True,
                    )
                )

    # 2. open jobs
    for job in sorted(jobs.values(), key=lambda j: (j.created_at, j.job_id)):
        if job.status.terminal or job.status is JobState.QUEUED:
            continue
        row = rows.get(job.session or "")
        if row is not None and row.job_id != job.job_id:
            row = None  # the name now hosts another job
        job_socket = socket_of(job, row) or ""
        job_view = snap.views.get(job_socket)
        job_pane = panes.get((job_socket, job.session or ""))
        if job_pane is not None and job_pane.job_id and job_pane.job_id != job.job_id:
            job_pane = None
        launched = row is not None and (row.pane_pid is not None or job_pane is not None)
        now = snap.now

        if job.host is not None:
            # on an agent host: its own monitor watches the pane; here, whether the host is
            # still heard from, and the deadlines
            heard = snap.hosts.get(job.host)
            if heard is not None and heard[0] >= heard[1]:
                evidence = {
                    "host": job.host,
                    "silent_s": round(heard[0], 1),
                    "lost_after_s": heard[1],
                }
                fail(job, HOST_LOST, evidence, kill_row=None)
                continue
            if job.status is JobState.RUNNING:
                reason = deadline_passed(job, now)
            elif job.job_id in snap.launchers_alive:
                continue  # its submit is still assigning it
            elif job.job_id not in snap.assigned_at:
                actions.append(
                    LaunchJob(
                        "launch_job",
                        job.job_id,
                        "registered but never assigned (its launcher is gone)",
                        {"host": job.host, "launcher": job.launcher},
                        expected_launcher=job.launcher,
                    )
                )
                continue
            elif job.job_id in snap.queued_on_host:
                continue  # waits for a slot there, under no deadline, as a local queued job
            else:
                # assigned, not started yet: measured from the assignment, as a local job is
                # from its launch, so a host that never starts it does not keep it open
                reason = deadline_passed(job, now, launched_at=snap.assigned_at[job.job_id])
            if reason is not None:
                fail(job, reason, _deadline_evidence(job, now), kill_row=None)
            continue
        if job.session is None:
            # picked by an agent outside tmux: only the deadlines apply
            reason = deadline_passed(job, snap.now) if job.status is JobState.RUNNING else None
            if reason is not None:
                fail(job, reason, _deadline_evidence(job, now), kill_row=None)
            continue
        if job.status is JobState.PENDING:
            if not job.launch:
                continue  # registered for `pick`, never for tmux: nothing to reconcile
            if not launched:
                if job.job_id in snap.launchers_alive:
                    continue  # its launcher is still at it
                if job_view is not None and job_view.status == "unreachable":
                    continue
                actions.append(
                    LaunchJob(
                        "launch_job",
                        job.job_id,
                        "registered but never launched (its launcher is gone)",
                        {"launcher": job.launcher},
                        expected_launcher=job.launcher,
                    )
                )
                continue
        # launched (pending before `started`, or running)
        launched_at = row.updated_at if row is not None else None
        if job_view is None:
            # its server was not asked this time: only the record's deadlines can be judged
            reason = deadline_passed(job, now, launched_at=launched_at)
            if reason is not None:
                fail(job, reason, _deadline_evidence(job, now), kill_row=row)
            continue
        if job_view.status == "unreachable":
            continue  # no verdict; SkipSocket says why
        if job_view.status == "gone":
            fail(job, TMUX_GONE, {"socket": job_view.socket, "tmux": job_view.reason}, kill_row=row)
            continue
        if job_pane is None or job_pane.dead:
            fail(job, _exited_reason(job_pane), _pane_evidence(job_pane, job_view), kill_row=row)
            continue
        reason = deadline_passed(job, now, launched_at=launched_at)
        if reason is not None:
            fail(job, reason, _deadline_evidence(job, now), kill_row=row)

    # 3. session rows
    for row in snap.sessions:
        if row.name in killed:
            continue
        row_socket = socket_of(jobs.get(row.job_id or ""), row) or ""
        row_view = snap.views.get(row_socket)
        if row_view is None or row_view.status == "unreachable":
            continue
        row_pane = panes.get((row_socket, row.name))
        job = jobs.get(row.job_id or "")
        job_open = job is not None and not job.status.terminal
        if row.job_id in ended_by_this_pass:
            continue
        if row_pane is None:
            if not job_open:  # running, stopped or archived: the tmux session is gone
                actions.append(
                    SetSession(
                        "set_session",
                        row.job_id,
                        "its tmux session is gone",
                        {"row_socket": row_socket, "tmux": row_view.status},
                        session=row.name,
                        state=SessionState.TERMINATED,
                    )
                )
            continue
        kill_reason = None
        if row.state is SessionState.RUNNING and job is not None:
            if job.status is JobState.ERROR and (job.error or "").startswith(ENDED_BY_RECONCILE):
                # failed by a pass (maybe another caller's, maybe one that crashed before its
                # kill): the kill that goes with that verdict is still due
                kill_reason = f"job {row.job_id} {job.error}"
            elif job.status is JobState.CANCELLED:
                # a cancel whose kill is under way, or could not reach tmux: finish it (a
                # session stop sets its own state before it cancels, so it never comes here)
                kill_reason = f"job {row.job_id} cancelled; its agent was still running"
        if kill_reason is not None:
            actions.append(
                KillSession(
                    "kill_session",
                    row.job_id,
                    kill_reason,
                    _pane_evidence(row_pane, row_view),
                    session=row.name,
                    socket=row_socket,
                )
            )
        elif row.state is SessionState.RUNNING and job is not None and job.status.terminal:
            actions.append(
                SetSession(
                    "set_session",
                    row.job_id,
                    f"job {row.job_id} {job.status.value}",
                    {"job_status": job.status.value},
                    session=row.name,
                    state=SessionState.STOPPED,
                )
            )
        elif row.state is SessionState.STOPPED and not job_open:
            kept = _seconds_since(row.updated_at, snap.now) or 0.0
            if kept >= settings.keep_finished_s:
                actions.append(
                    KillSession(
                        "kill_session",
                        row.job_id,
                        f"finished, kept {settings.keep_finished_s:g} s for inspection",
                        {"stopped_at": row.updated_at},
                        session=row.name,
                        socket=row_socket,
                    )
                )

    # 4. orphans: toolkit sessions no live row knows
    if settings.report_orphans:
        closed_names = {s.name for s in snap.closed_sessions}
        for (socket, name), pane in sorted(panes.items()):
            if name in rows or name in closed_names:
                continue
            if not (pane.job_id or name.startswith(SESSION_PREFIX)):
                continue
            actions.append(
                ReportOrphan(
                    "orphan",
                    pane.job_id or None,
                    "no session record knows it",
                    {"socket": socket, "job_mark": pane.job_id},
                    session=name,
                    socket=socket,
                    kill=settings.reap_orphans,
                )
            )

    # 5. queued jobs, oldest first, while the cap allows
    if settings.launch_queued:
        open_now = [
            j for j in jobs.values() if not j.status.terminal and j.job_id not in ended_by_this_pass
        ]
        # sessions this pass stops or kills free their slots; the executor carries those
        # actions out before the launches that follow them
        closing = {a.session for a in actions if isinstance(a, (SetSession, KillSession))}
        busy = busy_sessions([r for r in snap.sessions if r.name not in closing])
        for job in sorted(open_now, key=lambda j: (j.created_at, j.job_id)):
            if job.status is not JobState.QUEUED:
                continue
            others = [j for j in open_now if j.job_id != job.job_id]
            if not may_start(job, others, settings.caps or Caps(), busy):
                continue
            actions.append(
                LaunchJob("launch_job", job.job_id, "a slot is free", {}, expected_launcher=None)
            )
            index = open_now.index(job)
            open_now[index] = job._replace(status=JobState.PENDING)
    return actions
