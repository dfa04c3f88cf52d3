"""A scripted OpenAI Responses API server, as `codex exec` talks to it.

Codex 0.169 with a custom provider (`wire_api = "responses"`) sends `POST /v1/responses` with
`stream: true` and the whole conversation in `input` for each turn, and reads the SSE events
response.created, response.output_item.added / .done (a `message`, a `function_call`),
response.output_text.delta and response.completed (with `usage`). On the side it may ask
`GET /v1/models` (not seen with a model from its own catalog): that takes no turn.

MCP tools are deferred: they are not in `tools`; the developer message names their namespace
("Deferred tool namespaces: - mcp__delegate: ...") and `tools` has `{"type": "tool_search",
"execution": "client", ...}`. The model sends a `tool_search_call` item (`ToolSearch`), codex
puts a `tool_search_output` item (a `namespace` tool holding the found functions) in the next
request, and the model calls one as a `function_call` with `namespace: "mcp__delegate"` and the
tool's own `name` (`codex_mcp`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .script import (
    Dialect,
    Reply,
    Request,
    ScriptedServer,
    Text,
    ToolCall,
    ToolSearch,
    Turn,
    Usage,
    UsageLimit,
    delays_for,
    split_text,
)

# A model from codex 0.169's own catalog (`codex debug models`), so no model discovery is asked
# for, and the one there whose tools are the classic ones (exec_command, tool_search, ...): the
# catalog's other models are `tool_mode: code_mode_only`.
DEFAULT_MODEL = "gpt-5.5"
ENV_KEY = "SCRIPTED_OPENAI_API_KEY"
API_KEY = "sk-scripted-openai-test-key"


def exec_command(cmd: str) -> ToolCall:
    """Codex's unified-exec shell tool running `cmd`."""
    return ToolCall("exec_command", {"cmd": cmd})


def codex_mcp(server: str, tool: str, **arguments: Any) -> ToolCall:
    """A call of MCP server `server`'s `tool` as codex 0.169 expects it: a function_call named
    after the tool, in namespace `mcp__SERVER` (found first with `ToolSearch`, or called
    straight away: codex takes both)."""
    return ToolCall(tool, arguments, namespace=f"mcp__{server}")


_ERROR_CODES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_overloaded",
}

Event = tuple[str, dict[str, Any]]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _event(kind: str, **fields: Any) -> Event:
    return kind, {"type": kind, **fields}


def _usage(usage: Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


class OpenAIDialect(Dialect):
    def is_turn_request(self, request: Request) -> bool:
        return request.method == "POST" and request.route.endswith("/responses")

    def side_reply(self, request: Request) -> Reply:
        if request.route.endswith("/models"):
            return Reply(200, body={"object": "list", "data": [], "models": []})
        return Reply(404, body=_error(404, f"no route {request.route} (scripted server)"))

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return _error(status, message)

    def usage_limit(self, turn: UsageLimit) -> Reply:
        return _usage_limit(turn)

    def text_events(self, turn: Text, model: str) -> list[Event]:
        return _events(turn, model)

    def reply(self, turn: Turn, request: Request, number: int) -> Reply:
        body = request.body if isinstance(request.body, dict) else {}
        model = str(body.get("model", DEFAULT_MODEL))
        failed = self.failure(turn, model)
        if failed is not None:
            return failed
        if isinstance(turn, ToolSearch):
            return Reply(200, events=_events(turn, model))
        if isinstance(turn, Text | ToolCall):
            events = _events(turn, model)
            kind = "response.output_text.delta"
            if isinstance(turn, ToolCall):
                kind = "response.function_call_arguments.delta"
            return Reply(200, events=events, delays=delays_for(events, turn.delay, kind))
        raise TypeError(f"no OpenAI rendering for {turn!r}")


def _usage_limit(turn: UsageLimit) -> Reply:
    """A 429 whose error type is `usage_limit_reached`: codex 0.169 then ends its turn with
    "You’ve hit your usage limit. Upgrade to Pro (...), visit ... to purchase more credits or
    try again at 5:09 AM." (the wording depends on `plan_type`; the time is `resets_at` in local
    time, with the date when it is not today). It does not retry it."""
    resets_at = turn.resets_at or int(time.time()) + 3600
    error = {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": turn.plan_type,
        "resets_at": resets_at,
        "resets_in_seconds": max(0, resets_at - int(time.time())),
    }
    return Reply(429, body={"error": error})


def _message_item(item_id: str, content: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": item_id,
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": content, "annotations": []}],
    }


def _text_events(index: int, value: str, pieces: int) -> list[Event]:
    item_id = _id("msg")
    opened = {**_message_item(item_id, ""), "status": "in_progress", "content": []}
    events = [_event("response.output_item.added", output_index=index, item=opened)]
    events.extend(
        _event(
            "response.output_text.delta",
            item_id=item_id,
            output_index=index,
            content_index=0,
            delta=part,
        )
        for part in split_text(value, pieces)
    )
    done = _message_item(item_id, value)
    events.append(_event("response.output_item.done", output_index=index, item=done))
    return events


def _call_events(index: int, turn: ToolCall) -> list[Event]:
    arguments = json.dumps(dict(turn.input))
    item: dict[str, Any] = {
        "type": "function_call",
        "id": _id("fc"),
        "status": "completed",
        "call_id": turn.call_id or _id("call"),
        "name": turn.name,
        "arguments": arguments,
    }
    if turn.namespace:
        item["namespace"] = turn.namespace
    opened = {**item, "status": "in_progress", "arguments": ""}
    events = [_event("response.output_item.added", output_index=index, item=opened)]
    events.extend(
        _event(
            "response.function_call_arguments.delta",
            item_id=item["id"],
            output_index=index,
            delta=part,
        )
        for part in split_text(arguments, turn.pieces)
    )
    events.append(_event("response.output_item.done", output_index=index, item=item))
    return events


def _search_events(index: int, turn: ToolSearch) -> list[Event]:
    item = {
        "type": "tool_search_call",
        "id": _id("ts"),
        "call_id": turn.call_id or _id("call"),
        "status": "completed",
        "execution": "client",
        "arguments": {"query": turn.query, "limit": turn.limit},
    }
    return [
        _event(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress"}
        ),
        _event("response.output_item.done", output_index=index, item=item),
    ]


def _events(turn: Text | ToolCall | ToolSearch, model: str) -> list[Event]:
    response = {
        "id": _id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "in_progress",
        "output": [],
    }
    events = [_event("response.created", response=response)]
    if isinstance(turn, Text):
        events.extend(_text_events(0, turn.text, turn.pieces))
    elif isinstance(turn, ToolSearch):
        events.extend(_search_events(0, turn))
    else:
        if turn.text:
            events.extend(_text_events(0, turn.text, 1))
        events.extend(_call_events(1 if turn.text else 0, turn))
    completed = {**response, "status": "completed", "usage": _usage(turn.usage)}
    events.append(_event("response.completed", response=completed))
    return events


def _error(status: int, message: str) -> dict[str, Any]:
    code = _ERROR_CODES.get(status, "server_error")
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


class OpenAIServer(ScriptedServer):
    """A scripted OpenAI Responses API: `OpenAIServer([text("hi")]).start()`, or the
    `openai_server` fixture."""

    dialect = OpenAIDialect()


def mcp_server_toml(
    name: str,
    command: str,
    args: list[str],
    env: Mapping[str, str] | None = None,
    *,
    approve: bool = True,
) -> str:
    """A `[mcp_servers.NAME]` table for `write_codex_config(extra=...)`. `codex exec` runs under
    approval policy "never": an MCP call is refused ("MCP tool call requires approval, but
    approval policy is never") unless `default_tools_approval_mode = "approve"`."""
    lines = [
        f"[mcp_servers.{name}]",
        f"command = {json.dumps(command)}",
        f"args = {json.dumps(args)}",
    ]
    if env:
        pairs = ", ".join(f"{key} = {json.dumps(value)}" for key, value in env.items())
        lines.append(f"env = {{ {pairs} }}")
    if approve:
        lines.append('default_tools_approval_mode = "approve"')
    return "\n".join(lines) + "\n"


def write_codex_config(
    codex_home: Path | str,
    server: ScriptedServer | str,
    *,
    api_key: str = API_KEY,
    model: str = DEFAULT_MODEL,
    request_max_retries: int = 1,
    stream_max_retries: int = 1,
    stream_idle_timeout_ms: int = 3000,
    extra: str = "",
) -> dict[str, str]:
    """Write `$CODEX_HOME/config.toml` so a real `codex` talks to `server` (a server or a root
    URL) through the custom provider "scripted", offline and fast, and return the variables to
    merge over a base env: CODEX_HOME and the provider's key variable. Every key here passes
    `codex exec --strict-config`, and each can equally be given as `-c key=value`. `extra` (TOML:
    e.g. `mcp_server_toml(...)`) is appended.

    Retries: a request is tried 1 + request_max_retries times for a 5xx or a broken connection
    (not for a 401 or 429); a failed turn is re-asked 1 + stream_max_retries times, each after a
    `{"type":"error","message":"Reconnecting... N/M (...)"}` line. `features.
    unbounded_connection_retries` must be false: on (its default) a dead server makes codex
    wait forever ("Reconnecting... waiting for network")."""
    url = server if isinstance(server, str) else server.url
    home = Path(codex_home)
    home.mkdir(parents=True, exist_ok=True)
    config = f"""\
model = "{model}"
model_provider = "scripted"
model_reasoning_effort = "low"
check_for_update_on_startup = false

[model_providers.scripted]
name = "scripted"
base_url = "{url}/v1"
env_key = "{ENV_KEY}"
wire_api = "responses"
supports_websockets = false
request_max_retries = {request_max_retries}
stream_max_retries = {stream_max_retries}
stream_idle_timeout_ms = {stream_idle_timeout_ms}

[features]
unbounded_connection_retries = false
# on, codex fetches the curated plugin marketplace with git from github.com at every start
plugins = false

[analytics]
enabled = false

[otel]
exporter = "none"
log_user_prompt = false

"""
    (home / "config.toml").write_text(config + extra)
    # codex makes its sandbox helper (an alias of itself) in CODEX_HOME, but never under the
    # temp folder, as a test's CODEX_HOME is: a TMPDIR of its own lets it (with bubblewrap on
    # the machine, its workspace-write sandbox needs that helper)
    temp = home.parent / f"{home.name}-tmp"
    temp.mkdir(exist_ok=True)
    return {"CODEX_HOME": str(home), ENV_KEY: api_key, "TMPDIR": str(temp)}
