"""A state dir's warm Spark for `delegate report`
(`python -m delegate.runtime.report_server SOCKET READY_FD`; services/warm_report starts it).

- It loads PySpark and listens before it says it is ready on the inherited pipe READY_FD. When
  it cannot (no PySpark, no Java), it ends without a word and the report runs in the process
  that asked, which says in one line what is missing.
- Its Spark starts with the first report and is kept. Reports run one at a time; none sees
  what an earlier one cached (Spark's cache matches plans, not file contents, so it is cleared
  after each) or its settings for a tiny input (services/report.run_plan sets them each time).
- It ends after `$DELEGATE_REPORT_WARM_S` idle seconds; when its socket is removed or replaced
  or its state dir is gone (looked at every few seconds); on a stop request; when a client runs
  other code or another environment (the request's fingerprint); and when Spark broke.
- Its stdout and stderr (the JVM's too) are the state dir's `analytics/spark.log`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from delegate.adapters.publish_socket import (
    listen_private,
    peer_uid,
    read_request,
    socket_inode,
)
from delegate.config.settings import warm_s
from delegate.core.errors import DelegateError, guarded
from delegate.services import class_archive
from delegate.services.report import (
    check_requirements,
    plan_from_wire,
    result_to_wire,
    run_plan,
    spark_failures,
    start_spark,
)
from delegate.services.state import State
from delegate.services.warm_report import READY_BYTE, fingerprint

USAGE = "usage: python -m delegate.runtime.report_server SOCKET READY_FD"
TICK_S = 5.0  # how often an idle server looks whether it is still wanted
REQUEST_TIMEOUT_S = 10.0  # a client that sends nothing frees the server after this


class ReportServer:
    """The listening socket, the kept Spark, and what ends them."""

    def __init__(self, state: State, path: Path, java: str, idle_s: float) -> None:
        self.state = state
        self.path = path
        self.java = java
        self.idle_s = idle_s
        self.fingerprint = fingerprint(dict(state.env))
        self.spark: Any = None
        # a dead server's socket there is replaced: starting one is serialized (warm_report)
        self.listener = listen_private(str(path))
        self.inode = socket_inode(path)

    def serve(self) -> None:
        """Answer reports until it is time to end (module doc)."""
        self.listener.settimeout(min(TICK_S, max(self.idle_s, 0.1)))
        idle_until = time.monotonic() + self.idle_s
        while True:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                if time.monotonic() >= idle_until or not self.still_wanted():
                    return
                continue
            with conn:
                if not self.answer(conn):
                    return
            idle_until = time.monotonic() + self.idle_s

    def still_wanted(self) -> bool:
        return socket_inode(self.path) == self.inode and self.state.layout.home.is_dir()

    def leave(self) -> None:
        """Stop listening, and remove the socket unless another server's replaced it."""
        if self.still_wanted():
            with contextlib.suppress(OSError):
                self.path.unlink()
        self.listener.close()

    def answer(self, conn: socket.socket) -> bool:
        """Answer one request; False when the server is to end after it."""
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            request = _read_request(conn)
        except (OSError, ValueError, RecursionError) as exc:  # `[[[...`: past the parser
            _send(conn, {"ok": False, "message": f"bad request: {exc}", "exit_code": 64})
            return True
        if request.get("stop") is True:
            _send(conn, {"ok": True})
            return False
        if request.get("fingerprint") != self.fingerprint:
            self.leave()  # the client starts a server of its own code at once
            _send(conn, {"stale": True})
            return False
        text, keep_going = self.report(request.get("plan"))
        with contextlib.suppress(OSError):  # a client gone (Ctrl-C) does not need it
            conn.settimeout(None)
            conn.sendall(text.encode())
        return keep_going

    def report(self, wire_plan: Any) -> tuple[str, bool]:
        """(the answer to a plan, whether to go on serving)."""
        try:
            plan = plan_from_wire(wire_plan)
            with spark_failures(None):
                first = self.spark is None
                if first:
                    self.spark = start_spark(self.java)
                result = run_plan(self.spark, self.state, plan)
                if first:  # for the next server's start, as a report in-process does
                    class_archive.start_building(
                        class_archive.archive_for(self.java), dict(self.state.env)
                    )
            return result_to_wire(result), True
        except DelegateError as exc:
            failed = {"ok": False, "message": str(exc), "exit_code": exc.exit_code}
            return json.dumps(failed), self.spark_alive()
        except Exception as exc:
            traceback.print_exc()
            message = f"the report failed: {type(exc).__name__}: {exc}"[:300]
            return json.dumps({"ok": False, "message": message, "exit_code": 4}), False
        finally:
            self.forget_cached()

    def spark_alive(self) -> bool:
        if self.spark is None:
            return True
        try:
            return not self.spark.sparkContext._jsc.sc().isStopped()
        except Exception:
            return False

    def forget_cached(self) -> None:
        if self.spark is not None:
            with contextlib.suppress(Exception):  # a broken Spark is found by spark_alive
                self.spark.catalog.clearCache()


def _read_request(conn: socket.socket) -> dict[str, Any]:
    if peer_uid(conn) != os.getuid():
        raise ValueError("from another user")
    request = json.loads(read_request(conn))
    if not isinstance(request, dict):
        raise ValueError("not a JSON object")
    return request


def _send(conn: socket.socket, answer: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(answer).encode())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print(USAGE, file=sys.stderr)
        return 64
    path, ready_fd = Path(argv[0]), int(argv[1])

    def serve() -> int:
        state = State.open()
        server = ReportServer(state, path, check_requirements(dict(state.env)), warm_s(state.env))
        try:
            os.write(ready_fd, READY_BYTE)
            os.close(ready_fd)
            server.serve()
        finally:
            server.leave()
        return 0

    return guarded(serve)


if __name__ == "__main__":
    sys.exit(main())
