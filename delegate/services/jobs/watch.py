"""Following one job (`delegate watch`, `submit --wait`): receive and verify its events, read
its record; and how the state dir's supervisor puts what it received on record.

It subscribes before anything else happens and keeps a terminal state machine. Whether the job
has ended is read from the registry, never guessed: the exit status comes from the record's final
state, so a `cancel` racing a `completed` gives the code the books say.

A follower (`submit --wait`, `watch`) changes nothing: the state dir's supervisor
owns the job (its deadlines, its queue place, its next attempt, its session), and the follower
keeps that supervisor there (one that died is started again within a second). Once the job has
ended it waits, bounded, for its session to be settled, so what it returns to is all true. An
onlooker's `--wall-timeout`/`--idle-timeout` only bound how long it watches; they never end the
job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from delegate.adapters import audit
from delegate.adapters.bus import Message, Subscription
from delegate.adapters.fsio import atomic_write
from delegate.config.logsetup import get_logger
from delegate.core.errors import DelegateError, WaitInterrupted
from delegate.core.model import Job, JobState, SessionState
from delegate.core.protocol import Accepted, Receiver, Rejected
from delegate.core.timefmt import human_duration
from delegate.services.jobs.launch import inventory
from delegate.services.state import State
from delegate.services.supervisor import ensure_supervisor

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
END_LOOK_S = 0.005  # how soon a follower that saw the ending event looks at the record again
# A supervisor asks tmux about its job this often, and at once when its wrapper's pidfd fires.
AFTER_END_S = 30.0  # how long a follower waits for its ended job's session to be settled
FOLLOWER_ENSURE_S = 1.0  # a follower makes sure the state dir's supervisor runs this often


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


def audit_received(state: State, job_id: str, verdict: Accepted) -> None:
    """A received event on record: synced when it changes the job's state, else not (its
    publisher's `published` line is on disk already)."""
    changes_state = verdict.event in ("started", "completed", "error")
    write = state.audit.append if changes_state else state.audit.append_unsynced
    write(job_id, audit.RECEIVED, seq=verdict.seq, event=verdict.event, envelope=verdict.envelope)


def audit_rejected(state: State, job_id: str, payload: bytes, verdict: Rejected) -> None:
    """A message for `job_id` that did not pass its checks: on record, with an excerpt."""
    state.audit.append(
        job_id,
        audit.REJECTED,
        reason=verdict.reason,
        explanation=verdict.explanation,
        seq=verdict.seq,
        size=len(payload),
        excerpt=payload[:200].decode("utf-8", "replace"),
    )
    log.warning("rejected a message for job %s: %s", job_id, verdict.explanation)


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
        self.note = note  # one-off words for the person waiting (a host is offline)
        self._host_noted = False
        self.receiver = Receiver(job_id, self.job.auth_token)
        self.bus = state.open_bus_for(self.job)
        # Subscribing here, in the constructor, is what lets a caller start the agent only
        # once the subscriber is listening.
        self.subscription: Subscription = self.bus.subscribe(job_id)
        # A job on an agent host: whether that host is still heard from decides `host_lost`.
        self._presence: Any = None
        if self.job.host and not self.job.status.terminal:
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

    def _handle(self, message: Message) -> Accepted | Rejected:
        if message.problem:
            verdict: Accepted | Rejected = Rejected(
                message.problem, "the transport lost the payload"
            )
        else:
            verdict = self.receiver.check(message.payload)
        if isinstance(verdict, Accepted):
            self.emit(verdict.envelope)
        self.subscription.ack(message)
        return verdict

    def _drain(self) -> None:
        """After the terminal event, read whatever else is already waiting, then stop."""
        while (message := self.subscription.get(timeout=0)) is not None:
            self._handle(message)

    # --- following ---------------------------------------------------------------------

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
        self.await_settled()
        return outcome

    def await_settled(self) -> None:
        """A follower's last wait: the job's session settled by the state dir's supervisor
        (stopped, or terminated), so what `submit --wait` returns to is all true; bounded."""
        deadline = self.clock() + AFTER_END_S
        delay = 0.01
        while self.clock() < deadline:
            try:
                job = self.state.registry.get(self.job_id)
                if not job.status.terminal or not self._session_still_running(job):
                    return
            except DelegateError:
                return
            time.sleep(delay)
            delay = min(delay * 2, 0.2)

    def _run(self) -> WatchOutcome:
        started = self.clock()
        last_accept = started
        next_record_check = started
        ended_seen_at: float | None = None
        own_end_seen = False  # its ending event came before its record said so
        due = {"supervisor": started}
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
                    if verdict.event in ("completed", "error"):
                        # its publisher records the end a moment after it sent it: look again
                        # soon, and wait for no event then (this was it)
                        own_end_seen = True
                        next_record_check = min(next_record_check, last_accept + END_LOOK_S)
                continue
            now = self.clock()
            if now >= next_record_check:
                next_record_check = now + RECORD_POLL_S
                job = self.state.registry.get(self.job_id)
                if job.status.terminal:
                    ended_seen_at = ended_seen_at if ended_seen_at is not None else now
                    waited = now - ended_seen_at >= END_GRACE_S
                    if own_end_seen or not _expects_event(job) or waited:
                        self._drain()
                        return outcome_of(job)
                else:
                    self._look_after(job, now, now - started, due)
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
        deadlines, and a note when its host is offline. A follower's: the state dir's supervisor
        still there (one that died, as by an OOM kill, is replaced within a second, not at the
        next command)."""
        if now >= due["supervisor"]:
            due["supervisor"] = now + FOLLOWER_ENSURE_S
            ensure_supervisor(self.state)
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
    """Subscribe, signal readiness by creating `ready_file` (if given), then follow the job to
    the end: read only, while the state dir's supervisor (started here if none runs) applies
    its events, its deadlines and its queue place."""
    watcher = Watcher(state, job_id, **kwargs)
    if not watcher.job.status.terminal:
        try:
            ensure_supervisor(state)
        except BaseException:
            watcher.close()
            raise
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
