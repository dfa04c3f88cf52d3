"""`delegate monitor`: keep the books true for every job, even when its own subscriber died.

It listens to every job's events on each bus in use (live only: on MQTT no retained outcome of a
past job is replayed on reconnect) and applies them through the reconcile policy, and each
interval makes one pass over the open jobs, the live session rows and one tmux query per socket.
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
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from delegate.adapters.bus import Subscription, open_bus
from delegate.config.logsetup import get_logger
from delegate.config.profiles import read_config
from delegate.config.settings import BUS_ENV
from delegate.core.caps import DUE_AFTER_S, due_in_s
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import EVENT_TARGET_STATE, EventType, Job, JobState
from delegate.core.policy import PolicySettings, SeenEvent, next_deadline_s
from delegate.core.protocol import Accepted, Receiver
from delegate.services.jobs.notify import notify, wait_for_notifiers
from delegate.services.jobs.retry import follow_up
from delegate.services.reconciler import Done, Reconciler
from delegate.services.remote import HostBook, PresenceWatch, mqtt_settings, refresh_presence
from delegate.services.state import State, with_own_credentials
from delegate.services.worktrees import over_limits

log = get_logger(__name__)

DEFAULT_INTERVAL_S = 5.0
WAKE_POLL_S = 0.02  # how long one wait for events or pidfds lasts
RECENT_ENDINGS = 20  # the latest ended jobs each pass looks at for an attempt no one made
WORKTREE_REPORT_S = 600.0  # how often worktrees over [worktree] keep_max_gb/keep_days are logged


class Monitor:
    def __init__(
        self,
        state: State,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        settings: PolicySettings | None = None,
        report: Callable[[Done], None] = lambda done: None,
    ) -> None:
        self.state = state
        self.interval_s = interval_s
        self.reconciler = Reconciler(state, settings=settings, actor="monitor", report=report)
        self._subscriptions: dict[str, Subscription] = {}
        self._buses: dict[str, Any] = {}
        self._receivers: dict[str, Receiver | None] = {}
        self._late_receivers: dict[str, Receiver] = {}
        self._hosted: set[str] = set()  # jobs on agent hosts: they may end host_lost meanwhile
        self._pidfds: dict[int, int] = {}  # pane pid -> pidfd
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_w, False)
        self.stopping = False
        self.passes = 0
        self._worktrees_reported = -WORKTREE_REPORT_S
        self._presence: PresenceWatch | None = None  # hosts' presence, while jobs run on hosts
        # the attempts this pass made (after its snapshot): their `not_before` times the next
        self._made: list[Job] = []

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

    def close(self) -> None:
        if self._presence is not None:
            self._presence.close()
        for sub in self._subscriptions.values():
            with contextlib.suppress(Exception):
                sub.close()
        for bus in self._buses.values():
            with contextlib.suppress(Exception):
                bus.close()
        for fd in self._pidfds.values():
            os.close(fd)
        self._pidfds.clear()
        os.close(self._stop_r)
        os.close(self._stop_w)
        wait_for_notifiers()

    # --- events ----------------------------------------------------------------------------

    def _bus_urls(self, jobs: list[Job]) -> set[str]:
        urls = {self.state.default_bus_url()}
        urls.update(self.state.bus_url_for(j) for j in jobs)
        return urls

    def _subscribe(self, jobs: list[Job]) -> None:
        """A live all-jobs subscription on every bus an open job uses (new ones as they come)."""
        for url in self._bus_urls(jobs):
            if url in self._subscriptions:
                continue
            try:
                bus = open_bus(
                    with_own_credentials(url, self.state.env.get(BUS_ENV)),
                    env=self.state.env,
                )
                self._subscriptions[url] = bus.subscribe(None, live_only=True)
                self._buses[url] = bus
            except DelegateError as exc:
                log.warning("monitor: not listening on %s yet: %s", url, exc)

    def _catch_up(self, jobs: list[Job]) -> list[SeenEvent]:
        """Events of open jobs already on an embedded bus (published while no one listened)."""
        seen: list[SeenEvent] = []
        by_url: dict[str, list[Job]] = {}
        for job in jobs:
            url = self.state.bus_url_for(job)
            if url.startswith("sqlite:") and job.status is not JobState.QUEUED:
                by_url.setdefault(url, []).append(job)
        for url, group in by_url.items():
            try:
                bus = open_bus(url)
            except DelegateError as exc:
                log.warning("monitor: could not read the history on %s: %s", url, exc)
                continue
            try:
                for job in group:
                    sub = bus.subscribe(job.job_id)
                    try:
                        while (message := sub.get(timeout=0)) is not None:
                            event = self._accept(message.job_id, message.payload)
                            if event is not None:
                                seen.append(event)
                    finally:
                        sub.close()
            except DelegateError as exc:
                log.warning("monitor: could not read the history on %s: %s", url, exc)
            finally:
                bus.close()
        return seen

    def _accept(self, job_id: str, payload: bytes) -> SeenEvent | None:
        """Verify one message of an open job; None for anything else (not ours to audit)."""
        if job_id not in self._receivers:
            try:
                job = self.state.registry.get(job_id)
            except DelegateError:
                self._receivers[job_id] = None
                return None
            self._receivers[job_id] = (
                None if job.status.terminal else Receiver(job_id, job.auth_token)
            )
            if job.host:
                self._hosted.add(job_id)
        if job_id in self._hosted and self._receivers[job_id] is not None:
            with contextlib.suppress(DelegateError):
                if self.state.registry.get(job_id).status.terminal:
                    self._receivers[job_id] = None  # failed host_lost by a pass meanwhile
        receiver = self._receivers[job_id]
        if receiver is None:
            self._late(job_id, payload)
            return None
        verdict = receiver.check(payload)
        if not isinstance(verdict, Accepted):
            log.debug("monitor: dropped a message of job %s: %s", job_id, verdict.reason)
            return None
        envelope = verdict.envelope
        try:
            job = self.state.registry.get(job_id)
            notify(self.state, job, envelope, actor="monitor")
        except DelegateError as exc:
            log.warning("monitor: could not notify for job %s: %s", job_id, exc)
        if verdict.event in ("completed", "error"):
            # anything after the terminal event is late: audited as such, never applied (a
            # redelivery of what was accepted here is a duplicate, and dropped)
            self._receivers[job_id] = None
            late = Receiver(job_id, receiver.token)
            late.seen = set(receiver.seen)
            self._late_receivers[job_id] = late
        return SeenEvent(job_id, verdict.event, verdict.seq, str(envelope.get("detail", "")))

    def _late(self, job_id: str, payload: bytes) -> None:
        """An event of a job that has ended (a host that comes back with what its agent said
        meanwhile, an agent on another machine reporting after a pass failed its job): verified
        and audited as a late event with its envelope (`delegate logs` shows them); the state
        stays. One the job's own record counted (its seq allocated before the job ended, which
        this monitor only saw after) is not late."""
        try:
            job = self.state.registry.get(job_id)
        except DelegateError:
            return
        if not job.status.terminal:
            return
        late = self._late_receivers.setdefault(job_id, Receiver(job_id, job.auth_token))
        verdict = late.check(payload)
        if not isinstance(verdict, Accepted):
            return
        if verdict.seq <= job.last_seq and not job.host:
            return  # published here before the job ended: its subscribers had it in time
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

    def _poll_events(self) -> list[SeenEvent]:
        seen = []
        for sub in list(self._subscriptions.values()):
            while (message := sub.get(timeout=0)) is not None:
                event = None
                if not message.problem:
                    event = self._accept(message.job_id, message.payload)
                sub.ack(message)
                if event is not None:
                    seen.append(event)
        return seen

    # --- pidfds ----------------------------------------------------------------------------

    def _watch_panes(self) -> None:
        """Hold a pidfd for each live pane of an open job seen by the last pass."""
        snap = self.reconciler.last_snapshot
        if snap is None:
            return
        open_sessions = {j.session for j in snap.jobs if not j.status.terminal and j.session}
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

    def run_pass(self, events: list[SeenEvent] | None = None) -> list[Done]:
        self._made = []
        done = self.reconciler.run_pass(events=events or ())
        self.passes += 1
        self._follow_up(done)
        self._watch_panes()
        self._report_worktrees()
        return done

    def _follow_up(self, done: list[Done]) -> None:
        """The next attempts of the jobs this pass ended, and of the latest that ended while
        no one made theirs (a supervisor that died first): each is made once (its key)."""
        ended = {d.action.job_id for d in done if d.action.job_id}
        ended.update(j.job_id for j in self.state.registry.recent_finished(RECENT_ENDINGS))
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

    def run(self, *, once: bool = False) -> int:
        jobs = self.state.registry.open_jobs()
        self._watch_presence(jobs, once=once)
        if not once:
            self._subscribe(jobs)
        events = self._catch_up(jobs)
        self.run_pass(events)
        if once:
            return 0
        next_pass = time.monotonic() + self._next_deadline()
        while not self.stopping:
            woke = self._wait(min(WAKE_POLL_S, max(0.0, next_pass - time.monotonic())))
            if self._stop_requested():
                break
            events = self._poll_events()
            changing = [e for e in events if EventType(e.event) in EVENT_TARGET_STATE]
            if changing:
                # apply at once (no tmux needed), then a full pass for sessions and the queue
                self.reconciler.run_pass(events=changing, sockets=())
                woke = woke or any(EventType(e.event).terminal for e in changing)
            if woke or time.monotonic() >= next_pass:
                jobs = self.state.registry.open_jobs()
                self._watch_presence(jobs, once=False)  # hosts' presence, and whether heard
                self.run_pass()
                self._subscribe(jobs)
                next_pass = time.monotonic() + self._next_deadline()
        return 0


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
    monitor = Monitor(state, interval_s=interval_s, settings=settings, report=report)
    previous = {sig: signal.signal(sig, monitor.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return monitor.run(once=once)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        monitor.close()
