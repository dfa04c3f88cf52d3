"""The egress proxy of a sandboxed job (`network = "allowlist"`), and the relay inside its box.

The sandbox has no network of its own (a new, empty network namespace). The wrapper serves this
proxy on a Unix socket in the job's log folder, which the box binds in; inside, `relay` (the
box's first process) listens on 127.0.0.1:RELAY_PORT, hands each connection to that socket, and
runs the agent with `HTTPS_PROXY` / `HTTP_PROXY` pointing at itself. The proxy reads each
request's head (core/egress), lets through only the hosts of the allowlist, and says how each
connection went: host, port, allowed or refused, bytes each way, how long it lasted.

The relay is runtime/egress_relay (kept apart: it starts before every sandboxed agent).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from delegate.core.egress import MAX_HEAD, BadRequest, allowed, parse_head
from delegate.runtime.egress_relay import RELAY_PORT, splice

CONNECT_TIMEOUT_S = 10.0
PROXY_ENV = ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy", "ALL_PROXY", "all_proxy")
# What a connection came to: host, port, allowed, sent (agent -> host), received, seconds.
OnConnection = Callable[[dict[str, Any]], None]


def proxy_env() -> dict[str, str]:
    """The agent's proxy settings inside its box: everything through the relay."""
    url = f"http://127.0.0.1:{RELAY_PORT}"
    return {**dict.fromkeys(PROXY_ENV, url), "NO_PROXY": "", "no_proxy": ""}


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    """The request head (through its blank line) and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD:
            raise BadRequest("request head too long")
        chunk = conn.recv(8192)
        if not chunk:
            raise BadRequest("the request ended before its head did")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


class EgressProxy:
    """The allowlist proxy on a Unix socket, one thread per connection."""

    def __init__(self, path: Path, hosts: Sequence[str], on_connection: OnConnection) -> None:
        self.path, self.hosts, self.on_connection = path, tuple(hosts), on_connection
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        os.chmod(path, 0o600)
        self.server.listen(64)
        self._serving: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._accept, name="egress", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # closed
            serving = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._serving.append(serving)
            serving.start()

    def _serve(self, conn: socket.socket) -> None:
        started = time.monotonic()
        said: dict[str, Any] = {"host": "?", "port": 0, "allowed": False, "sent": 0}
        said["received"] = 0
        try:
            with conn:
                try:
                    head, rest = _read_head(conn)
                    where = parse_head(head)
                except BadRequest as exc:  # answered while the connection is still open
                    said["error"] = str(exc)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                    return
                said.update(host=where.host, port=where.port)
                if not allowed(where.host, self.hosts):
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                    return
                try:
                    upstream = socket.create_connection((where.host, where.port), CONNECT_TIMEOUT_S)
                except OSError as exc:
                    said["error"] = exc.strerror or str(exc)
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    return
                said["allowed"] = True
                with upstream:
                    upstream.settimeout(None)
                    if where.tunnel:
                        conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    else:
                        upstream.sendall(where.head)
                    if rest:
                        upstream.sendall(rest)
                    sent, received = splice(conn, upstream)
                    said.update(sent=len(where.head) + len(rest) + sent, received=received)
        except OSError as exc:
            said["error"] = exc.strerror or str(exc)
        finally:
            said["duration_s"] = round(time.monotonic() - started, 3)
            with contextlib.suppress(Exception):  # a report must never end the proxy
                self.on_connection(said)

    def close(self, wait_s: float = 2.0) -> None:
        """Stop taking connections; the open ones (the agent has exited: its relay too, so
        they are ending) get `wait_s` to finish and be said."""
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        deadline = time.monotonic() + wait_s
        for serving in self._serving:
            serving.join(timeout=max(0.0, deadline - time.monotonic()))
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
