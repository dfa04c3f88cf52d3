"""The script both model servers play, and the HTTP machinery they share.

A test lists the turns the model takes, in order; each request that asks the model for its next
turn (a "turn request": what a CLI sends for its conversation) takes the next one. Requests a
CLI sends on the side (a connectivity probe, a title on a small model, a model list, token
counts) are answered by the dialect and take none. When the script has run out, every further
turn request gets `FINAL`, a short text turn, so a CLI never hangs waiting for its model.

Every request is recorded (method, path, headers, parsed JSON body) for the test to read back.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# -- the turns ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """The token figures a turn reports. `cached_tokens` is Anthropic's
    cache_read_input_tokens and OpenAI's input_tokens_details.cached_tokens; `cache_creation_tokens`
    is Anthropic's alone, `reasoning_tokens` OpenAI's alone."""

    input_tokens: int = 10
    output_tokens: int = 5
    cached_tokens: int = 0
    cache_creation_tokens: int = 0
    reasoning_tokens: int = 0


class Turn:
    """One thing the model does in answer to one turn request."""


@dataclass(frozen=True)
class Text(Turn):
    """A text reply, streamed in `pieces` deltas with `delay` seconds before each (a slow stream
    when `delay` > 0)."""

    text: str
    usage: Usage = field(default_factory=Usage)
    pieces: int = 1
    delay: float = 0.0


@dataclass(frozen=True)
class ToolCall(Turn):
    """A call of one tool. Claude: `name` is the tool (`Bash`, `mcp__delegate__bb_put`) and
    `input` its input. Codex: `name` is the function (`exec_command`, or an MCP tool's own name
    with `namespace="mcp__delegate"`) and `input` its arguments. `text`, when given, is said
    first (Claude: a text block before the tool_use block; Codex: a message item)."""

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    text: str | None = None
    namespace: str | None = None
    call_id: str | None = None
    pieces: int = 1
    delay: float = 0.0


@dataclass(frozen=True)
class ToolSearch(Turn):
    """Codex only: a `tool_search_call` (client-executed), the way the model finds the MCP tools
    codex 0.169 defers (an MCP server's tools are not in `tools`; its namespace, e.g.
    `mcp__delegate`, is named in the developer message). Codex answers with a
    `tool_search_output` item in the next request, after which the found tools can be called
    with `ToolCall(name, input, namespace=...)`."""

    query: str
    limit: int = 8
    usage: Usage = field(default_factory=Usage)
    call_id: str | None = None


@dataclass(frozen=True)
class HttpError(Turn):
    """An HTTP error status. `body` None gives the dialect's own error body for the status; a
    dict is sent as JSON, a str as it is."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Any] | str | None = None
    message: str = "scripted error"


@dataclass(frozen=True)
class UsageLimit(Turn):
    """What the dialect's CLI takes for "usage limit reached", resetting at `resets_at` (epoch
    seconds; default an hour from when it is served). Codex reads `plan_type` (its wording
    depends on it); Claude Code reads `window` (five_hour: "session limit", seven_day: "weekly
    limit"), and only when it runs on a subscription (an OAuth token), not an API key."""

    resets_at: int | None = None
    plan_type: str = "plus"
    window: str = "five_hour"


@dataclass(frozen=True)
class Drop(Turn):
    """A dropped connection: `after` SSE events of a text reply are sent, then the socket is
    closed without ending the stream. `after=0` closes before any response at all."""

    after: int = 1
    text: str = "this reply is cut off"


@dataclass(frozen=True)
class Stall(Turn):
    """Response headers, then nothing for `seconds` (a stream the CLI's idle timeout ends),
    then the socket is closed."""

    seconds: float = 5.0


FINAL = Text("done", Usage(input_tokens=1, output_tokens=1))


def text(reply: str, input_tokens: int = 10, output_tokens: int = 5, cached: int = 0) -> Text:
    return Text(reply, Usage(input_tokens, output_tokens, cached_tokens=cached))


def slow(reply: str, delay: float = 0.2, pieces: int = 5) -> Text:
    return Text(reply, pieces=pieces, delay=delay)


def rate_limited(retry_after: float | None = 0, **headers: str) -> HttpError:
    """429; `retry-after` in seconds when given."""
    extra = dict(headers)
    if retry_after is not None:
        extra["retry-after"] = f"{retry_after:g}"
    return HttpError(429, extra, message="rate limited (scripted)")


def unauthorized(should_retry: bool | None = None) -> HttpError:
    """401; with `should_retry` False it carries `x-should-retry: false`."""
    extra = {} if should_retry is None else {"x-should-retry": str(should_retry).lower()}
    return HttpError(401, extra, message="invalid x-api-key (scripted)")


def server_error(status: int = 500) -> HttpError:
    return HttpError(status, message="internal server error (scripted)")


# -- what the server saw -------------------------------------------------------------------------


@dataclass
class Request:
    """One request the server received. `turn` is the scripted turn it was answered with (FINAL
    once the script ran out), None for a side request."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    at: float
    turn: Turn | None = None

    @property
    def route(self) -> str:
        """The path without its query: `/v1/messages` for `/v1/messages?beta=true`."""
        return urlsplit(self.path).path

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def dump(self) -> str:
        """The whole request as text, to search (e.g. for a secret that must not be there)."""
        heads = "\n".join(f"{k}: {v}" for k, v in self.headers.items())
        return f"{self.method} {self.path}\n{heads}\n\n{self.raw.decode('utf-8', 'replace')}"


# -- the dialect each server speaks --------------------------------------------------------------


class Reply:
    """What a dialect answers: `status`, `headers`, and either a JSON `body` or a list of SSE
    `events` (name, data) with `delays` (seconds before each)."""

    def __init__(
        self,
        status: int = 200,
        *,
        body: Any = None,
        events: Iterable[tuple[str, Mapping[str, Any]]] | None = None,
        delays: Iterable[float] | None = None,
        headers: Mapping[str, str] | None = None,
        cut_after: int | None = None,
        stall: float = 0.0,
    ) -> None:
        self.status = status
        self.body = body
        self.events = list(events) if events is not None else None
        self.delays = list(delays or [])
        self.headers = dict(headers or {})
        self.cut_after = cut_after
        self.stall = stall


class Dialect:
    """How one API is spoken. A subclass says which requests are turn requests and renders each
    kind of turn."""

    def is_turn_request(self, request: Request) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def side_reply(self, request: Request) -> Reply:  # pragma: no cover - abstract
        raise NotImplementedError

    def reply(self, turn: Turn, request: Request, number: int) -> Reply:  # pragma: no cover
        raise NotImplementedError

    # What each dialect renders its own way, for the turns that go wrong (`failure`).
    def error_body(self, status: int, message: str) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def usage_limit(self, turn: UsageLimit) -> Reply:  # pragma: no cover
        raise NotImplementedError

    def text_events(self, turn: Text, model: str) -> list[tuple[str, Mapping[str, Any]]]:
        raise NotImplementedError  # pragma: no cover

    def failure(self, turn: Turn, model: str) -> Reply | None:
        """The reply to a turn that goes wrong (an HTTP error, a usage limit, a stalled or
        dropped stream), the same shape in every dialect; None for the others."""
        if isinstance(turn, HttpError):
            body = (
                turn.body if turn.body is not None else self.error_body(turn.status, turn.message)
            )
            return Reply(turn.status, body=body, headers=turn.headers)
        if isinstance(turn, UsageLimit):
            return self.usage_limit(turn)
        if isinstance(turn, Stall):
            return Reply(200, stall=turn.seconds)
        if isinstance(turn, Drop):
            events = self.text_events(Text(turn.text, pieces=3), model)
            return Reply(200, events=events, cut_after=turn.after)
        return None


def split_text(value: str, pieces: int) -> list[str]:
    """`value` in `pieces` non-empty parts (fewer when it is shorter), joined back unchanged."""
    pieces = max(1, min(pieces, len(value) or 1))
    size = -(-len(value) // pieces) if value else 0
    return [value[i : i + size] for i in range(0, len(value), size)] if value else [""]


def delays_for(
    events: list[tuple[str, Mapping[str, Any]]], delay: float, delta: str
) -> list[float]:
    """`delay` before each event whose data type is `delta`, 0 before the others."""
    return [delay if data.get("type") == delta else 0.0 for _, data in events]


# -- the server ----------------------------------------------------------------------------------


def _handle(handler: BaseHTTPRequestHandler) -> None:
    """One connection: its requests, one after another (HTTP/1.1 keep-alive)."""
    owner: ScriptedServer = handler.server.owner  # type: ignore[attr-defined]
    owner._opened(handler.connection)
    try:
        BaseHTTPRequestHandler.handle(handler)
    finally:
        owner._closed(handler.connection)


def _dispatch(handler: BaseHTTPRequestHandler) -> None:
    handler.server.owner._serve(handler)  # type: ignore[attr-defined]


def _quiet(self: object, *args: Any) -> None:
    """No access log, no traceback of a client that went away, on stderr."""


# The stdlib reads these by name; made with type() so that dead-code checks see them set.
_Handler = type(
    "_Handler",
    (BaseHTTPRequestHandler,),
    {
        "protocol_version": "HTTP/1.1",
        "handle": _handle,
        "log_message": _quiet,
        **{f"do_{verb}": _dispatch for verb in ("GET", "HEAD", "POST", "PUT", "DELETE")},
    },
)
_Server = type(
    "_Server",
    (ThreadingHTTPServer,),
    {"daemon_threads": True, "allow_reuse_address": True, "handle_error": _quiet},
)


class ScriptedServer:
    """A model server on 127.0.0.1 (an ephemeral port) playing `turns` in order, then FINAL.
    Start it with `start()` or `with`; `url` is its root (http://127.0.0.1:PORT)."""

    dialect: Dialect

    def __init__(self, turns: Iterable[Turn] = (), *, final: Turn = FINAL) -> None:
        self._lock = threading.Lock()
        self._script: list[Turn] = list(turns)
        self._final = final
        self._requests: list[Request] = []
        self._served = 0
        self._http: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    # life

    def start(self) -> ScriptedServer:
        self._http = _Server(("127.0.0.1", 0), _Handler)
        self._http.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every connection still open (a CLI sees the server die)."""
        if self._http is None:
            return
        self._http.shutdown()
        self._http.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._http = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._http is not None, "the server is not started"
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # the script

    def script(self, *turns: Turn) -> ScriptedServer:
        """Replace the turns still to be played."""
        with self._lock:
            self._script = list(turns)
        return self

    def add(self, *turns: Turn) -> ScriptedServer:
        with self._lock:
            self._script.extend(turns)
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def _next_turn(self) -> tuple[Turn, int]:
        with self._lock:
            turn = self._script.pop(0) if self._script else self._final
            self._served += 1
            return turn, self._served

    # what was seen

    @property
    def requests(self) -> list[Request]:
        with self._lock:
            return list(self._requests)

    @property
    def turn_requests(self) -> list[Request]:
        """The requests that took a turn of the script (or FINAL), in order."""
        return [r for r in self.requests if r.turn is not None]

    def dump(self) -> str:
        """Every request seen, as text."""
        return "\n\n".join(r.dump() for r in self.requests)

    def wait_for_requests(self, count: int, timeout: float = 10.0) -> list[Request]:
        deadline = time.monotonic() + timeout
        while len(self.turn_requests) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.turn_requests)} turn requests, not {count}")
            time.sleep(0.01)
        return self.turn_requests

    # serving

    def _read(self, handler: BaseHTTPRequestHandler) -> Request:
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in handler.headers.items()}
        return Request(handler.command, handler.path, headers, raw, body, time.time())

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        request = self._read(handler)
        if self.dialect.is_turn_request(request):
            turn, number = self._next_turn()
            request.turn = turn
            reply = self.dialect.reply(turn, request, number)
        else:
            reply = self.dialect.side_reply(request)
        with self._lock:
            self._requests.append(request)
        with contextlib.suppress(OSError):  # the client went away: its next read ends it
            _write(handler, reply)


def _write(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
    if reply.cut_after == 0:  # a drop before any response: the client sees the socket close
        handler.connection.shutdown(socket.SHUT_RDWR)
        return
    handler.send_response(reply.status)
    for name, value in reply.headers.items():
        handler.send_header(name, value)
    if reply.events is None and not reply.stall:
        payload = reply.body if isinstance(reply.body, bytes) else _encode(reply.body)
        if reply.body is not None and not isinstance(reply.body, str | bytes):
            handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(payload)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(payload)
        return
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()
    if reply.stall:
        time.sleep(reply.stall)
        handler.connection.shutdown(socket.SHUT_RDWR)
        return
    for index, (event, delay) in enumerate(_with_delays(reply)):
        if reply.cut_after is not None and index >= reply.cut_after:
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if delay:
            time.sleep(delay)
        name, data = event
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        handler.wfile.flush()
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


def _with_delays(reply: Reply) -> Iterator[tuple[tuple[str, Mapping[str, Any]], float]]:
    events = reply.events or []
    delays = reply.delays + [0.0] * (len(events) - len(reply.delays))
    return zip(events, delays, strict=True)


def _encode(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


def dead_url() -> str:
    """The root URL of a port on 127.0.0.1 that nothing listens on (a dead server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
