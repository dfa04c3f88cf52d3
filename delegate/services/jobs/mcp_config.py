"""Registering `delegate mcp` with a job's agent: Claude gets a 0600 `--mcp-config` file in the
job's log folder, Codex `-c mcp_servers.delegate.*` overrides. Neither carries a secret: the
server proves who it is from the job's own files (entry/mcp_server.identify).

Only the claude and codex profiles (or profiles of that name), only when the MCP SDK is
installed (the `mcp` extra), and never for `submit --no-mcp`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from delegate.adapters.fsio import atomic_write
from delegate.config.settings import HOME_ENV, JOB_ENV

CONFIG_FILE = "mcp.json"
SERVER_NAME = "delegate"
SERVER_MODULE = "delegate.entry.mcp"  # `python -m` it: no typer on every agent start


def mcp_available() -> bool:
    """Whether the MCP SDK is installed (found without importing it)."""
    try:
        return importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):  # a finder that refuses it, a broken install
        return False


def server_entry(env: Mapping[str, str]) -> dict[str, object]:
    """How the agent starts the server: this installation's Python, and the variables that
    name the job (an MCP client may not pass its own environment on)."""
    keep = {name: env[name] for name in (JOB_ENV, HOME_ENV) if env.get(name)}
    return {"command": sys.executable, "args": ["-m", SERVER_MODULE], "env": keep}


# Claude Code in print mode refuses an MCP tool no one allowed; ours are the job's own.
CLAUDE_TOOLS = f"mcp__{SERVER_NAME}"
ALLOWED_TOOLS = "--allowedTools="


def allow_claude_tools(argv: list[str], tools: str) -> list[str]:
    """`argv` with `tools` added to its one `--allowedTools=` word (made when there is none)."""
    for index, word in enumerate(argv):
        if word.startswith(ALLOWED_TOOLS):
            return [*argv[:index], f"{word},{tools}", *argv[index + 1 :]]
    return [*argv, ALLOWED_TOOLS + tools]


def registers(profile: str, argv: list[str]) -> bool:
    """Whether `register` registers the server for this agent (its wrapper then starts a warm
    one: runtime/mcp_warm)."""
    return profile in ("claude", "codex") and bool(argv) and mcp_available()


def register(profile: str, argv: list[str], job_dir: Path, env: Mapping[str, str]) -> list[str]:
    """`argv` with the server registered for a claude or codex agent; otherwise unchanged."""
    if not registers(profile, argv):
        return argv
    entry = server_entry(env)
    if profile == "claude":
        path = job_dir / CONFIG_FILE
        config = {"mcpServers": {SERVER_NAME: {"type": "stdio", **entry}}}
        atomic_write(path, json.dumps(config, indent=2).encode("utf-8"))  # 0600
        return [*allow_claude_tools(argv, CLAUDE_TOOLS), f"--mcp-config={path}"]
    prefix = f"mcp_servers.{SERVER_NAME}"
    overrides = [
        f"{prefix}.command={json.dumps(entry['command'])}",
        f"{prefix}.args={json.dumps(entry['args'])}",
        *(f"{prefix}.env.{k}={json.dumps(v)}" for k, v in dict(entry["env"]).items()),  # type: ignore[call-overload]
        # `codex exec` runs under approval policy "never": an MCP call no one approved is
        # refused, so our own tools are approved here (and only ours).
        f'{prefix}.default_tools_approval_mode="approve"',
        # `codex exec` sends its first request without waiting for an MCP server that is slow
        # to answer (half a second: the SDK's import, a warm server still starting), and that
        # server's tools are then missing for the whole run. Required, codex waits for it (30 s
        # at most) and exits in error, saying why, when it cannot start.
        f"{prefix}.required=true",
    ]
    after = 2 if argv[1:2] == ["exec"] else 1
    return [*argv[:after], *(x for o in overrides for x in ("-c", o)), *argv[after:]]
