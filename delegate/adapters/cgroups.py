"""Linux control groups: one per limited job, holding its agent and everything the agent
starts, with the job's memory, CPU and process limits, read back at the end.

Two layouts are in use. cgroup v2 (one unified tree, `cgroup.controllers` at its root): the job's
group is `<root>/delegate/<job_id>`, the controllers enabled down to it. cgroup v1 (a tree per
controller, `<root>/memory`, `<root>/cpu`, ...): the job has `<root>/<controller>/delegate/<id>`
in each. Where neither can be written by us, `support()` says why, and a limited job is refused
(services/jobs/limits): never run unlimited in silence.

The agent joins its groups between fork and exec (`join`: a write of "0", the writer itself, to
each `cgroup.procs`), so no process of it ever runs outside them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from delegate.core.limits import Limits

V1_NEEDS = {"memory_bytes": "memory", "cpus": "cpu", "pids": "pids"}  # limit -> controller
CPU_PERIOD_US = 100_000
PARENT = "delegate"


class Support(NamedTuple):
    """What this machine lets us limit: the layout (`v2`, `v1` or None), the controllers we
    can write, and, when something is missing, why in words."""

    layout: str | None
    controllers: frozenset[str]
    reason: str | None = None

    def missing(self, limits: Limits) -> list[str]:
        """The controllers `limits` need that cannot be written here."""
        wanted = [V1_NEEDS[name] for name, value in limits._asdict().items() if value is not None]
        return [c for c in wanted if c not in self.controllers]


def support(root: Path) -> Support:
    """Which layout `root` (normally /sys/fs/cgroup) has, and which controllers we can use."""
    if (root / "cgroup.controllers").is_file():  # v2 at the root
        try:
            offered = set((root / "cgroup.controllers").read_text().split())
        except OSError as exc:
            return Support(None, frozenset(), f"{root}: {exc.strerror}")
        usable = offered & {"memory", "cpu", "pids"}
        if not os.access(root / "cgroup.subtree_control", os.W_OK):
            return Support(None, frozenset(), f"{root} is cgroup v2 but not writable by us")
        return Support("v2", frozenset(usable), None if usable else f"{root} offers no controller")
    usable = set()
    for controller in ("memory", "cpu", "pids"):
        folder = root / controller
        if (folder / "cgroup.procs").is_file() and os.access(folder, os.W_OK):
            usable.add(controller)
    if usable:
        return Support("v1", frozenset(usable))
    return Support(None, frozenset(), f"no writable cgroup controller under {root}")


class Usage(NamedTuple):
    """What the kernel counted for a job's group."""

    peak_memory_bytes: int | None
    cpu_s: float | None
    oom_kills: int
    pids_refused: int  # forks refused at the pids limit


class JobGroup:
    """A limited job's control group(s): made, joined by its agent, read, emptied, removed."""

    def __init__(self, layout: str, folders: dict[str, Path]) -> None:
        self.layout = layout
        self.folders = folders  # controller (or "v2") -> its folder

    @classmethod
    def make(cls, root: Path, job_id: str, limits: Limits) -> JobGroup:
        """Make the job's group(s) with `limits` written; OSError when the kernel refuses."""
        found = support(root)
        if found.layout is None:
            raise OSError(found.reason)
        if found.layout == "v2":
            return cls._make_v2(root, job_id, limits, found.controllers)
        folders: dict[str, Path] = {}
        for controller in sorted(found.controllers | ({"cpuacct"} & _present(root))):
            folder = root / controller / PARENT / job_id
            folder.mkdir(parents=True, exist_ok=True)
            folders[controller] = folder
        return cls("v1", folders)._limited(limits)

    @classmethod
    def _make_v2(cls, root: Path, job_id: str, limits: Limits, usable: frozenset[str]) -> JobGroup:
        enable = " ".join(f"+{c}" for c in sorted(usable)).encode()
        parent = root / PARENT
        (root / "cgroup.subtree_control").write_bytes(enable)
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_bytes(enable)
        folder = parent / job_id
        folder.mkdir(exist_ok=True)
        return cls("v2", {"v2": folder})._limited(limits)

    def _limited(self, limits: Limits) -> JobGroup:
        """This group with `limits` written in its layout's files; OSError (the group removed)
        when the kernel refuses one. Swap is kept to the memory limit where the kernel counts
        it (no swap accounting: swap cannot escape the limit anyway)."""
        v2 = self.layout == "v2"
        quota = int(limits.cpus * CPU_PERIOD_US) if limits.cpus is not None else 0
        writes: list[tuple[str, str, object, bool]] = []  # controller, file, value, optional
        if limits.memory_bytes is not None:
            writes.append(("memory", "memory.max" if v2 else "memory.limit_in_bytes",
                           limits.memory_bytes, False))  # fmt: skip
            writes.append(("memory", "memory.swap.max" if v2 else "memory.memsw.limit_in_bytes",
                           0 if v2 else limits.memory_bytes, True))  # fmt: skip
        if limits.cpus is not None and v2:
            writes.append(("cpu", "cpu.max", f"{quota} {CPU_PERIOD_US}", False))
        elif limits.cpus is not None:
            writes.append(("cpu", "cpu.cfs_period_us", CPU_PERIOD_US, False))
            writes.append(("cpu", "cpu.cfs_quota_us", quota, False))
        if limits.pids is not None:
            writes.append(("pids", "pids.max", limits.pids, False))
        try:
            for controller, name, value, optional in writes:
                try:
                    self._write("v2" if v2 else controller, name, value)
                except OSError:
                    if not optional:
                        raise
        except OSError:
            self.remove()
            raise
        return self

    def _write(self, controller: str, name: str, value: object) -> None:
        (self.folders[controller] / name).write_text(f"{value}\n")

    def _read(self, controller: str, name: str) -> str | None:
        folder = self.folders.get(controller)
        try:
            return (folder / name).read_text() if folder is not None else None
        except OSError:
            return None

    def join(self) -> Callable[[], None]:
        """What the agent's child runs between fork and exec (subprocess's preexec_fn): it
        writes itself into every group. The files are opened here, in the wrapper; the child
        only writes (the descriptors close at its exec)."""
        fds = [
            os.open(folder / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            for folder in self.folders.values()
        ]
        self._join_fds = fds

        def join_now() -> None:
            for fd in fds:
                os.write(fd, b"0")

        return join_now

    def joined(self) -> None:
        """The agent has started: the wrapper's copies of the descriptors go."""
        for fd in getattr(self, "_join_fds", []):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._join_fds = []

    def usage(self) -> Usage:
        if self.layout == "v2":
            peak = _int(self._read("v2", "memory.peak"))
            cpu_us = _field(self._read("v2", "cpu.stat"), "usage_usec")
            oom = _field(self._read("v2", "memory.events"), "oom_kill") or 0
            refused = _field(self._read("v2", "pids.events"), "max") or 0
            return Usage(peak, cpu_us / 1e6 if cpu_us is not None else None, oom, refused)
        peak = _int(self._read("memory", "memory.max_usage_in_bytes"))
        cpu_ns = _int(self._read("cpuacct", "cpuacct.usage") or self._read("cpu", "cpuacct.usage"))
        oom = _field(self._read("memory", "memory.oom_control"), "oom_kill") or 0
        refused = _field(self._read("pids", "pids.events"), "max") or 0
        return Usage(peak, cpu_ns / 1e9 if cpu_ns is not None else None, oom, refused)

    def pids(self) -> set[int]:
        found: set[int] = set()
        for folder in self.folders.values():
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
        return found

    def kill_all(self, timeout_s: float = 5.0) -> bool:
        """SIGKILL every process left in the group (a fork bomb keeps making more: again until
        none is left); whether it is empty."""
        if self.layout == "v2":
            with contextlib.suppress(OSError):
                self._write("v2", "cgroup.kill", 1)
        deadline = time.monotonic() + timeout_s
        while (left := self.pids()) and time.monotonic() < deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
        return not self.pids()

    def remove(self) -> None:
        """Remove the group(s); a group still holding a process (dying) is tried again."""
        for folder in self.folders.values():
            for _ in range(50):
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def existing_groups(root: Path) -> dict[str, JobGroup]:
    """The jobs' groups under `root` now, by job id (every state dir's on this machine: the
    caller keeps to its own jobs)."""
    found: dict[str, dict[str, Path]] = {}
    parents = [("v2", root / PARENT)]
    parents += [(c, root / c / PARENT) for c in ("memory", "cpu", "cpuacct", "pids")]
    for controller, parent in parents:
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                found.setdefault(entry.name, {})[controller] = Path(entry.path)
    return {
        job_id: JobGroup("v2" if "v2" in folders else "v1", folders)
        for job_id, folders in found.items()
    }


def _present(root: Path) -> set[str]:
    return {"cpuacct"} if (root / "cpuacct" / "cgroup.procs").is_file() else set()


def _int(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def _field(text: str | None, name: str) -> int | None:
    """`name`'s number in a flat keyed file (`oom_kill 1`, `max 3`, `usage_usec 10`)."""
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            return _int(value)
    return None
