"""The detached subscriber of `delegate submit --no-wait` (`python -m delegate.runtime.supervisor`).

Started without typer so it is listening sooner; writes one JSON line per accepted event on
stdout (logs/<job_id>/subscriber.out) and exits with watch's codes.

`--ready-fd N`: an inherited pipe its starter blocks on; once subscribed, the supervisor writes
one byte to it and closes it, so the starter learns at once that no event can be missed, and an
end of file without that byte tells it the supervisor died first (its reason is the last line of
logs/<job_id>/subscriber.log). Once subscribed it also records its pid in
logs/<job_id>/subscriber.ready, for whoever wants to know which process looks after the job.

It follows the job to its end through a supervising watcher (services/jobs/watch), which also
launches it when it waits queued (a slot frees, its `not_before` passes) and, once it ended,
makes its next attempt when its rule asks for one (services/jobs/retry.follow_up).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from delegate.adapters.fsio import atomic_write
from delegate.adapters.terminal import print_json
from delegate.config import logsetup
from delegate.core.errors import guarded
from delegate.services.jobs.launch import READY_BYTE
from delegate.services.jobs.notify import wait_for_notifiers
from delegate.services.jobs.submit import supervise
from delegate.services.state import State

USAGE = "usage: python -m delegate.runtime.supervisor JOB_ID [--ready-fd N]"


def parse_args(argv: list[str]) -> tuple[str, int | None] | None:
    """(job id, the ready pipe's fd or None), or None for arguments it does not take."""
    if len(argv) == 1:
        return argv[0], None
    if len(argv) == 3 and argv[1] == "--ready-fd" and argv[2].isdigit():
        return argv[0], int(argv[2])
    return None


def say_ready(pid_file: Path, ready_fd: int | None) -> None:
    atomic_write(pid_file, f"{os.getpid()}\n".encode())
    if ready_fd is not None:
        try:
            os.write(ready_fd, READY_BYTE)
        finally:
            os.close(ready_fd)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logsetup.configure()
    parsed = parse_args(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 64
    job_id, ready_fd = parsed

    def watch_to_the_end() -> int:
        state = State.open()
        pid_file = state.audit.job_dir(job_id) / "subscriber.ready"
        try:
            # (the watcher makes its next attempt, when its rule asks for one, as it ends)
            outcome = supervise(
                state, job_id, emit=print_json, on_ready=lambda: say_ready(pid_file, ready_fd)
            )
        finally:
            wait_for_notifiers()
        return outcome.exit_code

    return guarded(watch_to_the_end)


if __name__ == "__main__":
    sys.exit(main())
