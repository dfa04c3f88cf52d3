"""The detached subscriber of `delegate submit --no-wait` (`python -m delegate.runtime.supervisor`).

Started without typer so it is listening sooner; writes one JSON line per accepted event on
stdout (logs/<job_id>/subscriber.out) and exits with watch's codes.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from delegate.adapters.fsio import atomic_write
from delegate.adapters.terminal import print_json
from delegate.config import logsetup


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logsetup.configure()
    if len(argv) != 3 or argv[1] != "--ready-file":
        print(
            "usage: python -m delegate.runtime.supervisor JOB_ID --ready-file PATH", file=sys.stderr
        )
        return 64
    job_id, ready = argv[0], Path(argv[2])
    from delegate.core.errors import guarded
    from delegate.services.jobs.notify import wait_for_notifiers
    from delegate.services.jobs.submit import supervise
    from delegate.services.state import State

    def watch_to_the_end() -> int:
        try:
            outcome = supervise(
                State.open(),
                job_id,
                emit=print_json,
                on_ready=lambda: atomic_write(ready, f"{os.getpid()}\n".encode()),
            )
        finally:
            wait_for_notifiers()
        return outcome.exit_code

    return guarded(watch_to_the_end)


if __name__ == "__main__":
    sys.exit(main())
