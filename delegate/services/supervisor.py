"""The state dir's supervisor: one process that follows every open job (runtime/supervisor,
the monitor holding the state dir's supervisor.lock), started by whoever needs it, never twice.

A job costs its pane's wrapper and nothing else of ours; a queued job costs its record. Whoever
registers work (`submit`, a plan, `retry`, `cron run`) or follows it (`submit --wait`, `watch`)
calls `ensure_supervisor`: when no process holds the lock, it takes it and starts the
supervisor holding it (adapters/detached). The supervisor ends after a quiet spell with no open
job, and one that dies (SIGKILL, OOM, a reboot) lets go of the lock: the next command, or a
person's `delegate monitor`, starts another, which takes up the events from its bus cursor.

`delegate monitor` run by a person is the same supervisor in the foreground (what a systemd
unit or an `@reboot` line runs): it asks a started one to leave and holds the lock itself.
"""

from __future__ import annotations

import os
import signal
import sys

from delegate.adapters.bus import keeps_history
from delegate.adapters.detached import spawn_holding, take_lock
from delegate.config.statefiles import SUPERVISOR_LOCK, SUPERVISOR_LOG
from delegate.core.errors import DelegateError
from delegate.services.state import State

MODULE = "delegate.runtime.supervisor"
READY_BYTE = b"R"  # what the supervisor writes once it listens on the state dir's buses
READY_TIMEOUT_S = 15.0
LOG_LIMIT = 4 << 20  # bytes of supervisor.log kept before it starts afresh


def consumer_name(state: State, url: str) -> str:
    """The supervisor's consumer on the bus at `url`: its cursor's name on SQLite, its session's
    client id on a broker (one per state dir and machine: several state dirs share a broker)."""
    if url.startswith("sqlite:"):
        return "supervisor"
    import hashlib  # hashlib, socket: the supervisor's, never a submit's
    import socket  # as hashlib

    where = f"{socket.gethostname()}:{state.layout.home}".encode()
    return f"delegate-supervisor-{hashlib.sha256(where).hexdigest()[:16]}"


def lock_path(state: State) -> str:
    return os.path.join(state.layout.home, SUPERVISOR_LOCK)


def ensure_supervisor(state: State) -> int | None:
    """Start the state dir's supervisor unless one runs (or is starting); its pid when this call
    started one. On a broker, which keeps no event for a late listener, it returns once the
    supervisor listens; on SQLite at once (the supervisor reads on from its cursor)."""
    state.layout.home.mkdir(parents=True, exist_ok=True)
    lock = take_lock(lock_path(state))
    if lock is None:
        return None
    try:
        return _start(state, lock)
    finally:
        os.close(lock)  # the supervisor holds the lock through its own copy


def _start(state: State, lock: int) -> int:
    wait = not keeps_history(state.default_bus_url())
    read_fd, write_fd = os.pipe() if wait else (-1, -1)
    argv = [sys.executable, "-m", MODULE, "--lock-fd", str(lock)]
    if wait:
        argv += ["--ready-fd", str(write_fd)]
    env = {**state.env, "DELEGATE_HOME": str(state.layout.home)}
    log = os.path.join(state.layout.home, SUPERVISOR_LOG)
    try:
        pid = spawn_holding(
            argv, env, lock=lock, log_path=log, log_limit=LOG_LIMIT, keep=(write_fd,) * wait
        )
    finally:
        if wait:
            os.close(write_fd)  # only the supervisor holds it now: its exit ends the pipe
    if pid is None:
        if wait:
            os.close(read_fd)
        raise DelegateError(f"could not start the supervisor of {state.layout.home}")
    _say_holder(lock, pid, "started")  # at once: the lock file never names the last one
    if wait:
        _await_ready(read_fd, pid, log)
    return pid


def _await_ready(read_fd: int, pid: int, log: str) -> None:
    """Block on the supervisor's ready pipe (no polling): its byte, its end, or the timeout."""
    import select  # select: only a submit on a broker that started the supervisor waits

    try:
        readable, _, _ = select.select([read_fd], [], [], READY_TIMEOUT_S)
        said = os.read(read_fd, 1) if readable else None
    finally:
        os.close(read_fd)
    if said is None:
        os.kill(pid, signal.SIGKILL)
        raise DelegateError("the supervisor was not listening in time")
    if said != READY_BYTE:
        raise DelegateError(f"the supervisor exited before it listened{_last_words(log)}")


def _last_words(log: str) -> str:
    """`: REASON`, the last line the supervisor wrote to its log, or nothing."""
    try:
        with open(log, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().strip().splitlines()
    except OSError:
        return ""
    return f": {lines[-1].removeprefix('delegate: ')}" if lines else ""


def running_supervisor(state: State) -> int | None:
    """The pid of the process holding the state dir's supervisor lock, or None."""
    lock = take_lock(lock_path(state))
    if lock is not None:
        os.close(lock)  # no one held it
        return None
    try:
        with open(lock_path(state), encoding="ascii") as handle:
            first = handle.readline().split()
    except OSError:
        return None
    return int(first[0]) if first and first[0].isdigit() else None


def hold(lock: int, mode: str) -> None:
    """Say in the lock file who holds it (`pid mode`: `started` or `foreground`)."""
    _say_holder(lock, os.getpid(), mode)


def _say_holder(lock: int, pid: int, mode: str) -> None:
    os.ftruncate(lock, 0)
    os.pwrite(lock, f"{pid} {mode}\n".encode("ascii"), 0)


def holder_mode(state: State) -> str | None:
    try:
        with open(lock_path(state), encoding="ascii") as handle:
            words = handle.readline().split()
    except OSError:
        return None
    return words[1] if len(words) > 1 else None
