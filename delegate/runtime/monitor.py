"""The state dir's supervisor (`delegate monitor`, or started on demand: runtime/supervisor):
one process follows every open job.

It listens to every job's events on each bus in use and applies them (audited as received,
each once), and each interval makes one pass over the open jobs, the live session rows and one
tmux query per socket. Holding the state dir's supervisor.lock (services/supervisor) it is the
state dir's supervisor: its subscriptions keep a cursor (SQLite) or a persistent session
(MQTT), so whoever holds the lock next reads on where it stopped; it leaves after `quiet_s`
with no open job. A monitor that cannot take the lock (another person's monitor holds it)
listens live only and leaves the events to the holder.
A pass comes early when a deadline falls due, when a queued job's `not_before` passes (a retry's
backoff, a rate limit's reset: it is launched at that time, not at the next interval), when a
state-changing event arrives, and the moment a watched wrapper process exits: the monitor holds
a pidfd for every live pane of an open job, which the kernel makes readable when that process
ends, so a killed wrapper or a killed tmux server is noticed at once rather than at the next
interval.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from delegate.adapters.bus import Subscription, open_bus
from delegate.adapters.detached import take_lock
from delegate.config.logsetup import get_logger
from delegate.config.profiles import read_config
from delegate.config.settings import BUS_ENV
from delegate.core.caps import DUE_AFTER_S, due_in_s
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import EVENT_TARGET_STATE, EventType, Job, JobState
from delegate.core.policy import PolicySettings, SeenEvent, next_deadline_s
from delegate.core.protocol import Accepted, Receiver
from delegate.services.jobs.box import clear_left_groups
from delegate.services.jobs.notify import notify, wait_for_notifiers
from delegate.services.jobs.retry import follow_up
from delegate.services.jobs.watch import audit_received, audit_rejected
from delegate.services.reconciler import Done, Reconciler
from delegate.services.remote import HostBook, PresenceWatch, mqtt_settings, refresh_presence
from delegate.services.state import State, strip_credentials, with_own_credentials
from delegate.services.supervisor import consumer_name, hold, lock_path, running_supervisor
from delegate.services.worktrees import over_limits

log = get_logger(__name__)

DEFAULT_INTERVAL_S = 5.0
WAKE_POLL_S = 0.02  # how long one wait for events or pidfds lasts
MIN_PASS_GAP_S = 0.1  # the least time between two passes that events brought on
# A job's publisher applies its own `started`/`completed`/`error` just after it puts it on the
# bus; the supervisor applies one of a local job this long after receiving it, as the net for
# a publisher that died in between. Applied at once, it raced the publisher for the registry
# lock, behind 200 publishers' seqs: a third of its time, and a second's stall at p99.
APPLY_GRACE_S = 0.25
RECENT_ENDINGS = 20  # the latest ended jobs each pass looks at for an attempt no one made
WORKTREE_REPORT_S = 600.0  # how often worktrees over [worktree] keep_max_gb/keep_days are logged
GROUP_SWEEP_S = 10.0  # how often the cgroups ended jobs left are looked for (clear_left_groups)
GROUP_LEFT_S = 5.0  # how long after its end a job's group is its wrapper's to clear


class Monitor:
    def __init__(
        self,
        state: State,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        settings: PolicySettings | None = None,
        report: Callable[[Done], None] = lambda done: None,
        lock: int | None = None,
        quiet_s: float | None = None,
        actor: str = "monitor",
        beside: bool = False,
    ) -> None:
        self.state = state
        self.interval_s = interval_s
        # the state dir's supervisor.lock, held: this is the state dir's supervisor (durable
        # subscriptions, events applied and audited here); None: a monitor beside it
        self.lock = lock
        self.quiet_s = quiet_s  # leave after this long with no open job (None: never)
        # a person's monitor without the lock: it takes the lock over once the supervisor
        # that holds it leaves
        self.beside = beside and lock is None
        self._quiet_since: float | None = None
        # buses whose cursor this process began, and where: their open jobs' histories are
        # caught up to there (the cursor reads on from it)
        self._fresh_cursors: dict[str, int] = {}
        self._ended: dict[str, Receiver] = {}  # the supervisor's receivers of ended jobs
        self._ended_elsewhere = False  # a job's last word seen after its publisher ended it
        self._unreachable: dict[str, float] = {}  # bus URL -> since when it is out of reach
        # who acts, in the audit: "monitor" (a person's), or "supervisor:PID" (one started)
        self.reconciler = Reconciler(state, settings=settings, actor=actor, report=report)
        self._subscriptions: dict[str, Subscription] = {}
        self._buses: dict[str, Any] = {}
        self._receivers: dict[str, Receiver | None] = {}
        self._late_receivers: dict[str, Receiver] = {}
        self._pidfds: dict[int, int] = {}  # pane pid -> pidfd
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_w, False)
        self.stopping = False
        self.passes = 0
        self._worktrees_reported = -WORKTREE_REPORT_S
        self._groups_swept = 0.0
        self._presence: PresenceWatch | None = None  # hosts' presence, while jobs run on hosts
        # the attempts this pass made (after its snapshot): their `not_before` times the next
        self._made: list[Job] = []
        self._looked_at: dict[str, None] = {}  # the latest endings `_follow_up` looked at
        self._remote: set[str] = set()  # jobs on agent hosts (their events: applied at once)

    # --- stopping --------------------------------------------------------------------------

    def stop(self, *_: Any) -> None:
        """Ask the loop to finish (a signal handler: only sets a flag and wakes the wait)."""
        self.stopping = True
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")

    def _stop_requested(self) -> bool:
        return self.stopping

    def _watch_presence(self, jobs: list[Job], *, once: bool) -> None:
        """Hosts' presence into the host book while jobs run on agent hosts, so `host_lost` is
        judged on what the hosts say now (once: the retained presences, then stop)."""
        remote = [j for j in jobs if j.host]
        if self._presence is not None:
            if self._presence.note_listening():
                self._say_listening(remote)
            return
        if not remote:
            return
        if once:
            refresh_presence(self.state)
            return
        try:
            self._presence = PresenceWatch(self.state, mqtt_settings(self.state))
        except DelegateError as exc:
            log.warning("monitor: hosts' presence not followed: %s", exc)
            if HostBook(self.state).record_listening(False, int(time.time() * 1000)):
                self._say_listening(remote)

    def _say_listening(self, remote: list[Job]) -> None:
        """The broker went out of hearing, or came back: said once per episode, in the log and
        in each remote job's audit (while it is unheard, hosts' silence judges nothing)."""
        heard = HostBook(self.state).listening().get("connected") is not False
        kind = "seen_again" if heard else "unseen"
        log.warning("monitor: the broker %s", "is heard again" if heard else "cannot be heard")
        for job in remote:
            self.state.audit.append(job.job_id, kind, what="broker", observed=True)

    def _close_listeners(self) -> None:
        for sub in self._subscriptions.values():
            with contextlib.suppress(Exception):
                sub.close()
        for bus in self._buses.values():
            with contextlib.suppress(Exception):
                bus.close()
        self._subscriptions.clear()
        self._buses.clear()

    def close(self) -> None:
        if self._presence is not None:
            self._presence.close()
        self._close_listeners()
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds.clear()
        os.close(self._stop_r)
        os.close(self._stop_w)
        wait_for_notifiers()

    # --- events ----------------------------------------------------------------------------

    def _bus_urls(self, jobs: list[Job]) -> set[str]:
        urls = {self.state.default_bus_url()}
        urls.update(self.state.bus_url_for(j) for j in jobs if j.bus)  # (else the default)
        return urls

    def _subscribe(self, jobs: list[Job], *, strict: bool = False) -> None:
        """An all-jobs subscription on every bus an open job uses (new ones as they come).
        `strict`: a started supervisor that cannot listen on the state dir's own bus says why
        and ends (its starter waits for it to listen), instead of trying again at each pass."""
        for url in self._bus_urls(jobs):
            if url in self._subscriptions:
                continue
            try:
                bus = open_bus(
                    with_own_credentials(url, self.state.env.get(BUS_ENV)),
                    env=self.state.env,
                )
                if self.lock is None:
                    self._subscriptions[url] = bus.subscribe(None, live_only=True)
                else:
                    self._subscriptions[url] = self._durable(bus, url)
                self._buses[url] = bus
            except DelegateError as exc:
                if strict and url == self.state.default_bus_url():
                    raise
                log.warning("monitor: not listening on %s yet: %s", url, exc)

    def _durable(self, bus: Any, url: str) -> Subscription:
        """The supervisor's subscription on `url`: it reads on from the state dir's cursor
        there (SQLite) or its persistent session (MQTT). A first cursor begins at the bus's end:
        what open jobs said before is caught up from their histories (`_catch_up`)."""
        consumer = consumer_name(self.state, url)
        if url.startswith("sqlite:") and bus.cursor(consumer) is None:
            start = bus.last_seq()
            bus.set_cursor(consumer, start)
            self._fresh_cursors[url] = start
        subscription: Subscription = bus.subscribe(None, consumer=consumer)
        return subscription

    def _catch_up(self, jobs: list[Job]) -> list[SeenEvent]:
        """Events of open jobs already on an embedded bus (published while no one listened);
        none where the supervisor's cursor reads on from where the last one stopped."""
        seen: list[SeenEvent] = []
        by_url: dict[str, list[Job]] = {}
        for job in jobs:
            url = self.state.bus_url_for(job)
            if self.lock is not None and url not in self._fresh_cursors:
                continue
            if url.startswith("sqlite:") and job.status is not JobState.QUEUED:
                by_url.setdefault(url, []).append(job)
        for url, group in by_url.items():
            try:
                bus = open_bus(url)
            except DelegateError as exc:
                log.warning("monitor: could not read the history on %s: %s", url, exc)
                continue
            try:
                until = self._fresh_cursors.get(url) if self.lock is not None else None
                for job in group:
                    seen.extend(self._history(bus, job.job_id, until))
            except DelegateError as exc:
                log.warning("monitor: could not read the history on %s: %s", url, exc)
            finally:
                bus.close()
        return seen

    def _history(self, bus: Any, job_id: str, until: int | None) -> list[SeenEvent]:
        """One job's events on `bus`, up to bus seq `until` (None: all): what the supervisor's
        cursor reads from there on is not read twice."""
        seen = []
        sub = bus.subscribe(job_id)
        try:
            while (message := sub.get(timeout=0)) is not None:
                if until is not None and int(message.handle) > until:
                    break
                event = self._accept(message.job_id, message.payload)
                if event is not None:
                    seen.append(event)
        finally:
            sub.close()
        return seen

    def _accept(self, job_id: str, payload: bytes) -> SeenEvent | None:
        """Verify one message of an open job; None for anything else (not ours to audit)."""
        receiver = self._receiver_for(job_id)
        if receiver is None:
            self._late(job_id, payload)
            return None
        verdict = receiver.check(payload)
        if not isinstance(verdict, Accepted):
            if self.lock is not None:  # the supervisor: on record
                audit_rejected(self.state, job_id, payload, verdict)
            else:
                log.debug("monitor: dropped a message of job %s: %s", job_id, verdict.reason)
            return None
        envelope = verdict.envelope
        try:
            job = self.state.registry.get(job_id)
            if self.lock is not None:  # the supervisor: on record once, and the record on
                audit_received(self.state, job_id, verdict)
                event = EventType(verdict.event)
                # the idle clock; and a state a publisher on another machine cannot apply
                # here (a local job's: its publisher's, or the policy's after APPLY_GRACE_S)
                if event not in EVENT_TARGET_STATE or (job.host and not event.terminal):
                    detail = str(envelope.get("detail", ""))
                    self.state.registry.apply_event(job_id, event, detail=detail)
            if job.host:  # its publisher is on another machine: the supervisor applies it
                self._remote.add(job_id)
            notify(self.state, job, envelope, actor="monitor")
        except DelegateError as exc:
            log.warning("monitor: could not apply an event of job %s: %s", job_id, exc)
        if verdict.event in ("completed", "error"):
            # anything after the terminal event is late: audited as such, never applied (a
            # redelivery of what was accepted here is a duplicate, and dropped)
            self._receivers[job_id] = None
            late = Receiver(job_id, receiver.token)
            late.seen = set(receiver.seen)
            self._late_receivers[job_id] = late
            if self.lock is not None:  # what comes after it is rejected on record, as such
                self._ended[job_id] = receiver
        return SeenEvent(job_id, verdict.event, verdict.seq, str(envelope.get("detail", "")))

    def _receiver_for(self, job_id: str) -> Receiver | None:
        """The receiver of an open job's messages; None once it ended (or for no job)."""
        if job_id not in self._receivers:
            try:
                job = self.state.registry.get(job_id)
            except DelegateError:
                self._receivers[job_id] = None
                return None
            self._receivers[job_id] = None if job.status.terminal else self._receiver(job)
        if self._receivers[job_id] is not None:
            with contextlib.suppress(DelegateError):
                if self.state.registry.get(job_id).status.terminal:
                    # ended meanwhile (its publisher, a cancel, host_lost by a pass): what
                    # comes now is its own last word seen late, or late
                    self._receivers[job_id] = None
        return self._receivers[job_id]

    def _receiver(self, job: Job) -> Receiver:
        """A job's receiver; the supervisor's knows the seqs already audited as received (by
        the one before it, which may have died before its cursor moved on): none twice."""
        receiver = Receiver(job.job_id, job.auth_token)
        if self.lock is not None:
            for line in self.state.audit.read_events(job.job_id, kind="received"):
                if isinstance(line.get("seq"), int):
                    receiver.seen.add(line["seq"])
        return receiver

    def _late(self, job_id: str, payload: bytes) -> None:
        """An event of a job that has ended (a host that comes back with what its agent said
        meanwhile, an agent on another machine reporting after a pass failed its job): verified
        and audited as a late event with its envelope (`delegate logs` shows them); the state
        stays. One the job's own record counted (its seq allocated before the job ended, which
        this monitor only saw after) is not late. All of it the supervisor's to put on record:
        a monitor beside it would say it twice."""
        if self.lock is None:
            return
        finished = self._ended.get(job_id)
        if finished is not None:  # the supervisor saw its end: anything after, on record
            rejected = finished.check(payload)
            if not isinstance(rejected, Accepted):
                audit_rejected(self.state, job_id, payload, rejected)
        try:
            job = self.state.registry.get(job_id)
        except DelegateError:
            return
        if not job.status.terminal:
            return
        late = self._late_receivers.get(job_id)
        if late is None:
            late = self._late_receivers[job_id] = self._receiver(job)
        verdict = late.check(payload)
        if not isinstance(verdict, Accepted):
            return
        if verdict.seq <= job.last_seq and not job.host:
            self._received_after_its_end(job, verdict)
            return
        ended = f"{job.status.value}: {job.error}" if job.error else job.status.value
        where = {"host": job.host} if job.host else {}
        self.state.audit.append(
            job_id,
            "late_event",
            seq=verdict.seq,
            event=verdict.event,
            **where,
            envelope=verdict.envelope,
            note=f"arrived after the job ended {ended}; its state stays",
        )

    def _received_after_its_end(self, job: Job, verdict: Accepted) -> None:
        """An event published here before the job ended, seen after its publisher ended it:
        on record as received, its notifications sent, as for any event; and a pass at once
        when it was the job's last word (its next attempt, its session, the queue behind)."""
        audit_received(self.state, job.job_id, verdict)
        try:
            notify(self.state, job, verdict.envelope, actor="monitor")
        except DelegateError as exc:
            log.warning("monitor: could not notify for job %s: %s", job.job_id, exc)
        if EventType(verdict.event).terminal:
            self._ended_elsewhere = True

    def _poll_events(self) -> list[SeenEvent]:
        """Take every message waiting. A cursor that an ack moves past every message before it
        (SQLite's) is acked once for them all: one write, not one per message, which under
        200 agents' progress was most of the supervisor's time (each is on record as received
        first, and a redelivery after a crash is known by its seq: `_receiver`)."""
        seen = []
        for sub in list(self._subscriptions.values()):
            in_order = getattr(sub, "acks_up_to", False)
            last = None
            while (message := sub.get(timeout=0)) is not None:
                event = None
                if not message.problem:
                    event = self._accept(message.job_id, message.payload)
                if in_order:
                    last = message
                else:
                    sub.ack(message)
                if event is not None:
                    seen.append(event)
            if last is not None:
                sub.ack(last)
        return seen

    # --- pidfds ----------------------------------------------------------------------------

    def _watch_panes(self) -> None:
        """Hold a pidfd for each live pane of an open job seen by the last pass."""
        snap = self.reconciler.last_snapshot
        if snap is None:
            return
        open_sessions = {j.session for j in snap.jobs if j.session and not j.status.terminal}
        wanted = {
            pane.pid
            for view in snap.views.values()
            for pane in view.panes
            if not pane.dead and pane.pid > 0 and pane.session in open_sessions
        }
        for pid in list(self._pidfds):
            if pid not in wanted:
                os.close(self._pidfds.pop(pid))
        for pid in wanted - self._pidfds.keys():
            try:
                self._pidfds[pid] = os.pidfd_open(pid)
            except OSError:
                continue  # already gone: the next pass sees its pane dead

    def _wait(self, timeout: float) -> bool:
        """Wait up to `timeout`; True when a watched wrapper exited."""
        fds = [self._stop_r, *self._pidfds.values()]
        readable, _, _ = select.select(fds, [], [], max(0.0, timeout))
        return any(fd != self._stop_r for fd in readable)

    # --- passes ----------------------------------------------------------------------------

    def _say_unreachable(self, jobs: list[Job]) -> None:
        """A broker the supervisor listens on that cannot be reached, or is again: said once
        each way, in its log and in the audit of each open job on it (while it is out of
        reach, events its jobs publish wait in the supervisor's session there)."""
        for url, sub in self._subscriptions.items():
            reached = getattr(sub, "connected", True)
            if reached == (url not in self._unreachable):
                continue
            where = strip_credentials(url)
            if reached:
                since = time.monotonic() - self._unreachable.pop(url)
                log.warning("supervisor: the bus %s is reached again after %.0f s", where, since)
                kind, note = "seen_again", f"the bus {where} is reached again"
            else:
                self._unreachable[url] = time.monotonic()
                log.warning("supervisor: the bus %s cannot be reached", where)
                kind, note = "unseen", f"the bus {where} cannot be reached; nothing is decided"
            for job in jobs:  # (a job on a host: its host's presence says it, `_say_listening`)
                if not job.host and self.state.bus_url_for(job) == url:
                    self.state.audit.append(job.job_id, kind, what="bus", note=note, observed=True)

    def run_pass(self, events: list[SeenEvent] | None = None) -> list[Done]:
        self._made = []
        done = self.reconciler.run_pass(events=events or ())
        self.passes += 1
        self._follow_up(done)
        self._watch_panes()
        self._report_worktrees()
        self._sweep_groups()
        return done

    def _sweep_groups(self) -> None:
        """Now and then (the supervisor only), the cgroups that ended jobs left behind: their
        wrapper was killed before it could clear them, and its agent may still run there."""
        if self.lock is None or time.monotonic() - self._groups_swept < GROUP_SWEEP_S:
            return
        self._groups_swept = time.monotonic()
        try:
            for job_id in clear_left_groups(self.state, GROUP_LEFT_S):
                log.warning("supervisor: cleared the cgroups job %s left behind", job_id)
        except (OSError, DelegateError) as exc:
            log.warning("supervisor: could not look at the jobs' cgroups: %s", exc)

    def _follow_up(self, done: list[Done]) -> None:
        """The next attempts of the jobs this pass ended, and of the latest that ended while
        no one made theirs (a supervisor that died first): each is made once (its key)."""
        ended = {d.action.job_id for d in done if d.action.job_id}
        # the net, once per ending: one this process looked at is followed by its note if a
        # passing failure left it undone (`follow_ups`), not looked at again every pass
        recent = [j.job_id for j in self.state.registry.recent_finished(RECENT_ENDINGS)]
        ended.update(job_id for job_id in recent if job_id not in self._looked_at)
        self._looked_at = dict.fromkeys([*self._looked_at, *recent][-4 * RECENT_ENDINGS :])
        ended.update(self.state.registry.follow_ups())  # noted at their end, however long ago
        for job_id in sorted(ended):
            with contextlib.suppress(DelegateError):
                made = follow_up(self.state, job_id)
                if made is not None:
                    self._made.append(made)

    def _report_worktrees(self) -> None:
        """Log the job worktrees over `[worktree]` limits now and then; never remove any."""
        if time.monotonic() - self._worktrees_reported < WORKTREE_REPORT_S:
            return
        self._worktrees_reported = time.monotonic()
        try:
            found = over_limits(self.state, read_config(self.state.layout.home, self.state.env))
        except DelegateError as exc:
            log.warning("monitor: could not look at job worktrees: %s", exc)
            return
        for line in found:
            log.warning("monitor: %s; `delegate worktree clean` removes what holds no work", line)

    def _next_deadline(self) -> float:
        """Seconds to the next pass: the interval, or sooner a running job's deadline, or the
        moment a queued job's `not_before` passes (so it is launched then: a rate-limited
        attempt resumes at its reset, wherever its own supervisor is)."""
        snap = self.reconciler.last_snapshot
        if snap is None:
            return self.interval_s
        now = datetime.now(UTC)
        waits = [self.interval_s]
        for job in [*snap.jobs, *self._made]:
            if job.status is JobState.RUNNING:
                wait = next_deadline_s(job, now)
                if wait is not None:
                    waits.append(wait + 0.01)
            due = due_in_s(job, now)
            if due:  # (0: its time has passed, and it waits for something else: a slot)
                waits.append(due + DUE_AFTER_S)
        return min(waits)

    def _take_over_when_free(self) -> None:
        """A person's monitor beside a started supervisor: once that one has left, this one is
        the state dir's supervisor (its durable subscriptions, events on record) from now."""
        if not self.beside:
            return
        lock = take_lock(lock_path(self.state))
        if lock is None:
            return
        hold(lock, "foreground")
        self.lock, self.beside = lock, False
        log.warning("monitor: the supervisor left; this monitor follows the state dir now")
        self._close_listeners()  # the next `_subscribe` reads on from the cursors
        self._receivers.clear()  # made again knowing what was received
        self._late_receivers.clear()

    def _leaves(self, jobs: list[Job]) -> bool:
        """Whether the supervisor is done: its state dir is gone, or no job was open for
        `quiet_s`. It lets go of the lock before it looks a last time, so a job registered
        by a command that found the lock still held is seen here, and followed."""
        if not self.state.layout.home.is_dir():
            return True
        if self.quiet_s is None or self.lock is None or jobs:
            self._quiet_since = None
            return False
        now = time.monotonic()
        if self._quiet_since is None:
            self._quiet_since = now
        if now - self._quiet_since < self.quiet_s:
            return False
        import fcntl  # fcntl: only a supervisor leaving lets go of its lock

        fcntl.flock(self.lock, fcntl.LOCK_UN)
        if not self.state.registry.open_jobs():
            return True
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True  # another was started meanwhile: it follows them
        hold(self.lock, "started")
        self._quiet_since = None
        return False

    def run(self, *, once: bool = False, on_ready: Callable[[], None] | None = None) -> int:
        jobs = self.state.registry.open_jobs()
        self._watch_presence(jobs, once=once)
        if not once:
            self._subscribe(jobs, strict=on_ready is not None)
        if on_ready is not None:
            on_ready()
        events = self._catch_up(jobs)
        self.run_pass(events)
        if once:
            return 0
        next_pass = time.monotonic() + self._next_deadline()
        changing: list[tuple[float, SeenEvent]] = []  # (when it may be applied, the event)
        woke, applied_at, passed_at = False, 0.0, 0.0
        while not self.stopping:
            woke = self._pause(woke, passed_at, next_pass)
            if self._stop_requested():
                break
            events = self._poll_events()  # each on record as received at once
            now = time.monotonic()
            changing += [
                (now if e.job_id in self._remote else now + APPLY_GRACE_S, e)
                for e in events
                if EventType(e.event) in EVENT_TARGET_STATE
            ]
            # an ending wants a pass at once (its session, the queue): its publisher has
            # mostly ended the job by then; the pass after its grace covers one that had not
            woke = woke or any(EventType(e.event).terminal for e in events)
            # Passes come at most every MIN_PASS_GAP_S: a burst of endings (200 jobs done in
            # a second, beside 10,000 queued) is applied in a few passes, not one each.
            due_now = [e for at, e in changing if at <= now]
            if due_now and now - applied_at >= MIN_PASS_GAP_S:
                # applied here (no tmux needed), then a full pass for sessions and the queue;
                # what its publisher applied meanwhile is seen so without the registry lock
                self.reconciler.run_pass(events=due_now, sockets=(), launch=False)
                woke = woke or any(EventType(e.event).terminal for e in due_now)
                changing, applied_at = [(at, e) for at, e in changing if at > now], now
            if self._ended_elsewhere:
                self._ended_elsewhere, woke = False, True
            due = woke and now - passed_at >= MIN_PASS_GAP_S
            if due or time.monotonic() >= next_pass:
                woke, passed_at = False, now
                if self._full_pass():
                    break
                next_pass = time.monotonic() + self._next_deadline()
        return 0

    def _pause(self, woke: bool, passed_at: float, next_pass: float) -> bool:
        """Wait a moment for events; whether a pass is wanted (it was, or a wrapper exited).
        Once one is wanted, only the gap since the last pass is waited out: a readable pidfd
        would make every wait return at once, and the loop spin."""
        if woke:
            gap = passed_at + MIN_PASS_GAP_S - time.monotonic()
            time.sleep(min(WAKE_POLL_S, max(0.0, gap)))
            return True
        return self._wait(min(WAKE_POLL_S, max(0.0, next_pass - time.monotonic())))

    def _full_pass(self) -> bool:
        """One pass over every open job, then the upkeep around it; whether to leave now."""
        jobs = self.state.registry.followed_open_jobs(ordered=False)  # what changed, read again
        self._watch_presence(jobs, once=False)  # hosts' presence, and whether heard
        self.run_pass()
        self._take_over_when_free()
        self._subscribe(jobs)
        self._say_unreachable(jobs)
        return self._leaves(jobs)


def run_monitor(
    state: State,
    *,
    once: bool,
    interval_s: float,
    settings: PolicySettings,
    report: Callable[[Done], None],
) -> int:
    """Run the monitor until SIGTERM/SIGINT (exit 0), or one pass with `once`."""
    if interval_s <= 0:
        raise UsageError("--interval must be a positive number of seconds")
    lock = None
    if not once:  # the state dir's supervisor, when none runs; else beside it until it leaves
        state.layout.home.mkdir(parents=True, exist_ok=True)
        lock = take_lock(lock_path(state))
        if lock is None:
            log.warning(
                "the state dir's supervisor runs (pid %s): this monitor runs beside it and takes"
                " over when it leaves",
                running_supervisor(state),
            )
        else:
            hold(lock, "foreground")
    monitor = Monitor(
        state, interval_s=interval_s, settings=settings, report=report, lock=lock, beside=not once
    )
    with serve_signals(monitor):
        try:
            return monitor.run(once=once)
        finally:
            monitor.close()


@contextlib.contextmanager
def serve_signals(monitor: Monitor) -> Iterator[None]:
    """SIGTERM and SIGINT ask `monitor` to finish its pass and stop (exit 0)."""
    previous = {sig: signal.signal(sig, monitor.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
