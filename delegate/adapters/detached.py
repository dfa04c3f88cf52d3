"""A state dir's long-lived helper process, one at a time: a lock file held for the helper's
life (flock), and the helper started detached, holding it.

The pattern of the warm servers and the supervisor: whoever needs the helper takes its lock
without waiting (`take_lock`); whoever gets it starts the helper with the locked descriptor
(`spawn_holding`), which keeps the lock through its own copy of it until it exits, and closes
its copy. A helper that dies, however it dies, lets go of the lock with its last descriptor: the
next one who needs it takes the lock and starts another. Two never run at once, and no one
waits for one to start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence


def take_lock(path: str) -> int | None:
    """The descriptor of `path` (made 0600 if need be), locked for this process; None when
    another holds the lock (its helper runs, or is starting), or there is no such folder."""
    import fcntl  # fcntl: only whoever starts a helper takes its lock

    try:
        opened = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        # at 3 or above: a caller that closed stdin or stdout gave this process those numbers,
        # which the helper's /dev/null and log take over
        lock = fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(opened)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return None
    return lock


def spawn_holding(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    lock: int,
    log_path: str,
    log_limit: int,
    keep: Sequence[int] = (),
) -> int | None:
    """Start `argv` detached (a session of its own, stdin from /dev/null, stdout and stderr
    appended to `log_path`, begun afresh past `log_limit` bytes) with the locked descriptor
    `lock` and the descriptors in `keep`, and no other descriptor of this process (a pipe a
    script waits on must not stay open in it); its pid, or None when it could not start."""
    import fcntl  # as take_lock

    try:
        fresh = os.path.getsize(log_path) > log_limit
    except OSError:
        fresh = False
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0)
    try:
        opened = os.open(log_path, flags, 0o600)
    except OSError:
        return None
    log = fcntl.fcntl(opened, fcntl.F_DUPFD_CLOEXEC, 3)  # as the lock (take_lock)
    os.close(opened)
    kept = (lock, *keep)
    try:
        for fd in kept:
            os.set_inheritable(fd, True)
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log, 1),
            (os.POSIX_SPAWN_DUP2, log, 2),
            *((os.POSIX_SPAWN_CLOSE, fd) for fd in inherited(keep=kept)),
        ]
        pid = os.posix_spawn(argv[0], list(argv), dict(env), file_actions=actions, setsid=True)
    except (OSError, NotImplementedError):
        return None
    finally:
        os.close(log)
    import threading  # threading: only whoever started a helper reaps it

    # reaped when it ends, should this process outlive it (a dashboard, a host server): no
    # zombie is left; a short command exits first and the helper goes to init
    threading.Thread(target=_reap, args=(pid,), name="reap-helper", daemon=True).start()
    return pid


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        return


def inherited(keep: Sequence[int]) -> list[int]:
    """This process's descriptors from 3 up that a program it starts would inherit."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd >= 3 and fd not in keep and os.get_inheritable(fd):
                found.append(fd)
        except OSError:
            continue  # the listing's own descriptor, closed since
    return found
