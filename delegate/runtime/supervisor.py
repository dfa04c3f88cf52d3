"""The state dir's supervisor (`python -m delegate.runtime.supervisor --lock-fd N`): the
monitor, started by whoever needs it (services/supervisor), holding the state dir's
supervisor.lock on N for its life.

Started without typer. It follows every open job of the state dir (runtime/monitor): one
all-jobs subscription per bus, with a cursor of its own (SQLite) or a persistent session
(MQTT), so a supervisor that takes over reads on where the last one stopped; a pass over the
open jobs with one tmux query per server; the deadlines; the queue. It ends after
`$DELEGATE_SUPERVISOR_QUIET_S` seconds (60) with no open job, when its state dir is removed, or
on SIGTERM (a person's `delegate monitor` asking it to leave).

`--ready-fd M`: an inherited pipe its starter blocks on (on a broker, which keeps nothing for a
late listener); once it listens it writes one byte there and closes it, so the starter knows no
event can be missed, and an end of file without that byte says it died first (its reason is
the last line of supervisor.log).
"""

from __future__ import annotations

import os
import sys

from delegate.config import logsetup
from delegate.config.settings import supervisor_quiet_s
from delegate.core.errors import UsageError, guarded
from delegate.core.policy import PolicySettings
from delegate.runtime.monitor import DEFAULT_INTERVAL_S, Monitor, serve_signals
from delegate.services.state import State
from delegate.services.supervisor import READY_BYTE, hold

USAGE = "delegate: usage: python -m delegate.runtime.supervisor --lock-fd N [--ready-fd M]"


def parse_args(argv: list[str]) -> tuple[int, int | None] | None:
    """(the lock's fd, the ready pipe's fd or None), or None for arguments it does not take."""
    numbers = dict(zip(argv[::2], argv[1::2], strict=False))
    if len(argv) % 2 or not numbers.keys() <= {"--lock-fd", "--ready-fd"}:
        return None
    if "--lock-fd" not in numbers or not all(v.isdigit() for v in numbers.values()):
        return None
    ready = numbers.get("--ready-fd")
    return int(numbers["--lock-fd"]), int(ready) if ready is not None else None


def say_ready(ready_fd: int | None) -> None:
    if ready_fd is None:
        return
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
    lock, ready_fd = parsed

    def supervise() -> int:
        try:
            os.fstat(lock)
        except OSError:
            raise UsageError(
                f"--lock-fd {lock} is no open descriptor (its starter passes one)"
            ) from None
        state = State.open()
        hold(lock, "started")
        monitor = Monitor(
            state,
            interval_s=DEFAULT_INTERVAL_S,
            settings=PolicySettings(),
            lock=lock,
            quiet_s=supervisor_quiet_s(state.env),
            actor=f"supervisor:{os.getpid()}",
        )
        with serve_signals(monitor):
            try:
                return monitor.run(on_ready=lambda: say_ready(ready_fd))
            finally:
                monitor.close()

    return guarded(supervise)


if __name__ == "__main__":
    sys.exit(main())
