"""File-system primitives every adapter shares: private dirs, atomic writes, appends, a lock.

Atomic write = temp file in the same folder, write, flush, fsync, `os.replace`, fsync the folder:
a crash at any instant leaves either the old or the new file, never a torn one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

from delegate.core.errors import LockTimeout

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700
TEMP_SUFFIX = ".tmp"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` and any missing parents, each mode 0700; return it.

    A folder that already exists keeps its mode: the toolkit never tightens (or loosens) a
    folder it did not create, such as a shared 1777 folder that holds a bus, or `/tmp`.
    """
    missing = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            continue  # made by someone else meanwhile: theirs, so its mode stays
        os.chmod(folder, PRIVATE_DIR)  # exactly 0700, whatever the umask
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    return path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path, data: bytes, *, mode: int = PRIVATE_FILE, durable: bool = True
) -> None:
    """Replace `path` with `data` so that readers and crashes see old or new, never a mix.
    `durable=False` skips the fsyncs: for a file that only matters while its reader lives
    (a crash loses it, and its reader with it), where the milliseconds do matter."""
    folder = path.parent
    # A dot name with a fixed suffix keeps temp files out of `*.json` globs and easy to sweep.
    tmp = folder / f".{path.name}.{os.getpid()}.{time.monotonic_ns()}{TEMP_SUFFIX}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(folder)


def write_new(path: Path | str, data: bytes, *, mode: int = PRIVATE_FILE) -> None:
    """Write a file that must not exist yet, in one go and not durably: for a new job's
    files in a plan, which no reader looks for before the plan's commit syncs them all (no
    temp file and rename: one create per file, in folders of 10,000 names)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def append_line(path: Path, line: bytes, *, durable: bool = True) -> None:
    """Append one complete line with a single write on an O_APPEND descriptor, and (durable)
    fsync it before returning, so whatever is written after it (a status file) is never on
    disk without it.

    One `write` per line keeps concurrent appenders (publisher, subscriber) from interleaving.
    fdatasync suffices: the size the line adds is metadata it flushes too.
    """
    if not line.endswith(b"\n"):
        line += b"\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        created = True
    except FileExistsError:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        created = False
    try:
        written = os.write(fd, line)
        if written != len(line):  # only on a full disk or a signal; never leave half a line
            raise OSError(errno.EIO, f"short append to {path}")
        if durable:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    if created and durable:
        fsync_dir(path.parent)  # the new file's name is on disk too


class FileLock:
    """An exclusive `flock` on a lock file, with a deadline.

    The same kernel lock that `filelock.UnixFileLock` takes, so the two interoperate; we hold it
    directly because importing filelock costs more than the whole publish budget allows, and its
    50 ms polling is too coarse for many short critical sections. Waiting polls with a short
    growing back-off, so a waiter gets the lock within a millisecond or so of its release.
    """

    def __init__(self, path: Path, timeout_s: float = 30.0) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
        deadline = time.monotonic() + self.timeout_s
        pause = 0.0002
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self._fd = fd
                    return
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(str(self.path), self.timeout_s) from None
                    time.sleep(pause)
                    pause = min(pause * 1.5, 0.005)
        except BaseException:
            # a Ctrl-C (KeyboardInterrupt) may land just after flock took the lock: no `with`
            # releases a lock whose __enter__ raised, and the process, still running its
            # cancel, would wait on its own lock; closing the descriptor releases it
            self._fd = None
            os.close(fd)
            raise

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def path_with(folder: str, path: str | None) -> str:
    """`path` (a PATH value) with `folder` first, and not twice."""
    parts = [p for p in (path or "/usr/bin:/bin").split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *parts])
