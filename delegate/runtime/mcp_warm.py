"""The job's warm MCP server (entry/mcp_zygote), as its wrapper starts and stops it.

Only for a job whose profile registered `delegate mcp` (services/jobs/mcp_config, the launch's
`mcp`), and not for an agent running as another user (the server would answer as the
delegator). It runs in the agent's environment and working directory, in a session of its own
(tmux's SIGHUP and the agent's group signals are not for it), with a pipe on its stdin whose EOF
ends it if the wrapper dies. Its log: `mcp-warm.log` in the job's log folder.

It is forked by the state dir's MCP nursery (entry/mcp_nursery), which has the SDK loaded
already, when one answers; otherwise the wrapper starts the zygote itself (it loads the SDK
while the agent starts) and starts a nursery for the jobs after it, holding the state dir's
mcp-nursery.lock so that one starts, once. `$DELEGATE_MCP_WARM_S=0`: no nursery.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.adapters.mcp_handover import ask_nursery
from delegate.adapters.publish_socket import socket_path_text
from delegate.config import logsetup
from delegate.config.settings import DEFAULT_MCP_WARM_S, HOME_ENV, LOG_LEVEL_ENV, MCP_WARM_ENV
from delegate.config.statefiles import MCP_NURSERY_LOCK, MCP_NURSERY_LOG, MCP_NURSERY_SOCKET

log = logsetup.get_logger(__name__)
ZYGOTE_MODULE = "delegate.entry.mcp_zygote"
NURSERY_MODULE = "delegate.entry.mcp_nursery"
# What the nursery runs with: where the state is, and Python's own settings; each zygote it
# forks gets its agent's whole environment.
NURSERY_ENV = (HOME_ENV, MCP_WARM_ENV, LOG_LEVEL_ENV, "HOME", "PATH")
LOG_FILE = "mcp-warm.log"
STOP_GRACE_S = 2.0


class WarmServer:
    """A running zygote; `stop` ends it and whatever it forked."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    @classmethod
    def forked(
        cls, nursery: str, job_dir: Path, env: Mapping[str, str], cwd: Path | None
    ) -> ForkedServer | None:
        """The zygote the nursery at `nursery` forks for this job, or None when none did."""
        read_end, write_end = os.pipe()
        opened: list[int] = [read_end]
        try:
            opened.append(
                os.open(job_dir / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            )
            opened.append(os.open(cwd or "/", os.O_RDONLY | os.O_DIRECTORY))
            pid = ask_nursery(nursery, dict(env), opened)
        except OSError:
            pid = None
        finally:
            for fd in opened:
                os.close(fd)
        if pid is None:
            os.close(write_end)
            return None
        return ForkedServer(pid, write_end)

    @classmethod
    def start(cls, job_dir: Path, env: Mapping[str, str], cwd: Path | None = None) -> WarmServer:
        fd = os.open(job_dir / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE],
                env=dict(env),
                cwd=cwd,
                stdin=subprocess.PIPE,
                stdout=fd,
                stderr=fd,
                start_new_session=True,
            )
        finally:
            os.close(fd)
        return cls(proc)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """Close its pipe (it stops listening), then SIGTERM its group (the children serving
        clients), then SIGKILL what is left after a grace."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        self._signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_GRACE_S)
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=STOP_GRACE_S)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)


class ForkedServer:
    """A zygote the nursery forked: not this process's child, so it is watched by its pid (its
    session's leader: its group is its pid) and told to end by closing its pipe."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid = pid
        self.pipe: int | None = pipe

    def stop(self) -> None:
        """As WarmServer.stop: close its pipe, SIGTERM its group, SIGKILL what is left."""
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and _alive(self.pid):
                time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_for_job(
    job_dir: Path, launch: Mapping[str, Any], env: Mapping[str, str], cwd: Path, as_other_user: bool
) -> WarmServer | ForkedServer | None:
    """The warm server of a job that registers `delegate mcp` (None for the others, or when
    it cannot start: its agent's `delegate mcp` then serves in-process, as without one)."""
    if not launch.get("mcp") or as_other_user:
        return None
    folder = cwd if cwd.is_dir() else None
    home = env.get(HOME_ENV, "")
    idle_s = launch.get("mcp_warm_s", DEFAULT_MCP_WARM_S)  # the submitter's setting
    wanted = isinstance(idle_s, int | float) and idle_s > 0
    nursery = nursery_socket(home) if home and wanted else None
    if nursery is not None:
        forked = WarmServer.forked(nursery, job_dir, env, folder)
        if forked is not None:
            return forked
    try:
        server = WarmServer.start(job_dir, env, folder)
    except OSError as exc:
        log.warning("no warm MCP server: %s", exc)
        return None
    if nursery is not None:  # for the jobs after this one
        start_nursery(home, nursery, {**env, MCP_WARM_ENV: f"{idle_s:g}"})
    return server


def nursery_socket(home: str) -> str | None:
    """Where the MCP nursery of the state dir `home` listens (None: no safe place)."""
    key = f"mcp-nursery-{zlib.crc32(os.fsencode(home)):08x}"
    return socket_path_text(home, key, MCP_NURSERY_SOCKET)


def start_nursery(home: str, path: str, env: Mapping[str, str]) -> bool:
    """Start the state dir's nursery unless one runs or starts (its lock is taken), detached:
    a session of its own, in `/`, its output to mcp-nursery.log, holding the lock for its life.
    It is not waited for. True when one was started."""
    try:
        lock = os.open(os.path.join(home, MCP_NURSERY_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # one runs, or is starting
        kept = {k: v for k, v in env.items() if k in NURSERY_ENV or k.startswith("PYTHON")}
        with open(os.path.join(home, MCP_NURSERY_LOG), "ab") as log_file:
            subprocess.Popen(
                [sys.executable, "-P", "-m", NURSERY_MODULE, path, str(lock)],
                env=kept,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                pass_fds=(lock,),
                start_new_session=True,
            )
        return True
    except OSError as exc:
        log.warning("no MCP nursery: %s", exc)
        return False
    finally:
        os.close(lock)  # the nursery holds it through its own copy
