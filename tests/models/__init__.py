"""Scripted model servers the real `claude` and `codex` CLIs run against, offline.

    from tests.models import AnthropicServer, text, bash, claude_env
    with AnthropicServer([bash("touch x"), text("made it")]) as server:
        ...  # run claude with claude_env(server, home) merged into its env
    server.turn_requests[1].body["messages"]  # what it sent

- script.py: the turns (Text, ToolCall, ToolSearch, HttpError, UsageLimit, Drop, Stall, with
  Usage figures and the builders text, slow, rate_limited, unauthorized, server_error), the
  recorded Request, and the threaded server both dialects share.
- anthropic.py: the Messages API as Claude Code 2.1 uses it; claude_env; bash, claude_mcp.
- openai.py: the Responses API as codex exec 0.169 uses it; write_codex_config,
  mcp_server_toml; exec_command, codex_mcp.
- cli.py: run_claude / run_codex, the bare CLIs in a fresh HOME.
- fixtures.py: the `anthropic_server` and `openai_server` fixtures.
"""

from .anthropic import AnthropicServer, bash, claude_env, claude_mcp
from .openai import OpenAIServer, codex_mcp, exec_command, mcp_server_toml, write_codex_config
from .script import (
    FINAL,
    Drop,
    HttpError,
    Request,
    ScriptedServer,
    Stall,
    Text,
    ToolCall,
    ToolSearch,
    Turn,
    Usage,
    UsageLimit,
    dead_url,
    rate_limited,
    server_error,
    slow,
    text,
    unauthorized,
)

__all__ = [
    "FINAL",
    "AnthropicServer",
    "Drop",
    "HttpError",
    "OpenAIServer",
    "Request",
    "ScriptedServer",
    "Stall",
    "Text",
    "ToolCall",
    "ToolSearch",
    "Turn",
    "Usage",
    "UsageLimit",
    "bash",
    "claude_env",
    "claude_mcp",
    "codex_mcp",
    "dead_url",
    "exec_command",
    "mcp_server_toml",
    "rate_limited",
    "server_error",
    "slow",
    "text",
    "unauthorized",
    "write_codex_config",
]
