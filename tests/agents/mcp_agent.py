"""A stand-in for a claude agent that uses `delegate mcp`: it starts the server its
`--mcp-config=FILE` names, the way Claude Code does (the SDK's stdio client here), takes a lock
through it, and writes what it got to mcp_result.json in its working directory.

Why a stand-in: the test that uses it watches the job's warm server live and die with its
agent, and needs the tool's raw answer where it can read it. The real claude calling our tools
through its own MCP client is tests/test_real_claude.py (and codex: tests/test_real_codex.py)."""

import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main() -> None:
    (config_file,) = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--mcp-config=")]
    with open(config_file) as handle:
        server = json.load(handle)["mcpServers"]["delegate"]
    params = StdioServerParameters(
        command=server["command"], args=server["args"], env=server["env"]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("lock_acquire", {"resource": "src/app.py", "ttl": 60})
        text = result.content[0].text
    with open("mcp_result.json", "w") as handle:
        json.dump({"is_error": result.is_error, "result": json.loads(text)}, handle)
    print("took the lock through delegate mcp")


anyio.run(main)
