"""The reconcile policy: whether jobs and sessions have ended, decided by pure rules.

`reconcile(snapshot, settings)` takes what one look at the world saw (open jobs, the tmux panes of
each server from one query each, the session rows, accepted events, `now`) and returns the actions
that make the books true (DESIGN 8). It does no I/O: the per-job supervisor and `delegate monitor`
gather the snapshot and carry the actions out (services/reconciler.py), so both decide alike.
It is six named rules (servers not asked, accepted events, open jobs, session rows, orphans,
queued launches), each a function of the indexed snapshot (`Facts`) that can be tried alone;
`reconcile` runs them in a fixed order, documented there, because the later ones read what the
earlier ones decided.

Deadlines come from the record (`started_at`, `last_event_at`, the budgets), never from when the
caller started, so every caller computes the same instant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from delegate.core.caps import (
    Caps,
    Gate,
    Slots,
    broken_dependency,
    busy_sessions,
    dependency_failure,
    group_holds,
    may_start,
)
from delegate.core.model import (
    EVENT_TARGET_STATE,
    SESSION_PREFIX,
    EventType,
    Job,
    JobState,
    Pane,
    Session,
    SessionState,
    TmuxView,
)
from delegate.core.timefmt import parse_timestamp, record_timestamp

DEFAULT_KEEP_FINISHED_S = 600.0

# Reasons a job is failed for, as they appear in the record's `error`.
AGENT_EXITED = "agent_exited"
TMUX_GONE = "tmux_gone"
WALL_TIMEOUT = "wall_timeout"
IDLE_TIMEOUT = "idle_timeout"
NEVER_LAUNCHED = "never_launched"
HOST_LOST = "host_lost"
# tmux could not be asked about the job's server for longer than the grace: its fate unknown
LOST = "lost"
DEFAULT_LOST_AFTER_S = 60.0
# Errors a pass decides; a session whose job ended so is killed, never merely stopped.
ENDED_BY_RECONCILE = (
    AGENT_EXITED,
    TMUX_GONE,
    WALL_TIMEOUT,
    IDLE_TIMEOUT,
    NEVER_LAUNCHED,
    HOST_LOST,
    LOST,
)


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
    # per tmux socket that could not be asked: when that episode began (the first pass that
    # could not see it); absent for servers seen at their last look
    unseen_since: Mapping[str, str] = field(default_factory=dict)
    # this side cannot hear the broker: hosts' silence and their jobs' quiet say nothing
    broker_unheard: bool = False
    # the states of the jobs queued jobs wait for, and the queue groups' rules
    gate: Gate = field(default_factory=Gate)


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
    # how long a job's tmux server may stay unseen before the job ends `lost` (None: whoever
    # runs the policy reads it from delegate.toml, else DEFAULT_LOST_AFTER_S)
    lost_after_s: float | None = None


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


@dataclass(frozen=True)
class SeenAgain(Action):
    """tmux on a socket that could not be asked answered again: that episode is over."""

    socket: str = ""

    def describe(self) -> str:
        return f"tmux on {self.socket}: seen again ({self.reason})"


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


# --- the rules -----------------------------------------------------------------------------
# Each rule is a pure function of the facts (and, for the later ones, of what the earlier ones
# decided); `reconcile()` below runs them in a fixed order and says why that order.


class Placement(NamedTuple):
    """Where a job's session lives, as this look saw it: its own row, the socket, what the
    server there showed (None: not asked), and its pane (None: absent or another job's)."""

    row: Session | None
    socket: str
    view: TmuxView | None
    pane: Pane | None

    @property
    def launched(self) -> bool:
        return self.row is not None and (self.row.pane_pid is not None or self.pane is not None)


@dataclass(frozen=True)
class Facts:
    """The snapshot as the rules read it: jobs by id (as they stand after the events this pass
    applies), live session rows by name (the last of a name), and the first pane each server
    listed per session."""

    snap: Snapshot
    settings: PolicySettings
    jobs: Mapping[str, Job]
    rows: Mapping[str, Session]
    panes: Mapping[tuple[str, str], Pane]

    @classmethod
    def of(
        cls,
        snap: Snapshot,
        settings: PolicySettings = PolicySettings(),
        jobs: Mapping[str, Job] | None = None,
    ) -> Facts:
        """Index `snap`; `jobs` replaces its jobs (default: the snapshot's, by id)."""
        panes: dict[tuple[str, str], Pane] = {}
        for socket, view in snap.views.items():
            for pane in view.panes:
                panes.setdefault((socket, pane.session), pane)
        if jobs is None:
            jobs = {j.job_id: j for j in snap.jobs}
        return cls(snap, settings, jobs, {r.name: r for r in snap.sessions}, panes)

    @property
    def now(self) -> datetime:
        return self.snap.now

    def socket_of(self, job: Job | None, row: Session | None) -> str:
        """The row's socket, else the job's, else where jobs without one live ("" if unknown)."""
        return (
            (row.socket if row else None)
            or (job.tmux_socket if job else None)
            or self.settings.default_socket
            or ""
        )

    def placement(self, job: Job) -> Placement:
        row = self.rows.get(job.session or "")
        if row is not None and row.job_id != job.job_id:
            row = None  # the name now hosts another job
        socket = self.socket_of(job, row)
        pane = self.panes.get((socket, job.session or ""))
        if pane is not None and pane.job_id and pane.job_id != job.job_id:
            pane = None  # marked for another job
        return Placement(row, socket, self.snap.views.get(socket), pane)


def _by_age(job: Job) -> tuple[str, str]:
    return (job.created_at, job.job_id)


# rule 1: servers tmux could not be asked -----------------------------------------------------


def unreachable_servers(snap: Snapshot) -> list[Action]:
    """A tmux server that could not be asked gets no verdict this pass; say why, per socket.
    A server unseen before that answered now (ok, or no server there) ends its episode."""
    actions: list[Action] = []
    for socket, view in sorted(snap.views.items()):
        since = snap.unseen_since.get(socket)
        if view.status == "unreachable":
            actions.append(SkipSocket("skip_socket", None, view.reason, {}, socket=socket))
        elif since is not None:
            evidence = {"unseen_since": since, "tmux": view.status}
            why = "no server there" if view.status == "gone" else "it answered"
            actions.append(SeenAgain("seen_again", None, why, evidence, socket=socket))
    return actions


def jobs_on_socket(
    snap: Snapshot, settings: PolicySettings, socket: str, *, ended_too: bool = False
) -> list[str]:
    """The open jobs in tmux whose session lives on `socket`, oldest first: those a server
    there that cannot be asked leaves unseen (`ended_too`: and the ended ones whose session
    row is still live there, such as a job ended `lost` meanwhile)."""
    facts = Facts.of(snap, settings)
    found = []
    for j in sorted(facts.jobs.values(), key=_by_age):
        if not j.session or j.host is not None:
            continue
        placed = facts.placement(j)
        wanted = not j.status.terminal or (ended_too and placed.row is not None)
        if wanted and placed.socket == socket:
            found.append(j.job_id)
    return found


# rule 2: accepted events ---------------------------------------------------------------------


def accepted_events(snap: Snapshot) -> tuple[list[Action], dict[str, Job]]:
    """A state-changing event of an open job is applied, in the order received.

    Returns the actions and the jobs as they stand after them (a job a `completed` or `error`
    ended), which every later rule reads: a second terminal event of that job is not applied.
    """
    jobs = {j.job_id: j for j in snap.jobs}
    actions: list[Action] = []
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
    return actions, jobs


# rule 3: open jobs, oldest first -------------------------------------------------------------


def fail_actions(
    job: Job, reason: str, evidence: dict[str, Any], facts: Facts, *, kill_row: Session | None
) -> list[Action]:
    """Fail `job`; with `kill_row`, end its session too: recorded terminated where its server is
    gone or cannot be asked, else killed."""
    actions: list[Action] = [FailJob("fail_job", job.job_id, reason, evidence)]
    if kill_row is None:
        return actions
    socket = facts.socket_of(job, kill_row)
    view = facts.snap.views.get(socket)
    why = f"job {job.job_id} {reason}"
    if view is not None and view.status in ("gone", "unreachable"):
        actions.append(
            SetSession(
                "set_session",
                job.job_id,
                why,
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
                why,
                evidence,
                session=kill_row.name,
                socket=socket,
                follows_fail=True,
            )
        )
    return actions


def _fail_if_late(
    job: Job, reason: str | None, facts: Facts, *, kill_row: Session | None = None
) -> list[Action]:
    if reason is None:
        return []
    return fail_actions(job, reason, _deadline_evidence(job, facts.now), facts, kill_row=kill_row)


def judge_remote_job(job: Job, facts: Facts) -> list[Action]:
    """A job on an agent host: its own monitor watches the pane; here, whether the host is still
    heard from, whether the job was ever assigned, and the deadlines."""
    snap = facts.snap
    if snap.broker_unheard:
        return []  # not knowing is not evidence: nothing is judged until the broker is heard
    heard = snap.hosts.get(job.host or "")
    if heard is not None and heard[0] >= heard[1]:
        evidence = {"host": job.host, "silent_s": round(heard[0], 1), "lost_after_s": heard[1]}
        return fail_actions(job, HOST_LOST, evidence, facts, kill_row=None)
    if job.status is JobState.RUNNING:
        return _fail_if_late(job, deadline_passed(job, facts.now), facts)
    if job.job_id in snap.launchers_alive:
        return []  # its submit is still assigning it
    if job.job_id not in snap.assigned_at:
        return [
            LaunchJob(
                "launch_job",
                job.job_id,
                "registered but never assigned (its launcher is gone)",
                {"host": job.host, "launcher": job.launcher},
                expected_launcher=job.launcher,
            )
        ]
    if job.job_id in snap.queued_on_host:
        return []  # waits for a slot there, under no deadline, as a local queued job
    # assigned, not started yet: measured from the assignment, as a local job is from its
    # launch, so a host that never starts it does not keep it open
    assigned = snap.assigned_at[job.job_id]
    return _fail_if_late(job, deadline_passed(job, facts.now, launched_at=assigned), facts)


def judge_job_outside_tmux(job: Job, facts: Facts) -> list[Action]:
    """A job picked by an agent outside tmux: only the deadlines of a running one apply."""
    reason = deadline_passed(job, facts.now) if job.status is JobState.RUNNING else None
    return _fail_if_late(job, reason, facts)


def judge_unlaunched_job(job: Job, placed: Placement, facts: Facts) -> list[Action]:
    """A pending job with a launch spec and no session yet: launched again when its launcher
    died before launching it (never while it lives, nor while its server cannot be asked)."""
    if job.job_id in facts.snap.launchers_alive:
        return []  # its launcher is still at it
    if placed.view is not None and placed.view.status == "unreachable":
        return []
    return [
        LaunchJob(
            "launch_job",
            job.job_id,
            "registered but never launched (its launcher is gone)",
            {"launcher": job.launcher},
            expected_launcher=job.launcher,
        )
    ]


def judge_unseen_job(job: Job, placed: Placement, facts: Facts) -> list[Action]:
    """A launched job whose server cannot be asked: no verdict and nothing killed (SkipSocket
    says why) until the server has been unseen `lost_after_s`; then the job ends `lost`,
    saying so. Its session row is left as it is: it is settled when the server is seen again
    (killed then, as the kill of any job a pass failed) or found gone."""
    view = placed.view
    assert view is not None
    since = facts.snap.unseen_since.get(placed.socket)
    unseen_s = _seconds_since(since, facts.now)
    grace = facts.settings.lost_after_s
    grace = DEFAULT_LOST_AFTER_S if grace is None else grace
    if unseen_s is None or unseen_s < grace:
        return []
    reason = (
        f"{LOST}: tmux on {placed.socket} could not be asked for {unseen_s:.0f} s"
        f" (grace {grace:g} s): {view.reason}"
    )
    evidence: dict[str, Any] = {"socket": placed.socket, "tmux": view.reason}
    evidence.update(unseen_since=since, lost_after_s=grace)
    return fail_actions(job, reason, evidence, facts, kill_row=None)


def judge_job_in_tmux(job: Job, placed: Placement, facts: Facts) -> list[Action]:
    """A launched job (pending before `started`, or running) in a local tmux session: failed
    when its server is gone, its pane is gone or dead, or a deadline passed."""
    row, view, pane = placed.row, placed.view, placed.pane
    launched_at = row.updated_at if row is not None else None
    if view is None:
        # its server was not asked this time: only the record's deadlines can be judged
        reason = deadline_passed(job, facts.now, launched_at=launched_at)
        return _fail_if_late(job, reason, facts, kill_row=row)
    if view.status == "unreachable":
        return judge_unseen_job(job, placed, facts)
    if view.status == "gone":
        evidence = {"socket": view.socket, "tmux": view.reason}
        return fail_actions(job, TMUX_GONE, evidence, facts, kill_row=row)
    if pane is None or pane.dead:
        evidence = _pane_evidence(pane, view)
        return fail_actions(job, _exited_reason(pane), evidence, facts, kill_row=row)
    reason = deadline_passed(job, facts.now, launched_at=launched_at)
    return _fail_if_late(job, reason, facts, kill_row=row)


def judge_open_job(job: Job, facts: Facts) -> list[Action]:
    """The verdict on one open, not queued job: which of the judges above it falls to."""
    if job.host is not None:
        return judge_remote_job(job, facts)
    if job.session is None:
        return judge_job_outside_tmux(job, facts)
    if job.status is JobState.PENDING and not job.launch:
        return []  # registered for `pick`, never for tmux: nothing to reconcile
    placed = facts.placement(job)
    if job.status is JobState.PENDING and not placed.launched:
        return judge_unlaunched_job(job, placed, facts)
    return judge_job_in_tmux(job, placed, facts)


def open_job_verdicts(facts: Facts) -> list[Action]:
    """Every open job but the queued ones, oldest first (ties by id), judged alone."""
    actions: list[Action] = []
    judged = [j for j in facts.jobs.values() if j.status in _JUDGED]  # a queue is not sorted
    for job in sorted(judged, key=_by_age):
        actions.extend(judge_open_job(job, facts))
    return actions


_JUDGED = frozenset({JobState.PENDING, JobState.RUNNING})


# rule 4: session rows ------------------------------------------------------------------------


def _kill_still_due(row: Session, job: Job | None) -> str | None:
    """Why a running session of an ended job must still be killed, or None."""
    if row.state is not SessionState.RUNNING or job is None:
        return None
    if job.status is JobState.ERROR and (job.error or "").startswith(ENDED_BY_RECONCILE):
        # failed by a pass (maybe another caller's, maybe one that crashed before its kill):
        # the kill that goes with that verdict is still due
        return f"job {row.job_id} {job.error}"
    if job.status is JobState.CANCELLED:
        # a cancel whose kill is under way, or could not reach tmux: finish it (a session stop
        # sets its own state before it cancels, so it never comes here)
        return f"job {row.job_id} cancelled; its agent was still running"
    return None


def _kept_long_enough(row: Session, socket: str, facts: Facts) -> list[Action]:
    """A stopped session of an ended job, killed once kept `keep_finished_s` for inspection."""
    keep = facts.settings.keep_finished_s
    if (_seconds_since(row.updated_at, facts.now) or 0.0) < keep:
        return []
    why = f"finished, kept {keep:g} s for inspection"
    evidence = {"stopped_at": row.updated_at}
    return [KillSession("kill_session", row.job_id, why, evidence, session=row.name, socket=socket)]


def judge_session_row(row: Session, facts: Facts) -> list[Action]:
    """One live row: terminated when its tmux session is gone (and its job is not open), a kill
    still due carried out, stopped when its job ended, killed once kept long enough."""
    job = facts.jobs.get(row.job_id or "")
    socket = facts.socket_of(job, row)
    view = facts.snap.views.get(socket)
    if view is None or view.status == "unreachable":
        return []
    pane = facts.panes.get((socket, row.name))
    job_open = job is not None and not job.status.terminal
    if pane is None:
        if job_open:
            return []
        why = "its tmux session is gone"
        evidence = {"row_socket": socket, "tmux": view.status}
        state = SessionState.TERMINATED
        return [SetSession("set_session", row.job_id, why, evidence, session=row.name, state=state)]
    kill_reason = _kill_still_due(row, job)
    if kill_reason is not None:
        evidence = _pane_evidence(pane, view)
        return [
            KillSession(
                "kill_session", row.job_id, kill_reason, evidence, session=row.name, socket=socket
            )
        ]
    if row.state is SessionState.RUNNING and job is not None and job.status.terminal:
        why = f"job {row.job_id} {job.status.value}"
        evidence = {"job_status": job.status.value}
        state = SessionState.STOPPED
        return [SetSession("set_session", row.job_id, why, evidence, session=row.name, state=state)]
    if row.state is SessionState.STOPPED and not job_open:
        return _kept_long_enough(row, socket, facts)
    return []


def session_row_actions(facts: Facts, verdicts: Sequence[Action] = ()) -> list[Action]:
    """Every live row, in the snapshot's order, except the rows `verdicts` (rule 3's actions)
    already end: those of jobs failed this pass, and sessions killed or closed with them."""
    ended = {a.job_id for a in verdicts if isinstance(a, FailJob)}
    closed = {a.session for a in verdicts if isinstance(a, (SetSession, KillSession))}
    actions: list[Action] = []
    for row in facts.snap.sessions:
        if row.name not in closed and row.job_id not in ended:
            actions.extend(judge_session_row(row, facts))
    return actions


# rule 5: orphans -----------------------------------------------------------------------------


def orphan_sessions(facts: Facts) -> list[Action]:
    """Toolkit sessions (marked with a job, or named `dlg-...`) that no record knows, by socket
    and name; killed too only with `reap_orphans`."""
    if not facts.settings.report_orphans:
        return []
    # closed rows of sessions tmux still shows: being killed, or a kill that failed
    known = {*facts.rows, *(s.name for s in facts.snap.closed_sessions)}
    actions: list[Action] = []
    for (socket, name), pane in sorted(facts.panes.items()):
        ours = bool(pane.job_id) or name.startswith(SESSION_PREFIX)
        if name in known or not ours:
            continue
        actions.append(
            ReportOrphan(
                "orphan",
                pane.job_id or None,
                "no session record knows it",
                {"socket": socket, "job_mark": pane.job_id},
                session=name,
                socket=socket,
                kill=facts.settings.reap_orphans,
            )
        )
    return actions


# rule 6: queued jobs under the caps ----------------------------------------------------------


def queued_launches(facts: Facts, earlier: Sequence[Action] = ()) -> list[Action]:
    """Queued jobs, oldest first, while the caps, their groups and their dependencies allow
    (`launch_queued`); a queued job whose dependency can no longer satisfy it is failed.

    `earlier`: what this pass decided before. Jobs it failed hold no slot; sessions it stops or
    kills free theirs, since the executor carries those actions out before the launches.
    """
    if not facts.settings.launch_queued:
        return []
    ended = {a.job_id for a in earlier if isinstance(a, FailJob)}
    open_now = [j for j in facts.jobs.values() if not j.status.terminal and j.job_id not in ended]
    closing = {a.session for a in earlier if isinstance(a, (SetSession, KillSession))}
    busy = busy_sessions([r for r in facts.snap.sessions if r.name not in closing])
    caps = facts.settings.caps or Caps()
    gate = facts.snap.gate
    if gate.now is None:  # a retry waiting its backoff is judged against this pass's time
        gate = gate._replace(now=facts.now)
    actions: list[Action] = []
    slots = Slots(open_now, busy)  # counted once; each launch below takes one
    queued = [j for j in open_now if j.status is JobState.QUEUED]
    # a group that holds all its jobs (paused, its day's budget spent): judged once, so a
    # paused plan of 10,000 jobs costs a look-up each, not a judgement each
    held = {name for name, rule in gate.groups.items() if group_holds(name, rule)}
    # (a job with dependencies stays: one may fail it below)
    judged = [j for j in queued if j.after or j.group not in held] if held else queued
    for job in sorted(judged, key=_by_age):
        broken = broken_dependency(job.after, job.after_rule, gate)
        if broken is not None:  # its ender settles it at once; this pass is the safety net
            reason = dependency_failure(broken, gate)
            actions.append(FailJob("fail_job", job.job_id, reason, {"dependency": broken}))
            continue
        # (a job on an agent host waits for no slot here: its host counts its own)
        if job.host is None and caps.total is not None and slots.beside(job)[0] >= caps.total:
            continue  # every slot taken: no queued job starts (the rest only for the net above)
        if not may_start(job, open_now, caps, busy, gate, slots):
            continue
        actions.append(
            LaunchJob("launch_job", job.job_id, "a slot is free", {}, expected_launcher=None)
        )
        slots.take(job)  # holds a slot now (one on a host counts as its running jobs do)
    return actions


# --- the policy ------------------------------------------------------------------------------


def reconcile(snap: Snapshot, settings: PolicySettings = PolicySettings()) -> list[Action]:
    """The actions that make jobs and sessions agree with what was seen. Pure: no I/O.

    The rules run in this order, and their actions are returned in it:
    1. `unreachable_servers`: first, so the reason nothing on a server is judged comes first.
    2. `accepted_events`: before any verdict, so a job that reported its own end is not failed
       for the pane its agent left behind, and its session is stopped in the same pass.
    3. `open_job_verdicts`: host lost, tmux gone, agent exited, deadlines, never launched.
    4. `session_row_actions`: after 3, which it must not repeat (a session killed with its job).
    5. `orphan_sessions`.
    6. `queued_launches`: last, so the slots that 3 and 4 free are free, and the executor has
       stopped those sessions before it launches.

    Applying the same snapshot's actions twice changes nothing the second time, since every
    action is a transition its executor makes only from the state the snapshot saw.
    """
    actions = unreachable_servers(snap)
    applied, jobs = accepted_events(snap)
    actions += applied
    facts = Facts.of(snap, settings, jobs)
    verdicts = open_job_verdicts(facts)
    actions += verdicts
    actions += session_row_actions(facts, verdicts)
    actions += orphan_sessions(facts)
    actions += queued_launches(facts, actions)
    return actions
