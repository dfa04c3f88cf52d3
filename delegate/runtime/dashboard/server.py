"""The dashboard's web application (Starlette) and its server (uvicorn).

The only module that imports the `web` extra. Every request passes the guard first (Host
header, then the token's cookie); data routes call the same services as the CLI, in a worker
thread, and `/events` streams the live table's changes as server-sent events.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlencode

import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from delegate.adapters.bus import open_bus
from delegate.core.errors import DelegateError, InvalidJobId, JobNotFound
from delegate.core.model import validate_job_id
from delegate.runtime.dashboard import snapshot
from delegate.runtime.dashboard.guard import COOKIE, CSRF_HEADER, Guard
from delegate.runtime.dashboard.live import LiveTable
from delegate.services.jobs.host_approvals import approve
from delegate.services.jobs.retry import retry
from delegate.services.jobs.submit import cancel
from delegate.services.session import send
from delegate.services.state import State

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
SEND_LIMIT = 4096  # characters one Send may type into a pane
REASON_LIMIT = 1000  # characters of a Deny's reason (the agent is told it)
REQUEST_ID_LIMIT = 64


class Options(NamedTuple):
    bind: str = "127.0.0.1"
    port: int = 8765
    read_only: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    report_dir: Path | None = None  # None: the state dir's reports folder
    recent: int = 100  # ended jobs listed below the open ones


def _forbidden() -> Response:
    return PlainTextResponse(
        "403 forbidden: open the dashboard with the URL (and token) it printed at start\n",
        status_code=403,
    )


# Every answer: no page of any other origin may frame it, and no script runs but the page's own
# file (no inline script, nothing from elsewhere: text an agent wrote cannot become script).
STRICT_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self';"
    " img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
# The report page: its own inline style and charts, and no script at all.
REPORT_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none';"
    " form-action 'none'; frame-ancestors 'none'; sandbox"
)
CSP = b"content-security-policy"
ASSET_MAX_AGE_S = 86400  # asset URLs carry their content's version: a change is a new URL


class GuardMiddleware:
    """Host header, token and cookie, CSRF and read-only checks before any route runs."""

    def __init__(self, app: ASGIApp, guard: Guard, *, secure: bool) -> None:
        self.app = app
        self.guard = guard
        self.secure = secure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def unframed(message: Any) -> None:
            # no page of any other origin (an agent's dev server on localhost:*) may frame
            # this one and have a person click Approve or Retry through it
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == CSP for name, _ in headers):  # else a route's own
                    headers.append((CSP, STRICT_POLICY.encode()))
                headers.append((b"x-frame-options", b"DENY"))
                message = {**message, "headers": headers}
            await send(message)

        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, unframed)
            return
        await self.app(scope, receive, unframed)

    def _refusal(self, request: Request) -> Response | None:
        guard = self.guard
        arrived_at = (request.scope.get("server") or (None,))[0]  # this end's address
        if not guard.host_ok(request.headers.get("host"), arrived_at):
            return PlainTextResponse("400 unknown Host header\n", status_code=400)
        if "token" in request.query_params:
            return self._enter(request)
        if not guard.cookie_ok(request.cookies.get(cookie_name(request))):
            return _forbidden()
        if request.method == "GET":
            return None
        if guard.read_only:
            return PlainTextResponse("403 the dashboard is read-only\n", status_code=403)
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.headers['host']}":
            return PlainTextResponse("403 cross-origin request\n", status_code=403)
        if not guard.csrf_ok(request.headers.get(CSRF_HEADER)):
            return PlainTextResponse("403 missing or wrong CSRF header\n", status_code=403)
        return None

    def _enter(self, request: Request) -> Response:
        """A visit with the token: set the cookie and send the browser to the URL without it."""
        if request.method != "GET" or not self.guard.token_ok(request.query_params.get("token")):
            return _forbidden()
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            cookie_name(request),
            self.guard.session,
            httponly=True,
            samesite="strict",
            secure=self.secure,
        )
        return response


def cookie_name(request: Request) -> str:
    """The session cookie of this dashboard: named for its port, since a browser keeps cookies
    by host, not port (a second dashboard on the same host would overwrite the first's)."""
    server = request.scope.get("server") or ("", 0)  # the socket's own port, not the Host's
    return f"{COOKIE}_{server[1]}"


def _job_id(request: Request) -> str:
    return validate_job_id(request.path_params["job_id"])


async def _body(request: Request) -> dict[str, Any]:
    """A POST's JSON object; {} for none or anything else."""
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _text_or_none(body: dict[str, Any], name: str, limit: int) -> tuple[str | None, bool]:
    """`body[name]` if it is absent or empty (None), or a string of at most `limit` characters;
    the bool says whether it was acceptable."""
    value = body.get(name)
    if value is None or value == "":
        return None, True
    return (value, True) if isinstance(value, str) and len(value) <= limit else (None, False)


def _error(exc: DelegateError) -> JSONResponse:
    status = 404 if isinstance(exc, JobNotFound) else 400 if isinstance(exc, InvalidJobId) else 409
    return JSONResponse({"error": str(exc)}, status_code=status)


class Dashboard:
    """The routes, over one opened state and its live table."""

    def __init__(self, state: State, live: LiveTable, guard: Guard, options: Options) -> None:
        self.state = state
        self.live = live
        self.guard = guard
        self.options = options
        self.report_dir = options.report_dir or state.layout.reports
        # The table as it is now is put in the page itself: the first paint needs no API round
        # trip (issue 21). The style and the script are files of their own (the policy allows
        # no inline script), at URLs that name their content: a browser fetches them once.
        self.version = hashlib.sha256(
            b"".join((STATIC / name).read_bytes() for name in sorted(ASSETS))
        ).hexdigest()[:16]
        page = (
            (STATIC / "index.html")
            .read_text()
            .replace("{{CSRF}}", guard.csrf)
            .replace("{{READ_ONLY}}", "true" if options.read_only else "false")
            .replace("{{VERSION}}", self.version)
        )
        self.page_head, self.page_tail = page.split("{{TABLE}}", 1)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.index),
            Route("/static/{name}", self.asset),
            Route("/api/jobs", self.jobs),
            Route("/api/jobs/{job_id}", self.job),
            Route("/api/jobs/{job_id}/cancel", self.cancel, methods=["POST"]),
            Route("/api/jobs/{job_id}/send", self.send, methods=["POST"]),
            Route("/api/jobs/{job_id}/approve", self.approve, methods=["POST"]),
            Route("/api/jobs/{job_id}/deny", self.deny, methods=["POST"]),
            Route("/api/jobs/{job_id}/retry", self.retry, methods=["POST"]),
            Route("/api/hosts", self.hosts),
            Route("/api/report", self.report_info),
            Route("/report", self.report),
            Route("/events", self.events),
        ]

    async def index(self, request: Request) -> Response:
        table = _script_json(self.live.snapshot())
        page = self.page_head + table + self.page_tail
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("404\n", status_code=404)
        cache = f"private, max-age={ASSET_MAX_AGE_S}, immutable"
        if request.query_params.get("v") != self.version:
            cache = "no-store"  # an old page's URL: whatever the file is now, not kept
        return FileResponse(
            STATIC / name, media_type=ASSETS[name], headers={"cache-control": cache}
        )

    async def jobs(self, request: Request) -> Response:
        return JSONResponse(self.live.snapshot())

    async def job(self, request: Request) -> Response:
        try:
            detail = await run_in_threadpool(snapshot.job_detail, self.state, _job_id(request))
        except DelegateError as exc:
            return _error(exc)
        return JSONResponse(detail)

    async def hosts(self, request: Request) -> Response:
        try:
            rows = await run_in_threadpool(snapshot.hosts, self.state)
        except DelegateError as exc:
            return JSONResponse({"hosts": [], "note": str(exc)})
        return JSONResponse({"hosts": rows, "note": None})

    async def report_info(self, request: Request) -> Response:
        return JSONResponse(snapshot.report_info(self.report_dir))

    async def report(self, request: Request) -> Response:
        page = snapshot.latest_report(self.report_dir)
        if page is None:
            return PlainTextResponse("no report yet: run `delegate report --format html`\n", 404)
        try:  # O_NOFOLLOW: a link swapped in since it was chosen is not followed
            fd = os.open(page, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as handle:
                content = handle.read()
        except OSError:
            return PlainTextResponse("the report changed while it was read; ask again\n", 409)
        headers = {"cache-control": "no-store", "content-security-policy": REPORT_POLICY}
        return HTMLResponse(content, headers=headers)

    async def cancel(self, request: Request) -> Response:
        try:
            done = await run_in_threadpool(cancel, self.state, _job_id(request))
        except DelegateError as exc:
            return _error(exc)
        await run_in_threadpool(self.live.refresh)
        return JSONResponse({"state": done.job.status.value, "note": done.session_note})

    async def send(self, request: Request) -> Response:
        text = (await _body(request)).get("text")
        if not isinstance(text, str) or not text or len(text) > SEND_LIMIT:
            return JSONResponse({"error": f"send needs text (1-{SEND_LIMIT} chars)"}, 400)
        try:
            job = await run_in_threadpool(self.state.registry.get, _job_id(request))
            if not job.session:
                return JSONResponse({"error": f"job {job.job_id} has no session"}, 409)
            await run_in_threadpool(send, self.state, job.session, text)
        except DelegateError as exc:
            return _error(exc)
        return JSONResponse({"sent": True})

    async def approve(self, request: Request) -> Response:
        return await self._decide(request, deny=False)

    async def deny(self, request: Request) -> Response:
        return await self._decide(request, deny=True)

    async def _decide(self, request: Request, *, deny: bool) -> Response:
        """Answer the job's waiting permission request (`request_id`, else its oldest) as
        `delegate approve [--deny --reason]` does: the same service, this machine's user as
        the maker. Returns once the job's wrapper (or its agent host) took the decision."""
        body = await _body(request)
        request_id, id_ok = _text_or_none(body, "request_id", REQUEST_ID_LIMIT)
        reason, reason_ok = _text_or_none(body, "reason", REASON_LIMIT)
        if not (id_ok and reason_ok):
            limits = f"request_id up to {REQUEST_ID_LIMIT}, reason up to {REASON_LIMIT} chars"
            return JSONResponse({"error": f"bad decision: {limits}"}, 400)
        try:
            decide = partial(approve, deny=deny, reason=reason, request_id=request_id)
            answered = await run_in_threadpool(decide, self.state, _job_id(request))
        except DelegateError as exc:
            return _error(exc)
        await run_in_threadpool(self.live.refresh)
        return JSONResponse({**answered._asdict(), "behavior": "deny" if deny else "allow"})

    async def retry(self, request: Request) -> Response:
        """A new attempt of an ended job, as `delegate retry JOB` makes it (same prompt)."""
        try:
            result = await run_in_threadpool(retry, self.state, _job_id(request))
        except DelegateError as exc:
            return _error(exc)
        await run_in_threadpool(self.live.refresh)
        job = result.job
        return JSONResponse(
            {
                "job_id": job.job_id,
                "attempt": job.attempt,
                "retry_of": job.retry_of,
                "state": job.status.value,
            }
        )

    async def events(self, request: Request) -> Response:
        after = request.query_params.get("after", "")
        shown = int(after) if after.isdigit() else None
        return EventSourceResponse(self._stream(shown), ping=15, send_timeout=30)

    async def _stream(self, shown: int | None) -> AsyncIterator[dict[str, Any]]:
        """The table's changes; the whole table first unless the page has version `shown`
        (the one put in the page) and nothing changed since."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        def listener(change: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, change)

        first = self.live.listen(listener)
        try:
            if first["version"] != shown:
                yield {"event": "table", "data": json.dumps(first)}
            while True:
                change = await queue.get()
                yield {"event": "table", "data": json.dumps(change)}
        finally:
            self.live.unlisten(listener)


def _script_json(value: Any) -> str:
    """`value` as JSON to put inside a <script> element: no `<` can end it early."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


def build_app(state: State, live: LiveTable, guard: Guard, options: Options) -> ASGIApp:
    dashboard = Dashboard(state, live, guard, options)
    app = Starlette(routes=dashboard.routes())
    return GuardMiddleware(app, guard, secure=options.tls_cert is not None)


def _listen(bind: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as exc:
        sock.close()
        raise DelegateError(f"cannot listen on {bind}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def url_for(options: Options, port: int, token: str) -> str:
    scheme = "https" if options.tls_cert else "http"
    host = f"[{options.bind}]" if ":" in options.bind else options.bind
    return f"{scheme}://{host}:{port}/?token={token}"


def serve(state: State, options: Options) -> int:
    """Run the dashboard until SIGINT or SIGTERM. The token is made here, in this process,
    and printed once inside the URL on stdout; it is never an argument nor logged."""
    token = Guard.new_token()
    guard = Guard(token, bind=options.bind, read_only=options.read_only)
    sock = _listen(options.bind, options.port)
    bus = open_bus(state.default_bus_url(), env=state.env)
    live = LiveTable(state, bus, recent=options.recent)
    live.start()
    config = uvicorn.Config(
        build_app(state, live, guard, options),
        access_log=False,  # request lines would carry the token of a first visit
        log_level="warning",
        lifespan="off",
        server_header=False,
        timeout_graceful_shutdown=2,
        ssl_certfile=options.tls_cert,
        ssl_keyfile=options.tls_key,
    )
    print(url_for(options, sock.getsockname()[1], token), flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        live.stop()
        bus.close()
        sock.close()
    return 0
