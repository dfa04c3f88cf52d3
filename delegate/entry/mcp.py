"""`delegate mcp` without typer: `python -m delegate.entry.mcp` is what the claude and codex
profiles register (an agent's client starts it for every session, and the MCP SDK is slow
enough to import on its own); the typer command `delegate mcp` calls the same `main_mcp`.

Without the SDK (the `mcp` extra) it says in one line how to install it and exits 69.
"""

from __future__ import annotations

import sys

from delegate.config import logsetup
from delegate.core.errors import DelegateError, guarded
from delegate.services.jobs.mcp_config import mcp_available

INSTALL_HINT = "delegate mcp needs the MCP SDK: pip install 'delegate[mcp]'"


class McpMissing(DelegateError):
    exit_code = 69

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


def main_mcp() -> int:
    if not mcp_available():
        raise McpMissing
    # the MCP SDK (pydantic, anyio: a second or more): only this command loads it
    from delegate.entry.mcp_server import serve

    return serve()


if __name__ == "__main__":
    logsetup.configure_lazily()
    sys.exit(guarded(main_mcp))
