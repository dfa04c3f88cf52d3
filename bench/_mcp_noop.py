"""The reference of bench/mcp_tools.py: the MCP SDK's own server with one no-op tool, over stdio,
registered as `delegate mcp` registers its tools (a coroutine returning a dict)."""

from __future__ import annotations

from typing import Any

try:  # mcp 2: FastMCP is MCPServer
    from mcp.server.mcpserver import MCPServer
except ModuleNotFoundError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as MCPServer  # type: ignore[no-redef]

server = MCPServer("noop")


async def noop() -> dict[str, Any]:
    """Do nothing."""
    return {}


server.add_tool(noop, name="noop", description="Do nothing.")

if __name__ == "__main__":
    server.run("stdio")
