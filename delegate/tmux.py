"""The only module that talks to tmux (through libtmux's command wrapper).

Sessions made by the toolkit carry the session option `@delegate_job`, so one `list-panes -a`
query finds every pane that belongs to us. Commands are passed to tmux as an argument vector,
which tmux executes directly: no shell ever sees them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .errors import DelegateError, UsageError

SOCKET_ENV = "DELEGATE_TMUX_SOCKET"
OWNER_OPTION = "@delegate_job"
_SESSION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_FIELDS = (
    "session_name",
    "pane_id",
    "pane_pid",
    "pane_dead",
    "pane_dead_status",
    OWNER_OPTION,
    "session_created",
)
_SEP = "\x1f"  # unit separator: cannot appear in a session name we allow


class TmuxError(DelegateError):
    exit_code = 69


class Pane(NamedTuple):
    session: str
    pane_id: str
    pid: int
    dead: bool
    exit_status: int | None
    job_id: str


def validate_session_name(name: str) -> str:
    if _SESSION_NAME.fullmatch(name) is None:
        raise UsageError(f"invalid session name {name!r}: use 1-64 letters, digits, '-' or '_'")
    return name


class Tmux:
    """A tmux server: the default one, or the one on socket `socket_name` (for isolation)."""

    def __init__(self, socket_name: str | None = None) -> None:
        import libtmux  # slow to import; only commands that touch tmux pay for it

        self.socket_name = socket_name
        self._server = libtmux.Server(socket_name=socket_name) if socket_name else libtmux.Server()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tmux:
        env = os.environ if env is None else env
        return cls(env.get(SOCKET_ENV) or None)

    def _run(self, *args: str) -> list[str]:
        result: Any = self._server.cmd(*args)
        if result.returncode != 0:
            message = " ".join(result.stderr).strip() or f"tmux {args[0]} failed"
            raise TmuxError(f"tmux: {message}")
        return list(result.stdout)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        workdir: Path,
        env: Mapping[str, str],
        job_id: str,
    ) -> int:
        """Start session `name` running `argv` in `workdir`; return the pane's pid.

        The pane stays after its process exits (remain-on-exit), so its exit status can be read.
        """
        validate_session_name(name)
        args = ["new-session", "-d", "-s", name, "-c", str(workdir), "-x", "200", "-y", "50"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += ["-P", "-F", "#{pane_pid}", *argv]
        # Chained in one tmux call so the options are set before the process can exit.
        args += [";", "set-option", "-w", "-t", name, "remain-on-exit", "on"]
        args += [";", "set-option", "-t", name, OWNER_OPTION, job_id]
        out = self._run(*args)
        try:
            return int(out[0])
        except (IndexError, ValueError):
            raise TmuxError(f"tmux did not report the pane of session {name}") from None

    def has_session(self, name: str) -> bool:
        return any(p.session == name for p in self.panes(owned_only=False))

    def panes(self, *, owned_only: bool = True) -> list[Pane]:
        """Every pane on the server (ours only by default), from one `list-panes -a` query."""
        fmt = _SEP.join(f"#{{{f}}}" for f in _FIELDS)
        result: Any = self._server.cmd("list-panes", "-a", "-F", fmt)
        if result.returncode != 0:
            text = " ".join(result.stderr)
            if "no server running" in text or "error connecting" in text or "No such file" in text:
                return []
            raise TmuxError(f"tmux: {text.strip() or 'list-panes failed'}")
        panes = []
        for line in result.stdout:
            parts = line.split(_SEP)
            if len(parts) != len(_FIELDS):
                continue
            session, pane_id, pid, dead, status, job_id, _created = parts
            if owned_only and not job_id:
                continue
            panes.append(
                Pane(
                    session=session,
                    pane_id=pane_id,
                    pid=int(pid) if pid.isdigit() else 0,
                    dead=dead == "1",
                    exit_status=int(status) if status.lstrip("-").isdigit() else None,
                    job_id=job_id,
                )
            )
        return panes

    def capture(self, name: str, *, lines: int = 200) -> str:
        out = self._run("capture-pane", "-p", "-J", "-t", f"{name}:", "-S", f"-{lines}")
        return "\n".join(out)

    def send_keys(self, name: str, text: str, *, enter: bool = True) -> None:
        # -l: literal text, so words like "Enter" or "C-c" inside `text` are not keys.
        self._run("send-keys", "-t", f"{name}:", "-l", text)
        if enter:
            self._run("send-keys", "-t", f"{name}:", "Enter")

    def kill(self, name: str, *, grace_s: float = 2.0) -> list[int]:
        """Kill session `name` and every process started in its panes; return the pids killed.

        The pane's process group gets SIGTERM, then SIGKILL after `grace_s`; descendants that
        left the group (setsid) are found through /proc and killed too.
        """
        pids = [p.pid for p in self.panes(owned_only=False) if p.session == name and p.pid > 0]
        victims = set()
        for pid in pids:
            victims.add(pid)
            victims.update(descendants(pid))
        terminate(pids, victims, grace_s=grace_s)
        result: Any = self._server.cmd("kill-session", "-t", f"={name}")
        if result.returncode != 0 and self.has_session(name):
            raise TmuxError(f"tmux: could not kill session {name}: {' '.join(result.stderr)}")
        return sorted(victims)


def descendants(root: int) -> set[int]:
    """All processes below `root`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                stat = handle.read().decode("utf-8", "replace")
        except OSError:
            continue
        # The command name may hold spaces or parentheses; fields resume after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("utf-8", "replace")
    except OSError:
        return False
    state = stat[stat.rfind(")") + 2 :].split()[0]
    return state not in ("Z", "X")


def terminate(group_leaders: Sequence[int], victims: set[int], *, grace_s: float) -> None:
    def signal_all(sig: int) -> None:
        for leader in group_leaders:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, sig)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(alive(pid) for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.01)
    if any(alive(pid) for pid in victims):
        signal_all(signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        while any(alive(pid) for pid in victims) and time.monotonic() < deadline:
            time.sleep(0.01)
