"""Reading a job's audit trail, once or following it until the job ends."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..model import validate_job_id
from .state import State

FOLLOW_POLL_S = 0.1


def follow_log(
    state: State,
    job_id: str,
    emit: Callable[[bytes], None],
    *,
    follow: bool = False,
    poll_s: float = FOLLOW_POLL_S,
) -> None:
    """Emit each complete line of events.ndjson; with `follow`, keep going until the job ends.

    Only whole lines are emitted: a line still being written is held back until its newline.
    """
    validate_job_id(job_id)
    state.registry.get(job_id)  # JobNotFound for an unknown id, before waiting on a file
    path = state.audit.events_path(job_id)
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
            emit(line + b"\n")
        if ended:  # read once more after seeing the end, so its last lines are included
            return
        time.sleep(poll_s)
