"""`delegate mcp` without typer: `python -m delegate.entry.mcp` is what the claude and codex
profiles register (an agent's client starts it for every session, and the MCP SDK is slow
enough to import on its own); the typer command `delegate mcp` calls the same `main_mcp`.

Inside a job whose wrapper started a warm server (runtime/mcp_warm), this process only hands
its stdio over to it (adapters/mcp_handover) and exits with the served session's status; it
imports neither the SDK nor typer. Without one, it serves in-process.

Without the SDK (the `mcp` extra) it says in one line how to install it and exits 69.
"""

from __future__ import annotations

import os
import sys
import time

from delegate.adapters.mcp_handover import hand_over, socket_path
from delegate.config import logsetup
from delegate.config.settings import settings
from delegate.config.statefiles import JOBS_DIR
from delegate.core.errors import DelegateError, guarded
from delegate.core.ids import is_job_id

SANDBOX_WAIT_S = 30.0  # how long a sandboxed job's MCP client waits for its warm server
INSTALL_HINT = "delegate mcp needs the MCP SDK: pip install 'delegate[mcp]'"


class McpMissing(DelegateError):
    exit_code = 69

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


def served_warm() -> int | None:
    """The exit status of this session served by the job's warm server; None without one."""
    env = settings()
    if not env.home or not is_job_id(env.job_id):
        return None
    path = socket_path(env.home, env.job_id)
    if path is None:
        return None
    if not os.path.isdir(os.path.join(env.home, JOBS_DIR)):
        # inside a sandbox (the state dir is hidden there): only the warm server, outside,
        # can serve, and it may still be starting
        deadline = time.monotonic() + SANDBOX_WAIT_S
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
    return hand_over(path, env.job_id)


def main_mcp() -> int:
    status = served_warm()
    if status is not None:
        return status
    # importlib.util, json, pathlib: only without a warm server, which needs none of them
    from delegate.services.jobs.mcp_config import mcp_available

    if not mcp_available():
        raise McpMissing
    # the MCP SDK (pydantic, anyio: a second or more): only this command loads it
    from delegate.entry.mcp_server import serve

    return serve()


if __name__ == "__main__":
    logsetup.configure_lazily()
    sys.exit(guarded(main_mcp))
