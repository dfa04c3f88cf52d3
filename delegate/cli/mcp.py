"""`delegate mcp`: this job's coordination tools for its agent, over stdio (runtime/mcp_server).

`__main__` answers `delegate mcp` without typer (entry/mcp); this command is the same for
`--help` and for the command tree the tests walk.
"""

from __future__ import annotations

import typer

from delegate.entry.mcp import main_mcp

commands = typer.Typer()


@commands.command("mcp")
def mcp() -> int:
    """Serve this job's coordination as MCP tools over stdin/stdout, for its agent.

    Run by the agent's MCP client inside a job (DELEGATE_JOB_ID), never by hand: messages,
    locks, claims, heartbeats, the blackboard, the board, sub-jobs and progress, always as this
    job's agent. Needs the `mcp` extra: pip install 'delegate[mcp]'.
    Example: delegate mcp
    """
    return main_mcp()
