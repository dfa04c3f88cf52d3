"""Which live processes use a folder: their working directory, or an open file, inside it.

Read from /proc (`/proc/PID/cwd` and the `/proc/PID/fd/*` links). Processes of other users
whose links we may not read are not seen; `worktree clean` is run by the worktrees' owner,
whose processes are the ones that matter.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import NamedTuple

PROC = "/proc"


class Use(NamedTuple):
    pid: int
    how: str  # "cwd" or "open file PATH"


def _inside(target: str, folder: str) -> bool:
    return target == folder or target.startswith(folder + os.sep)


def _links(pid_dir: str) -> list[tuple[str, str]]:
    """(how, target) of the process's cwd and each of its open files that we may read."""
    found = []
    with contextlib.suppress(OSError):
        found.append(("cwd", os.readlink(f"{pid_dir}/cwd")))
    fd_dir = f"{pid_dir}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("/"):  # not a pipe, socket or anon inode
            found.append(("open file", target))
    return found


def processes_using(folders: list[Path]) -> dict[Path, list[Use]]:
    """For each folder, every live process (this one excepted) with its cwd or an open file
    inside it: one pass over /proc for all of them."""
    roots = {folder: os.path.realpath(folder) for folder in folders}
    found: dict[Path, list[Use]] = {folder: [] for folder in folders}
    me = os.getpid()
    try:
        pids = [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        if pid == me:
            continue
        links = _links(f"{PROC}/{pid}")
        for folder, root in roots.items():
            for how, target in links:
                if _inside(target, root):
                    found[folder].append(Use(pid, how if how == "cwd" else f"{how} {target}"))
                    break
    return found


MAX_ANCESTORS = 64  # a process tree deeper than this is not walked further


def ancestor_environ(name: str, pid: int | None = None) -> tuple[int, str] | None:
    """The first process, from `pid` (default: this one) up its parents, whose environment as
    it was started holds `name`: (its pid, the value); None when none does (or none can be
    read). A program that removed the variable before starting this one (`env -u`) still has
    a parent that held it."""
    wanted = name.encode() + b"="
    current = os.getpid() if pid is None else pid
    for _ in range(MAX_ANCESTORS):
        if current <= 1:
            return None
        with contextlib.suppress(OSError), open(f"{PROC}/{current}/environ", "rb") as handle:
            for entry in handle.read().split(b"\0"):
                if entry.startswith(wanted):
                    return current, entry[len(wanted) :].decode("utf-8", "replace")
        try:
            with open(f"{PROC}/{current}/stat", "rb") as handle:
                # the command name may hold spaces and parentheses: the fields follow its last ")"
                current = int(handle.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def tree_memory(roots: list[int]) -> dict[int, int]:
    """For each root pid, the resident memory in bytes of every process below it (the root
    itself left out: a job's wrapper, to count its agent's tree): one pass over /proc."""
    page = os.sysconf("SC_PAGE_SIZE")
    children: dict[int, list[int]] = {}
    resident: dict[int, int] = {}
    try:
        names = os.listdir(PROC)
    except OSError:
        return {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{PROC}/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        pid = int(name)
        children.setdefault(int(fields[1]), []).append(pid)
        resident[pid] = int(fields[21]) * page
    found = {}
    for root in roots:
        total, below = 0, list(children.get(root, ()))
        while below:
            pid = below.pop()
            total += resident.get(pid, 0)
            below.extend(children.get(pid, ()))
        found[root] = total
    return found


def processes_with_environ(entry: str) -> set[int]:
    """Pids (this one's left out) whose environment holds `entry` (`NAME=value`, whole): one
    pass over /proc, same user or root. Read when asked, so a reused pid shows its new
    owner's environment."""
    marker = entry.encode()
    me = os.getpid()
    found = set()
    for name in os.listdir(PROC):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"{PROC}/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.add(int(name))
    return found
