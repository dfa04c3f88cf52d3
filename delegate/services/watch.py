"""The subscriber (`delegate watch`): receive, verify, audit and apply one job's events.

It subscribes before anything else happens, keeps a terminal state machine, and runs two clocks:
a wall budget from its start and an idle timer reset by every accepted event. The job's record is
read a few times a second so a cancellation, or an end decided elsewhere, also ends the watch.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import audit
from .._logging import get_logger
from ..bus import Message, Subscription
from ..fsio import atomic_write
from ..model import EVENT_TARGET_STATE, EventType, Job, JobState
from ..protocol import Accepted, Receiver, Rejected
from .state import State

log = get_logger(__name__)

EXIT_COMPLETED = 0
EXIT_ERROR = 1
EXIT_TIMEOUT = 2
EXIT_CANCELLED = 3
TIMEOUT_REASONS = ("wall_timeout", "idle_timeout")
RECORD_POLL_S = 0.2
# When the record says the job ended but its terminal event has not arrived yet (a broker
# in between), wait this long for the event before trusting the record alone.
END_GRACE_S = 2.0


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


def _limit(flag: float | None, recorded: float | None) -> float | None:
    value = flag if flag is not None else recorded
    return value if value else None  # 0 or None: no limit


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
    ) -> None:
        self.state = state
        self.job = state.registry.get(job_id)
        self.job_id = job_id
        self.wall_s = _limit(wall_timeout_s, self.job.wall_timeout_s)
        self.idle_s = _limit(idle_timeout_s, self.job.idle_timeout_s)
        self.emit = emit
        self.clock = clock
        self.receiver = Receiver(job_id, self.job.auth_token)
        self.bus = state.open_bus_for(self.job)
        # Subscribing here, in the constructor, is what lets a caller start the agent only
        # once the subscriber is listening.
        self.subscription: Subscription = self.bus.subscribe(job_id)

    def close(self) -> None:
        self.subscription.close()
        self.bus.close()

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
            if event in EVENT_TARGET_STATE:
                self.state.registry.apply_event(
                    self.job_id, event, detail=str(envelope.get("detail", ""))
                )
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

    def _time_out(self, reason: str) -> WatchOutcome:
        job, changed = self.state.registry.finish_if_open(
            self.job_id, JobState.ERROR, reason=reason
        )
        if changed:
            log.warning("job %s timed out (%s)", self.job_id, reason)
            return WatchOutcome(EXIT_TIMEOUT, job.status.value, reason)
        return WatchOutcome(exit_code_for(job), job.status.value, job.error)

    def run(self) -> WatchOutcome:
        started = self.clock()
        last_accept = started
        next_record_check = started
        ended_seen_at: float | None = None
        try:
            while True:
                now = self.clock()
                waits = [RECORD_POLL_S, max(0.0, next_record_check - now)]
                if self.wall_s is not None:
                    waits.append(started + self.wall_s - now)
                if self.idle_s is not None:
                    waits.append(last_accept + self.idle_s - now)
                message = self.subscription.get(timeout=max(0.0, min(waits)))
                if message is not None:
                    verdict = self._handle(message)
                    if isinstance(verdict, Accepted):
                        last_accept = self.clock()
                        if verdict.event in ("completed", "error"):
                            self._drain()
                            job = self.state.registry.get(self.job_id)
                            code = EXIT_COMPLETED if verdict.event == "completed" else EXIT_ERROR
                            return WatchOutcome(code, job.status.value, job.error)
                    continue
                now = self.clock()
                if self.wall_s is not None and now - started >= self.wall_s:
                    return self._time_out("wall_timeout")
                if self.idle_s is not None and now - last_accept >= self.idle_s:
                    return self._time_out("idle_timeout")
                if now >= next_record_check:
                    next_record_check = now + RECORD_POLL_S
                    job = self.state.registry.get(self.job_id)
                    if job.status.terminal:
                        ended_seen_at = ended_seen_at if ended_seen_at is not None else now
                        if job.status is JobState.CANCELLED or now - ended_seen_at >= END_GRACE_S:
                            return WatchOutcome(exit_code_for(job), job.status.value, job.error)
        finally:
            self.close()


def watch_job(
    state: State, job_id: str, *, ready_file: Path | None = None, **kwargs: Any
) -> WatchOutcome:
    """Subscribe, signal readiness by creating `ready_file` (if given), then watch to the end."""
    watcher = Watcher(state, job_id, **kwargs)
    if ready_file is not None:
        try:
            atomic_write(ready_file, f"{os.getpid()}\n".encode())
        except OSError:
            watcher.close()
            raise
    return watcher.run()
