"""A scripted Anthropic Messages API server, as Claude Code 2.1 talks to it.

What the real `claude -p` (2.1.197) sends, as recorded against this server:

- `HEAD /` once at start (a connectivity probe): a side request.
- `POST /v1/messages?beta=true` with `stream: true`, the whole conversation in `messages` and a
  `tools` key, for each turn of its agent loop. It reads the SSE events message_start,
  content_block_start, content_block_delta (text_delta / input_json_delta), content_block_stop,
  message_delta (stop_reason, usage) and message_stop.
- After a stream that breaks off mid-way it asks again at once without `stream` (its
  non-streaming fallback): that request takes a turn too, answered as one JSON message.
- One-off queries (a title, a summary, a bash command's prefix, the subscriber's one-token
  "quota" probe) carry no `tools` key: side requests, answered here without taking a turn, as
  are `/v1/messages/count_tokens` and `/v1/models`. With CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC
  none of them was seen in `-p` runs.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from .script import (
    Dialect,
    Reply,
    Request,
    ScriptedServer,
    Text,
    ToolCall,
    Turn,
    Usage,
    UsageLimit,
    delays_for,
    split_text,
)

API_KEY = "sk-ant-scripted-test-key"

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

Event = tuple[str, dict[str, Any]]


def bash(command: str, description: str = "scripted command") -> ToolCall:
    """Claude's Bash tool running `command`."""
    return ToolCall("Bash", {"command": command, "description": description})


def claude_mcp(server: str, tool: str, **arguments: Any) -> ToolCall:
    """A call of MCP server `server`'s `tool`, as Claude Code names it: mcp__SERVER__TOOL."""
    return ToolCall(f"mcp__{server}__{tool}", arguments)


def is_side_request(body: Any) -> bool:
    """A messages request that is not a turn of the conversation. Every turn of Claude Code's
    agent loop carries a `tools` key (an empty list under `--tools=`); its one-off queries (a
    title, a summary, a bash command's prefix) carry none, and its quota probe asks for one
    token of "quota"."""
    if not isinstance(body, dict):
        return True
    return "tools" not in body or (body.get("max_tokens") or 0) <= 1


class AnthropicDialect(Dialect):
    def is_turn_request(self, request: Request) -> bool:
        return (
            request.method == "POST"
            and request.route == "/v1/messages"
            and not is_side_request(request.body)
        )

    def side_reply(self, request: Request) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        if request.method == "HEAD" or request.route in ("", "/"):
            return Reply(200, body="")
        if request.route == "/v1/messages/count_tokens":
            return Reply(200, body={"input_tokens": max(1, len(request.raw) // 4)})
        if request.route == "/v1/messages":
            turn = Text("Scripted side answer", Usage(input_tokens=1, output_tokens=1))
            model = str(body.get("model", "claude"))
            if body.get("stream"):
                return Reply(200, events=_events(turn, model))
            return Reply(200, body=_message(turn, model))
        if request.route == "/v1/models":
            return Reply(
                200, body={"data": [], "has_more": False, "first_id": None, "last_id": None}
            )
        return Reply(404, body=_error(404, f"no route {request.route} (scripted server)"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return _error(status, message)

    def usage_limit(self, turn: UsageLimit) -> Reply:
        return _usage_limit(turn)

    def text_events(self, turn: Text, model: str) -> list[Event]:
        return _events(turn, model)

    def reply(self, turn: Turn, request: Request, number: int) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        model = str(body.get("model", "claude"))
        failed = self.failure(turn, model)
        if failed is not None:
            return failed
        if isinstance(turn, Text | ToolCall):
            if not body.get("stream"):
                return Reply(200, body=_message(turn, model))
            events = _events(turn, model)
            return Reply(
                200, events=events, delays=delays_for(events, turn.delay, "content_block_delta")
            )
        raise TypeError(f"no Anthropic rendering for {turn!r}")


def _usage_limit(turn: UsageLimit) -> Reply:
    """A 429 with the unified rate-limit headers the Anthropic API sends a subscriber out of
    their limit. Claude Code on an OAuth token then ends with "You've hit your session limit ·
    resets 5:07am (UTC)" (and a `rate_limit_event` line); on an API key it only says
    "API Error: Request rejected (429) · <message>"."""
    resets_at = turn.resets_at or int(time.time()) + 3600
    headers = {
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(resets_at),
        "anthropic-ratelimit-unified-representative-claim": turn.window,
        "x-should-retry": "false",
    }
    return Reply(429, body=_error(429, "Usage limit reached (scripted)"), headers=headers)


def _usage(usage: Usage, *, output: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_tokens,
        "cache_read_input_tokens": usage.cached_tokens,
        "output_tokens": output,
        "service_tier": "standard",
    }


def _blocks(turn: Text | ToolCall) -> list[dict[str, Any]]:
    if isinstance(turn, Text):
        return [{"type": "text", "text": turn.text}]
    blocks: list[dict[str, Any]] = []
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    call_id = turn.call_id or f"toolu_{uuid.uuid4().hex[:24]}"
    blocks.append({"type": "tool_use", "id": call_id, "name": turn.name, "input": dict(turn.input)})
    return blocks


def _message(turn: Text | ToolCall, model: str) -> dict[str, Any]:
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(turn),
        "stop_reason": "tool_use" if isinstance(turn, ToolCall) else "end_turn",
        "stop_sequence": None,
        "usage": _usage(turn.usage, output=turn.usage.output_tokens),
    }


def _events(turn: Text | ToolCall, model: str) -> list[Event]:
    message = _message(turn, model)
    start = {**message, "content": [], "stop_reason": None, "usage": _usage(turn.usage, output=1)}
    events: list[Event] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events.extend(_block_events(index, block, turn.pieces))
    usage = _usage(turn.usage, output=turn.usage.output_tokens)
    del usage["service_tier"]
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: Mapping[str, Any], pieces: int) -> list[Event]:
    if block["type"] == "text":
        opening: dict[str, Any] = {"type": "text", "text": ""}
        parts = split_text(block["text"], pieces)
        deltas = [{"type": "text_delta", "text": part} for part in parts]
    else:
        opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        parts = split_text(json.dumps(block["input"]), pieces)
        deltas = [{"type": "input_json_delta", "partial_json": part} for part in parts]
    started = {"type": "content_block_start", "index": index, "content_block": opening}
    events: list[Event] = [("content_block_start", started)]
    events.extend(
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        for delta in deltas
    )
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def _error(status: int, message: str) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class AnthropicServer(ScriptedServer):
    """A scripted Anthropic Messages API: `AnthropicServer([text("hi")]).start()`, or the
    `anthropic_server` fixture."""

    dialect = AnthropicDialect()


def claude_env(
    server: ScriptedServer | str,
    home: object | None = None,
    *,
    api_key: str = API_KEY,
    oauth_token: str | None = None,
    max_retries: int = 2,
) -> dict[str, str]:
    """The variables that make a real `claude` talk to `server` (a server or a root URL),
    offline and fast; merge them over a base env. `home`, when given, becomes HOME (Claude Code
    keeps its config and sessions under $HOME/.claude and $HOME/.claude.json). With
    `oauth_token` it runs as a subscriber (CLAUDE_CODE_OAUTH_TOKEN, no API key): then it reads
    the unified rate-limit headers (`UsageLimit`). `max_retries` is CLAUDE_CODE_MAX_RETRIES
    (its default is 10, with backoff from 0.5 s doubling)."""
    url = server if isinstance(server, str) else server.url
    env = {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "" if oauth_token else api_key,
        "ANTHROPIC_AUTH_TOKEN": "",
        "CLAUDE_CODE_OAUTH_TOKEN": oauth_token or "",
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries),
        # The one that keeps it offline: no telemetry, error reports, update checks or feature
        # flags (without it, a run tries api.anthropic.com:443 six times). The others say the
        # same thing piecemeal, for older and newer releases.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL": "1",
    }
    if home is not None:
        env["HOME"] = str(home)
    return env
