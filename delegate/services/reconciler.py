"""Carrying out the reconcile policy: gather a snapshot, ask `reconcile`, execute its actions.

The supervisor of one job and `delegate monitor` both use a `Reconciler`; they differ only in
what they look at (one job, or everything) and what they print. Each action is executed as a
transition that only one caller can make (the registry lock, the session table), and only the
caller that made it writes the audit line and reports it, so two callers at once record each
action exactly once.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from delegate.adapters.tmux import Tmux, job_process_alive, settle, socket_path_for
from delegate.config.logsetup import get_logger
from delegate.config.profiles import lost_after_s, read_config
from delegate.config.settings import TMUX_SOCKET_ENV
from delegate.core.caps import Caps
from delegate.core.errors import DelegateError
from delegate.core.model import EventType, Job, JobState, Pane, Session, SessionState, TmuxView
from delegate.core.policy import (
    DEFAULT_LOST_AFTER_S,
    Action,
    ApplyEvent,
    FailJob,
    KillSession,
    LaunchJob,
    PolicySettings,
    ReportOrphan,
    SeenAgain,
    SeenEvent,
    SetSession,
    SkipSocket,
    Snapshot,
    jobs_on_socket,
    reconcile,
)
from delegate.core.timefmt import record_timestamp
from delegate.core.why import inferred_reason
from delegate.services.jobs.finish import AuditLine, end_job, event_ending
from delegate.services.jobs.launch import (
    caps,
    claim_and_launch,
    gate_for,
    inventory,
    launcher_alive,
)
from delegate.services.state import State

log = get_logger(__name__)

RECONCILED = "reconciled"  # the audit kind of an action taken
RECONCILE_FAILED = "reconcile_failed"  # an action tried and not carried out (retried next pass)
UNSEEN = "unseen"  # the audit kind: the job's tmux server could not be asked (once an episode)
SEEN_AGAIN = "seen_again"  # ... and answered again


@dataclass
class Done:
    """One action as it was carried out (or reported), ready to print and audit."""

    action: Action
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    audited: bool = False  # its line was written with the job's end (services/jobs/finish)

    def to_dict(self) -> dict[str, Any]:
        a = self.action
        out: dict[str, Any] = {"action": a.kind, "job_id": a.job_id, "reason": a.reason}
        for name in ("session", "socket", "event", "seq"):
            if hasattr(a, name):
                out[name] = getattr(a, name)
        if isinstance(a, SetSession):
            out["state"] = a.state.value
        if isinstance(a, ReportOrphan):
            out["killed"] = a.kill
        out["evidence"] = dict(a.evidence)
        if self.note:
            out["note"] = self.note
        out.update(self.extra)
        return out

    def sentence(self) -> str:
        text = self.action.describe()
        return f"{text}; {self.note}" if self.note else text


def _unsettled(pane: Pane) -> bool:
    return pane.dead and bool(pane.job_id) and pane.exit_status is None and not pane.exit_signal


class Reconciler:
    def __init__(
        self,
        state: State,
        *,
        settings: PolicySettings | None = None,
        actor: str = "monitor",
        report: Callable[[Done], None] = lambda done: None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.state = state
        self.actor = actor
        self.report = report
        self.now = now
        self.default_socket = socket_path_for(state.env.get(TMUX_SOCKET_ENV), state.env)
        self.settings = replace(settings or PolicySettings(), default_socket=self.default_socket)
        if self.settings.lost_after_s is None:
            configured = lost_after_s(read_config(state.layout.home, state.env).tables)
            grace = DEFAULT_LOST_AFTER_S if configured is None else configured
            self.settings = replace(self.settings, lost_after_s=grace)
        self.tmux_queries = 0  # for the benchmark: tmux processes started by passes
        self.last_snapshot: Snapshot | None = None
        self._tmux: dict[str, Tmux] = {}

    # --- looking -------------------------------------------------------------------------

    def tmux(self, socket: str) -> Tmux:
        if socket not in self._tmux:
            self._tmux[socket] = Tmux(socket, self.state.env)
        return self._tmux[socket]

    def view(self, socket: str) -> TmuxView:
        """One query. A pane of ours that shows dead without how it ended is completed from
        /proc when tmux has not reaped it yet (tmux 3.3 now and then never does), else asked
        about once more: tmux marks a pane dead when its terminal closes and learns the exit
        status a moment later."""
        seen = TmuxView(socket, "ok")
        for pause in (0.03, 0.0):
            self.tmux_queries += 1
            seen = self.tmux(socket).view()
            if seen.status == "ok" and seen.reason:
                log.warning("%s: tmux on %s: %s", self.actor, socket, seen.reason)
            panes = tuple(settle(p) for p in seen.panes)
            seen = seen._replace(panes=panes)
            if not pause or not any(_unsettled(p) for p in panes):
                return seen
            time.sleep(pause)
        return seen

    def snapshot(
        self,
        *,
        events: Sequence[SeenEvent] = (),
        sockets: Iterable[str] | None = None,
        only_job: str | None = None,
        queued: bool = True,
    ) -> Snapshot:
        """Read the open index, the live session rows and, once per socket, tmux.

        `sockets`: which servers to ask (default: every socket an open job or row names, and
        this environment's). `only_job`: a supervisor's view, its own session row only.
        `queued=False`: without the queued jobs (a pass that launches none need not look at
        10,000 of them: no event, session or deadline is theirs).
        """
        registry = self.state.registry
        followed = registry.followed_open_jobs(ordered=False)  # (the rules sort what they must)
        if not queued:
            followed = [j for j in followed if j.status is not JobState.QUEUED]
        jobs = {j.job_id: j for j in followed}
        # Whose launcher still runs is read before the session rows: a launcher that was gone
        # by then had written every row it would write, so a pending job with no row really
        # was never launched. (Read after, a launcher finishing in between looked like one that
        # died before launching, and its running job was launched a second time.)
        alive = frozenset(
            j.job_id
            for j in jobs.values()
            if j.status is JobState.PENDING and (j.launch or j.host) and launcher_alive(j.launcher)
        )
        # read after the launchers, for the same reason: a gone launcher wrote its last line
        assigned_at = {
            j.job_id: sent[-1]["ts"]
            for j in jobs.values()
            if j.host and j.status is JobState.PENDING and j.job_id not in alive
            if (sent := self.state.audit.read_events(j.job_id, kind="assigned"))
        }
        queued_there: set[str] = set()
        if assigned_at:
            # services.remote (uuid, platform, the MQTT wire): only with host jobs; the
            # supervisor's passes over a local job never load it
            from delegate.services.remote import HostBook

            book = HostBook(self.state)
            for host in {j.host for j in jobs.values() if j.job_id in assigned_at and j.host}:
                said = (book.presence(host) or {}).get("jobs") or []
                queued_there.update(
                    str(e.get("job_id"))
                    for e in said
                    if isinstance(e, dict) and e.get("status") == "queued"
                )
        rows = self._live_rows(jobs, only_job)
        wanted = self._sockets_to_ask(jobs, rows) if sockets is None else set(sockets)
        views = {sock: self._unless_panes_live(self.view(sock), rows) for sock in sorted(wanted)}
        # Sessions tmux shows that no live row names: their closed rows, if any, so a session
        # still being killed (its row already terminated) is not taken for an orphan.
        live_names = {r.name for r in rows}
        unknown = sorted({p.session for v in views.values() for p in v.panes} - live_names)
        closed = list(inventory(self.state).by_names(unknown).values()) if unknown else []
        remote = [j for j in jobs.values() if j.host and not j.status.terminal]
        hosts, unheard = {}, False
        if remote:
            # only with host jobs (as above)
            from delegate.services.remote import broker_unheard, host_ages

            hosts = host_ages(self.state, remote, int(self.now().timestamp() * 1000))
            unheard = broker_unheard(self.state)
        snap = Snapshot(
            hosts=hosts,
            jobs=list(jobs.values()),
            views=views,
            sessions=rows,
            closed_sessions=closed,
            now=self.now(),
            events=events,
            launchers_alive=alive,
            assigned_at=assigned_at,
            queued_on_host=frozenset(queued_there),
            broker_unheard=unheard,
            unseen_since=inventory(self.state).unseen(),
            gate=gate_for(
                self.state,
                [j for j in jobs.values() if j.status is JobState.QUEUED],
                self.now(),
                known=jobs,
            ),
        )
        self.last_snapshot = snap
        return snap

    @staticmethod
    def _unless_panes_live(seen: TmuxView, rows: Sequence[Session]) -> TmuxView:
        """A server with no socket file and no tmux listening is "gone" only when no pane
        process of a job on it still runs: one that does means tmux is out of sight (a socket
        deleted, a server in another namespace), not dead. With the file still there, nothing
        listening on it is a dead server (killed, rebooted away) whatever its panes do."""
        if seen.status != "gone" or os.path.exists(seen.socket):
            return seen
        for row in rows:
            ours = row.socket == seen.socket and row.pane_pid and row.job_id
            if ours and job_process_alive(row.pane_pid or 0, row.job_id or ""):
                why = (
                    f"{seen.reason}; no tmux server listens there, but pane process"
                    f" {row.pane_pid} of job {row.job_id} still runs"
                )
                return seen._replace(status="unreachable", reason=why)
        return seen

    def _live_rows(self, jobs: dict[str, Job], only_job: str | None) -> list[Session]:
        """The live session rows (with `only_job`, its own only), each row's job added to
        `jobs` when the open index did not hold it."""
        registry = self.state.registry
        rows = inventory(self.state).live()
        if only_job is not None:
            own = jobs.get(only_job)
            rows = [r for r in rows if r.job_id == only_job or (own and r.name == own.session)]
            if own is None:
                with contextlib.suppress(DelegateError):
                    jobs[only_job] = registry.get(only_job)
        for row in rows:
            if row.job_id and row.job_id not in jobs:
                try:
                    jobs[row.job_id] = registry.get(row.job_id)
                except DelegateError:
                    continue
        return rows

    def _sockets_to_ask(self, jobs: dict[str, Job], rows: list[Session]) -> set[str]:
        """Every tmux socket an open job or live row names, and this environment's."""
        wanted = {self.default_socket}
        wanted.update(j.tmux_socket for j in jobs.values() if j.tmux_socket and j.session)
        wanted.update(r.socket for r in rows if r.socket)
        return wanted

    def caps(self) -> Caps:
        return self.settings.caps if self.settings.caps is not None else caps(self.state)

    # --- acting --------------------------------------------------------------------------

    def run_pass(
        self,
        *,
        events: Sequence[SeenEvent] = (),
        sockets: Iterable[str] | None = None,
        only_job: str | None = None,
        keep: Callable[[Action], bool] = lambda action: True,
        launch: bool = True,
    ) -> list[Done]:
        """One pass; `launch=False` leaves the queue to the next full pass (what applies
        events at once need not judge 10,000 queued jobs)."""
        snap = self.snapshot(events=events, sockets=sockets, only_job=only_job, queued=launch)
        settings = replace(self.settings, caps=self.caps())
        if not launch:
            settings = replace(settings, launch_queued=False)
        actions = [a for a in reconcile(snap, settings) if keep(a)]
        return self.execute(actions)

    def execute(self, actions: Sequence[Action]) -> list[Done]:
        done: list[Done] = []
        not_ours: set[str] = set()  # jobs that ended otherwise than this pass decided
        for action in actions:
            try:
                result = self._execute(action, not_ours)
            except DelegateError as exc:
                log.warning("%s: could not carry out %s: %s", self.actor, action.kind, exc)
                result = Done(action, note=f"failed: {exc}")
                if isinstance(action, (FailJob, KillSession, LaunchJob)):
                    self._audit(result, kind=RECONCILE_FAILED)
                self.report(result)
                done.append(result)
                continue
            if result is None:
                continue
            if not result.audited:
                self._audit(result)
            self.report(result)
            done.append(result)
        return done

    def _line(self, done: Done, kind: str = RECONCILED) -> AuditLine:
        entry = done.to_dict()
        entry.pop("job_id", None)
        return AuditLine(kind, {"actor": self.actor, **entry})

    def _end(self, action: Action, target: JobState, **how: Any) -> tuple[Done | None, Job]:
        """End the action's job through finish.end_job, its audit line written with the end;
        a Done only for the caller whose end landed, and the job as it is now."""
        assert action.job_id is not None
        done = Done(action, audited=True)
        ending = end_job(
            self.state,
            action.job_id,
            target,
            actor=self.actor,
            because=self._line(done),
            cause=self._cause(action),
            **how,
        )
        return (done if ending.changed else None), ending.job

    def _cause(self, action: Action) -> dict[str, Any]:
        """Where an ending this pass decides comes from: an agent's event it received, or what
        it saw (a dead pane, a gone server, a passed deadline) or inferred (a lost server or
        host), with the evidence."""
        if isinstance(action, ApplyEvent):
            told = {"source": "agent", "event": action.event, "observed": True}
            return {**told, "detail": action.detail} if action.detail else told
        return {
            "source": self.actor,
            "rule": action.kind,
            "evidence": dict(action.evidence),
            "observed": not inferred_reason(action.reason),
        }

    def _audit(self, done: Done, *, kind: str = RECONCILED) -> None:
        job_id = done.action.job_id
        if not job_id:
            return
        line = self._line(done, kind)
        try:
            self.state.audit.append(job_id, line.kind, **line.fields)
        except (OSError, DelegateError) as exc:
            log.warning("could not audit %s for job %s: %s", done.action.kind, job_id, exc)

    def _execute(self, action: Action, not_ours: set[str]) -> Done | None:
        """Carry out one action; a Done when this caller's change landed, None when there was
        nothing left to do. `not_ours` collects the jobs that ended otherwise than decided."""
        if isinstance(action, ApplyEvent):
            return self._apply_event(action)
        if isinstance(action, FailJob):
            return self._fail_job(action, not_ours)
        if isinstance(action, SetSession):
            return self._set_session(action, not_ours)
        if isinstance(action, KillSession):
            return self._kill_session(action, not_ours)
        if isinstance(action, ReportOrphan):
            return self._report_orphan(action)
        if isinstance(action, LaunchJob):
            return self._launch(action)
        if isinstance(action, SkipSocket):
            return self._unseen(action)
        if isinstance(action, SeenAgain):
            return self._seen_again(action)
        raise AssertionError(f"unknown action {action!r}")

    def _jobs_on(self, socket: str, *, ended_too: bool = False) -> list[str]:
        snap = self.last_snapshot
        if snap is None:
            return []
        return jobs_on_socket(snap, self.settings, socket, ended_too=ended_too)

    def _audit_jobs(self, done: Done, kind: str, job_ids: Sequence[str]) -> None:
        for job_id in job_ids:
            self._audit(Done(replace(done.action, job_id=job_id), extra=done.extra), kind=kind)

    def _unseen(self, action: SkipSocket) -> Done | None:
        """Begin an episode of not seeing tmux on the socket, told once (to whoever began it)
        and written in the audit of every job on it; later passes of the episode say nothing.
        Nothing is decided about those jobs until the server is seen again or the grace ends."""
        now = record_timestamp(self.now())
        if not inventory(self.state).begin_unseen(action.socket, action.reason, now):
            return None
        jobs = self._jobs_on(action.socket)
        grace = self.settings.lost_after_s
        done = Done(
            action,
            note=f"no verdict on its jobs; they end lost if it stays unseen {grace:g} s",
            extra={"jobs": jobs, "unseen_since": now},
        )
        self._audit_jobs(done, UNSEEN, jobs)
        return done

    def _seen_again(self, action: SeenAgain) -> Done | None:
        if not inventory(self.state).end_unseen(action.socket):
            return None
        done = Done(action, extra={"jobs": self._jobs_on(action.socket, ended_too=True)})
        self._audit_jobs(done, SEEN_AGAIN, done.extra["jobs"])
        return done

    def _apply_event(self, action: ApplyEvent) -> Done | None:
        assert action.job_id is not None
        event = EventType(action.event)
        if event.terminal:
            target, reason = event_ending(event, action.detail)
            return self._end(action, target, reason=reason, by_event=True)[0]
        _job, changed = self.state.registry.apply_event(action.job_id, event, detail=action.detail)
        return Done(action) if changed else None

    def _fail_job(self, action: FailJob, not_ours: set[str]) -> Done | None:
        assert action.job_id is not None
        done, ended = self._end(action, JobState.ERROR, reason=action.reason)
        if done is None and ended.error != action.reason:
            # it ended otherwise (its own event, a cancel): leave its session be
            not_ours.add(action.job_id)
        # (ended by another caller with the same decision: help finish the kill that
        # follows, which only one of us records)
        return done

    def _set_session(self, action: SetSession, not_ours: set[str]) -> Done | None:
        if action.follows_fail and action.job_id in not_ours:
            return None
        _row, changed = inventory(self.state).set_state(
            action.session, action.state, reason=action.reason, job_id=action.job_id
        )
        return Done(action) if changed else None

    def _kill_session(self, action: KillSession, not_ours: set[str]) -> Done | None:
        if action.follows_fail and action.job_id in not_ours:
            return None
        sessions = inventory(self.state)
        row = sessions.get(action.session)
        if row is None or row.state is SessionState.TERMINATED or row.job_id != action.job_id:
            return None  # someone else finished it, or the name hosts another job now
        # Kill first and record after: a kill that fails leaves the row as it was, so the
        # next pass tries again. Two callers may both kill (harmless); only the one whose
        # transition lands reports and audits it.
        pids = self.tmux(action.socket or self.default_socket).kill(
            action.session, job_id=action.job_id
        )
        _row, changed = sessions.set_state(
            action.session,
            SessionState.TERMINATED,
            reason=action.reason,
            job_id=action.job_id,
        )
        return Done(action, extra={"pids": pids}) if changed else None

    def _report_orphan(self, action: ReportOrphan) -> Done:
        if action.kill:
            pids = self.tmux(action.socket).kill(action.session, job_id=action.job_id)
            return Done(action, extra={"pids": pids})
        return Done(action)

    def _launch(self, action: LaunchJob) -> Done | None:
        assert action.job_id is not None
        launched: Job | None = claim_and_launch(
            self.state,
            action.job_id,
            expected_launcher=action.expected_launcher,
            cap=self.caps(),
        )
        return Done(action, extra={"session": launched.session}) if launched else None
