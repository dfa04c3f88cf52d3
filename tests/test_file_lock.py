"""adapters/fsio.FileLock: the registry's lock, as a Ctrl-C can meet it."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from delegate.adapters import fsio
from delegate.core.errors import LockTimeout


def test_a_ctrl_c_just_after_the_lock_was_taken_leaves_it_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """KeyboardInterrupt lands between bytecodes: here just after flock granted the lock. The
    process goes on (submit cancels its job on Ctrl-C, under this same lock), so the lock must
    not stay held by a descriptor nobody will release."""
    path = tmp_path / ".lock"
    real_flock = fcntl.flock

    def flock_then_interrupted(fd: int, operation: int) -> None:
        real_flock(fd, operation)
        raise KeyboardInterrupt

    monkeypatch.setattr(fsio.fcntl, "flock", flock_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        fsio.FileLock(path, timeout_s=1).acquire()
    monkeypatch.setattr(fsio.fcntl, "flock", real_flock)
    with fsio.FileLock(path, timeout_s=0.5):  # at once: nothing holds it
        pass


def test_a_held_lock_times_out_and_leaves_no_descriptor_behind(tmp_path: Path):
    path = tmp_path / ".lock"
    with fsio.FileLock(path, timeout_s=1):
        waiter = fsio.FileLock(path, timeout_s=0.05)
        with pytest.raises(LockTimeout):
            waiter.acquire()
        assert waiter._fd is None
    with fsio.FileLock(path, timeout_s=0.5):
        pass
