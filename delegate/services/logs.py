"""Reading a job's audit trail, once or following it until the job ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from delegate.adapters import audit
from delegate.core.model import validate_job_id
from delegate.services.state import State

FOLLOW_POLL_S = 0.1
# The lines that carry an event's envelope: the publisher writes `published`, and every
# subscriber that verified it (watch, the job's supervisor, a monitor) writes `received`.
_EVENT_KINDS = (audit.PUBLISHED, audit.RECEIVED)


def first_sight(raw: bool = False) -> Callable[[bytes], bool]:
    """A filter over audit lines that keeps each event once: the first line recording its seq
    (`published`, or `received` when a subscriber logged it first). Every other line passes,
    and with `raw` every line does."""
    seen: set[int] = set()

    def keep(line: bytes) -> bool:
        if raw or (b'"published"' not in line and b'"received"' not in line):
            return True
        entry = audit.parse_line(line)
        if entry is None or entry.get("kind") not in _EVENT_KINDS:
            return True
        seq = entry.get("seq")
        if not isinstance(seq, int):
            return True
        if seq in seen:
            return False
        seen.add(seq)
        return True

    return keep


def follow_log(
    state: State,
    job_id: str,
    emit: Callable[[bytes], None],
    *,
    follow: bool = False,
    raw: bool = False,
    poll_s: float = FOLLOW_POLL_S,
) -> None:
    """Emit each complete line of events.ndjson, each event once (see `first_sight`; `raw`:
    every line); with `follow`, keep going until the job ends.

    Only whole lines are emitted: a line still being written is held back until its newline.
    """
    validate_job_id(job_id)
    state.registry.get(job_id)  # JobNotFound for an unknown id, before waiting on a file
    path = state.audit.events_path(job_id)
    keep = first_sight(raw)
    offset = 0
    pending = b""
    while True:
        ended = state.registry.get(job_id).status.terminal if follow else True
        if ended and follow:
            # The audit lines of a change are written under the registry lock right after the
            # record; taking the lock once makes sure they are on disk before the last read.
            with state.registry.locked():
                pass
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if keep(line + b"\n"):
                emit(line + b"\n")
        if ended:  # read once more after seeing the end, so its last lines are included
            return
        time.sleep(poll_s)
