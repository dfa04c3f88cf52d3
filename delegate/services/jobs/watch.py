"""The subscriber (`delegate watch`): receive, verify, audit and apply one job's events.

It subscribes before anything else happens and keeps a terminal state machine. Whether the job
has ended is read from the registry, never guessed: the exit status comes from the record's final
state, so a `cancel` racing a `completed` gives the code the books say.

A supervising watcher (`submit --wait`, the detached supervisor) also looks after its job through
the reconcile policy: the record's deadlines, a wrapper that died (a pidfd wakes it at once), a
queued job's launch when a slot frees or the moment its `not_before` passes (a timer set to that
time: a retry's backoff, a rate limit's reset), and once the job ended its next attempt (at once,
when its rule asks for one) and its session. An onlooker's `--wall-timeout`/`--idle-timeout` only
bound how long it watches; they never end the job.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delegate.adapters import audit
from delegate.adapters.bus import Message, Subscription
from delegate.adapters.fsio import atomic_write
from delegate.config.logsetup import get_logger
from delegate.core.caps import DUE_AFTER_S, due_in_s
from delegate.core.errors import DelegateError, WaitInterrupted
from delegate.core.model import EventType, Job, JobState, SessionState
from delegate.core.policy import LaunchJob, SeenAgain, SetSession, SkipSocket, next_deadline_s
from delegate.core.protocol import Accepted, Receiver, Rejected
from delegate.core.timefmt import human_duration
from delegate.services.jobs.finish import end_by_event
from delegate.services.jobs.launch import inventory
from delegate.services.jobs.notify import notify
from delegate.services.jobs.retry import follow_up
from delegate.services.reconciler import Reconciler
from delegate.services.state import State

log = get_logger(__name__)

EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_TIMEOUT = 2
EXIT_CANCELLED = 3
TIMEOUT_REASONS = ("wall_timeout", "idle_timeout")
RECORD_POLL_S = 0.2
# When the record says the job ended by its own event but that event has not arrived yet (a
# broker in between), wait this long for it before trusting the record alone.
END_GRACE_S = 2.0
# A supervisor asks tmux about its job this often, and at once when its wrapper's pidfd fires.
SUPERVISE_TMUX_S = 5.0
AFTER_END_S = 30.0  # how long a supervisor keeps trying to settle its ended job's session
QUEUE_CHECK_S = 1.0  # a queued job's supervisor looks for a free slot this often


@dataclass(frozen=True)
class WatchOutcome:
    exit_code: int
    status: str
    reason: str | None = None


def exit_code_for(job: Job) -> int:
    if job.status is JobState.COMPLETED:
        return EXIT_COMPLETED
    if job.status is JobState.CANCELLED:
        return EXIT_CANCELLED
    if job.status is JobState.ERROR and (job.error or "") in TIMEOUT_REASONS:
        return EXIT_TIMEOUT
    return EXIT_ERROR


def outcome_of(job: Job) -> WatchOutcome:
    return WatchOutcome(exit_code_for(job), job.status.value, job.error)


def _expects_event(job: Job) -> bool:
    """Whether the job ended by its own event (which a subscriber should still see)."""
    return job.status is JobState.COMPLETED or (job.error or "").startswith("agent_error")


class Watcher:
    def __init__(
        self,
        state: State,
        job_id: str,
        *,
        wall_timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
        emit: Callable[[dict[str, Any]], None] = lambda envelope: None,
        clock: Callable[[], float] = time.monotonic,
        supervise: bool = False,
        actor: str = "watch",
        note: Callable[[str], None] = lambda text: None,
    ) -> None:
        self.state = state
        self.job = state.registry.get(job_id)
        self.job_id = job_id
        # An onlooker's own patience, not the job's budget (that lives in the record).
        self.wall_s = wall_timeout_s or None
        self.idle_s = idle_timeout_s or None
        self.emit = emit
        self.clock = clock
        self.supervise = supervise
        self.actor = actor
        self.note = note  # one-off words for the person waiting (a host is offline)
        self._host_noted = False
        self._reconciler: Any = None
        self._pidfd: int | None = None
        self._pane_gone = False
        self.receiver = Receiver(job_id, self.job.auth_token)
        self.bus = state.open_bus_for(self.job)
        # Subscribing here, in the constructor, is what lets a caller start the agent only
        # once the subscriber is listening.
        self.subscription: Subscription = self.bus.subscribe(job_id)
        # A job on an agent host: whether that host is still heard from decides `host_lost`.
        self._presence: Any = None
        if supervise and self.job.host and not self.job.status.terminal:
            # services.remote (uuid, platform, the MQTT wire): a local job's path goes without
            from delegate.services.remote import PresenceWatch, mqtt_settings

            try:
                self._presence = PresenceWatch(state, mqtt_settings(state, self.job.bus.get("url")))
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        self.subscription.close()
        self.bus.close()
        if getattr(self, "_presence", None) is not None:
            self._presence.close()
            self._presence = None
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def _handle(self, message: Message) -> Accepted | Rejected:
        if message.problem:
            verdict: Accepted | Rejected = Rejected(
                message.problem, "the transport lost the payload"
            )
        else:
            verdict = self.receiver.check(message.payload)
        if isinstance(verdict, Accepted):
            envelope = verdict.envelope
            self.state.audit.append(
                self.job_id, audit.RECEIVED, seq=verdict.seq, event=verdict.event, envelope=envelope
            )
            self.emit(envelope)
            event = EventType(verdict.event)
            detail = str(envelope.get("detail", ""))
            if event.terminal:
                end_by_event(
                    self.state,
                    self.job_id,
                    event,
                    detail=detail,
                    envelope=envelope,
                    actor=self.actor,
                )
            else:
                # every accepted event moves the idle clock; `started` also changes the state
                self.state.registry.apply_event(self.job_id, event, detail=detail)
                notify(self.state, self.job, envelope, actor=self.actor)
        else:
            excerpt = message.payload[:200].decode("utf-8", "replace")
            self.state.audit.append(
                self.job_id,
                audit.REJECTED,
                reason=verdict.reason,
                explanation=verdict.explanation,
                seq=verdict.seq,
                size=len(message.payload),
                excerpt=excerpt,
            )
            log.warning("rejected a message for job %s: %s", self.job_id, verdict.explanation)
        self.subscription.ack(message)
        return verdict

    def _drain(self) -> None:
        """After the terminal event, audit whatever else is already waiting, then stop."""
        while (message := self.subscription.get(timeout=0)) is not None:
            self._handle(message)

    # --- supervising ----------------------------------------------------------------------

    def reconciler(self) -> Any:
        if self._reconciler is None:
            self._reconciler = Reconciler(self.state, actor=f"supervisor:{os.getpid()}")
        return self._reconciler

    def _wrapper_died(self, job: Job) -> bool:
        """True once the wrapper's process has exited (a pidfd opened while it ran)."""
        if self._pane_gone:
            return False
        if self._pidfd is None and job.session and job.status is not JobState.QUEUED:
            row = inventory(self.state).get(job.session)
            if row is not None and row.job_id == self.job_id and row.pane_pid:
                try:
                    self._pidfd = os.pidfd_open(row.pane_pid)
                except ProcessLookupError:
                    self._pane_gone = True
                    return True
                except OSError:
                    return False
        if self._pidfd is None:
            return False
        readable, _, _ = select.select([self._pidfd], [], [], 0)
        if readable:
            self._pane_gone = True
        return bool(readable)

    def _supervise(self, job: Job, now: float, state: dict[str, float]) -> None:
        """One look after the job through the reconcile policy, when something may be due."""
        own = self.job_id
        if job.status is JobState.QUEUED:
            if now >= state["queue"]:
                self._launch_queued()
                state["queue"] = now + QUEUE_CHECK_S
            # and at the moment its `not_before` passes, whatever the slots' rhythm
            due = due_in_s(job, datetime.now(UTC))
            if due is not None and due > 0:
                state["queue"] = min(state["queue"], self.clock() + due + DUE_AFTER_S)
            return
        died = self._wrapper_died(job)
        ask_tmux = died or now >= state["tmux"]
        due = next_deadline_s(job, datetime.now(UTC)) == 0.0
        if not (ask_tmux or due):
            return
        sockets: tuple[str, ...] = ()
        if ask_tmux:
            state["tmux"] = now + SUPERVISE_TMUX_S
            sockets = (job.tmux_socket or self.reconciler().default_socket,)
            if died and self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
                state["tmux"] = now + 0.5  # look again soon: the pane may not show dead yet
        # and whether its server could be seen: a tmux out of sight starts an episode that,
        # past its grace, ends the job `lost` even when no monitor runs
        self.reconciler().run_pass(
            sockets=sockets,
            only_job=own,
            keep=lambda a: (
                (a.job_id == own and not isinstance(a, LaunchJob))
                or isinstance(a, (SkipSocket, SeenAgain))
            ),
        )

    def _launch_queued(self) -> None:
        """A queued job's look for a free slot. Whatever the policy launches is launched, this
        job or an older one: a slot given to a job whose own supervisor is gone (killed,
        crashed) would otherwise stay unused, and hold back every job queued behind it (the
        claim under the registry lock keeps two launchers from starting one job twice).
        tmux too: a finished job's session still recorded running holds its slot until someone
        stops it, or records it terminated once tmux no longer shows it, and that may have to
        be this waiting supervisor. A pass that fails is tried again at the next look."""
        try:
            self.reconciler().run_pass(
                keep=lambda a: (
                    isinstance(a, LaunchJob) or (isinstance(a, SetSession) and not a.follows_fail)
                )
            )
        except DelegateError as exc:
            log.warning("job %s: could not look for a free slot: %s", self.job_id, exc)

    def after_end(self) -> None:
        """Once the job ended: its session stopped, and queued jobs launched into free slots.

        Retried for a while: a pass that could not ask tmux (a busy machine) or failed would
        otherwise leave the session recorded running, holding a slot, until a monitor runs.
        """
        deadline = self.clock() + AFTER_END_S
        delay = 0.05
        while True:
            job = self.state.registry.get(self.job_id)
            socket = job.tmux_socket or self.reconciler().default_socket
            try:
                self.reconciler().run_pass(
                    sockets=(socket,) if job.session else (),
                    only_job=self.job_id,
                    keep=lambda a: a.job_id == self.job_id or isinstance(a, LaunchJob),
                )
            except Exception as exc:  # the job's end is recorded; this is only housekeeping
                log.warning("job %s: could not settle its session: %s", self.job_id, exc)
            if not self._session_still_running(job) or self.clock() >= deadline:
                return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _session_still_running(self, job: Job) -> bool:
        if not job.session:
            return False
        row = inventory(self.state).get(job.session)
        return row is not None and row.job_id == self.job_id and row.state is SessionState.RUNNING

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> WatchOutcome:
        try:
            outcome = self._run()
        finally:
            self.close()
        if self.supervise:
            self.next_attempt()
            self.after_end()
        return outcome

    def next_attempt(self) -> None:
        """Once the job ended, its next attempt when its rule asks for one (a retry, a requeue,
        a rate limit's resume): made first, at once, not after its session is settled (which
        may take a while). A failure is follow_up's to audit; this only housekeeps after."""
        try:
            follow_up(self.state, self.job_id)
        except Exception as exc:  # the job's end is recorded; a monitor's pass tries again
            log.warning("job %s: could not make its next attempt: %s", self.job_id, exc)

    def _run(self) -> WatchOutcome:
        started = self.clock()
        last_accept = started
        next_record_check = started
        ended_seen_at: float | None = None
        due = {"tmux": started + SUPERVISE_TMUX_S, "queue": started}
        while True:
            wait_s = self._wait_s(started, last_accept, next_record_check)
            message = self.subscription.get(timeout=wait_s)
            if message is not None:
                verdict = self._handle(message)
                if isinstance(verdict, Accepted):
                    last_accept = self.clock()
                    outcome = self._ended_by(verdict)
                    if outcome is not None:
                        return outcome
                continue
            now = self.clock()
            if now >= next_record_check:
                next_record_check = now + RECORD_POLL_S
                job = self.state.registry.get(self.job_id)
                if job.status.terminal:
                    ended_seen_at = ended_seen_at if ended_seen_at is not None else now
                    if not _expects_event(job) or now - ended_seen_at >= END_GRACE_S:
                        self._drain()
                        return outcome_of(job)
                else:
                    self._look_after(job, now, now - started, due)
                    if self.supervise and job.status is JobState.QUEUED:
                        # its next look for a slot, or its `not_before`, may come sooner
                        next_record_check = min(next_record_check, due["queue"])
            limit = self._limit_passed(now - started, now - last_accept)
            if limit is not None:
                return self._give_up(limit)

    def _wait_s(self, started: float, last_accept: float, next_record_check: float) -> float:
        """How long to wait for the next message: until the next look at the record, or until
        the wall or idle limit runs out, whichever comes first."""
        now = self.clock()
        waits = [RECORD_POLL_S, max(0.0, next_record_check - now)]
        if self.wall_s is not None:
            waits.append(started + self.wall_s - now)
        if self.idle_s is not None:
            waits.append(last_accept + self.idle_s - now)
        return max(0.0, min(waits))

    def _ended_by(self, verdict: Accepted) -> WatchOutcome | None:
        """The outcome when an accepted event ended the job and the record agrees."""
        if verdict.event not in ("completed", "error"):
            return None
        self._drain()
        job = self.state.registry.get(self.job_id)
        return outcome_of(job) if job.status.terminal else None

    def _look_after(self, job: Job, now: float, waited_s: float, due: dict[str, float]) -> None:
        """A supervising watcher's look at a job still running: the reconcile policy's
        deadlines, and a note when its host is offline."""
        if not self.supervise:
            return
        self._supervise(job, now, due)
        if job.host and not self._host_noted:
            self._note_offline_host(job, waited_s)

    def _limit_passed(self, watched_s: float, idle_s: float) -> str | None:
        """ "wall" or "idle" when that limit of the watch ran out; None while neither did."""
        if self.wall_s is not None and watched_s >= self.wall_s:
            return "wall"
        if self.idle_s is not None and idle_s >= self.idle_s:
            return "idle"
        return None

    def _note_offline_host(self, job: Job, waited_s: float) -> None:
        """Say once that the job's host is offline, and what happens next; looked at once
        the host's retained presence had time to arrive."""
        presence = self._presence
        if job.status is not JobState.PENDING or presence is None:
            return
        if not presence.heard.is_set() and waited_s < 2.0:
            return
        from delegate.services.remote import HostBook  # a host's job only (see __init__)

        book = HostBook(self.state)
        seen = book.presence(job.host or "") or {}
        self._host_noted = True
        if seen.get("online"):
            return
        lost_after = float(book.settings(job.host or "")["lost_after_s"])
        last = seen.get("last_seen_ms")
        heard = "never heard from"
        if last:
            heard = f"last heard {human_duration(time.time() - last / 1000)} ago"
        self.note(
            f"host {job.host} is offline ({heard}): job {self.job_id} starts when it is back,"
            f" and ends host_lost if it stays silent for {human_duration(lost_after)}"
        )

    def _give_up(self, which: str) -> WatchOutcome:
        job = self.state.registry.get(self.job_id)
        if job.status.terminal:
            return outcome_of(job)
        log.warning(
            "stopped watching job %s (%s limit); it is still %s", self.job_id, which, job.status
        )
        return WatchOutcome(EXIT_TIMEOUT, job.status.value, f"stopped watching ({which} limit)")


def watch_job(
    state: State, job_id: str, *, ready_file: Path | None = None, **kwargs: Any
) -> WatchOutcome:
    """Subscribe, signal readiness by creating `ready_file` (if given), then watch to the end.

    Any watcher looks after the job through the reconcile policy: the deadlines it applies are
    the record's, so it makes no difference who watches, or since when.
    """
    kwargs.setdefault("supervise", True)
    watcher = Watcher(state, job_id, **kwargs)
    if ready_file is not None:
        try:
            atomic_write(ready_file, f"{os.getpid()}\n".encode())
        except OSError:
            watcher.close()
            raise
    try:
        return watcher.run()
    except KeyboardInterrupt:
        raise WaitInterrupted(job_id) from None
