"""The job's warm MCP server (entry/mcp_zygote), as its wrapper starts and stops it.

Only for a job whose profile registered `delegate mcp` (services/jobs/mcp_config, the launch's
`mcp`), and not for an agent running as another user (the server would answer as the
delegator). It runs in the agent's environment and working directory, in a session of its own
(tmux's SIGHUP and the agent's group signals are not for it), with a pipe on its stdin whose EOF
ends it if the wrapper dies. Its log: `mcp-warm.log` in the job's log folder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.config import logsetup

log = logsetup.get_logger(__name__)
ZYGOTE_MODULE = "delegate.entry.mcp_zygote"
LOG_FILE = "mcp-warm.log"
STOP_GRACE_S = 2.0


class WarmServer:
    """A running zygote; `stop` ends it and whatever it forked."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

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


def start_for_job(
    job_dir: Path, launch: Mapping[str, Any], env: Mapping[str, str], cwd: Path, as_other_user: bool
) -> WarmServer | None:
    """The warm server of a job that registers `delegate mcp` (None for the others, or when
    it cannot start: its agent's `delegate mcp` then serves in-process, as without one)."""
    if not launch.get("mcp") or as_other_user:
        return None
    try:
        return WarmServer.start(job_dir, env, cwd if cwd.is_dir() else None)
    except OSError as exc:
        log.warning("no warm MCP server: %s", exc)
        return None
