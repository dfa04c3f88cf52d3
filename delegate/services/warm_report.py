"""Asking this state dir's warm report server (runtime/report_server) for a report.

A report's time is mostly Spark starting: a JVM, ten thousand classes, a SparkContext. A second
report a minute later would pay all of it again to read ten new logs. So the first report starts
a server that keeps its SparkSession and waits, idle, `$DELEGATE_REPORT_WARM_S` seconds (300 by
default) for the next one; the report itself then runs in that server, which is why the first
report costs little more than before and the next ones much less.

One server per state dir, on a Unix socket in its `analytics/` folder (mode 0600 in a 0700
folder; a private temp folder when that path is too long). Starting one is serialized by a lock
file, so two reports at once start one server, which runs them one after the other. The server
tells its starter it listens through an inherited pipe, not by being polled.

Request:  {"fingerprint": str, "plan": {...}} or {"stop": true} (then EOF)
Answer:   {"ok": true, "result": {...}}, {"ok": false, "message": str, "exit_code": int}, or
          {"stale": true}: the server runs other code or another environment than the client
          (`fingerprint`); it has left its socket and ends, and the client starts a new one.

Nothing here loads PySpark: the client only looks that it is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from filelock import FileLock

from delegate.adapters.publish_socket import exchange, socket_path
from delegate.services.state import State

SERVER_MODULE = "delegate.runtime.report_server"
READY_BYTE = b"r"
SOCKET_FILE = "report.sock"
START_LOCK = "report-server.lock"
CONNECT_TIMEOUT_S = 5.0
PACKAGE = Path(__file__).resolve().parent.parent
# What the server's Spark and its code depend on (besides the code itself, see fingerprint).
_ENV_PREFIXES = ("JAVA", "SPARK", "PYSPARK", "HADOOP", "PYTHON", "LD_")
_ENV_NAMES = ("PATH", "TZ", "DELEGATE_HOME", "DELEGATE_CONFIG", "XDG_STATE_HOME", "HOME")


def fingerprint(env: dict[str, str]) -> str:
    """What a server must share with a client to answer it: the Python it runs, the newest
    file of the delegate package (an upgraded or edited toolkit gets a new server), and the
    environment Spark runs in."""
    newest = max(
        (entry.stat().st_mtime_ns for entry in _python_files(PACKAGE)),
        default=0,
    )
    settings = sorted(
        (name, value)
        for name, value in env.items()
        if name.startswith(_ENV_PREFIXES) or name in _ENV_NAMES
    )
    text = json.dumps([sys.executable, str(PACKAGE), newest, settings])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _python_files(folder: Path) -> list[os.DirEntry[str]]:
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".py"):
                found.append(entry)
            elif entry.is_dir() and entry.name != "__pycache__":
                found.extend(_python_files(Path(entry.path)))
    return found


def server_socket(home: Path) -> Path | None:
    """Where the server of the state dir `home` listens (None when no safe place exists)."""
    key = "report-" + hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return socket_path(home / "analytics", key, SOCKET_FILE)


def report(state: State, plan: dict[str, Any], log: Path) -> dict[str, Any] | None:
    """The warm server's answer to `plan` (starting a server when none answers); None when no
    server could be had, and the report is to run in this process."""
    path = server_socket(state.layout.home)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    request = {"fingerprint": fingerprint(dict(state.env)), "plan": plan}
    answer = ask(path, request)
    if answer is None or answer.get("stale"):
        with FileLock(str(state.layout.home / "analytics" / START_LOCK)):
            answer = ask(path, request)  # another report may have started one meanwhile
            if answer is None or answer.get("stale"):
                if not start_server(state, path, log):
                    return None
                answer = ask(path, request)
    return None if answer is None or answer.get("stale") else answer


def ask(path: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    """The server's answer, or None when none listens at `path` or it went away before
    answering (a report can be asked again: it writes the same files)."""
    body = json.dumps(request).encode()
    # no limit on the answer's time: a report takes as long as it takes
    answer, _ = exchange(str(path), body, CONNECT_TIMEOUT_S, reply_timeout_s=None)
    return answer


def start_server(state: State, path: Path, log: Path) -> bool:
    """Start this state dir's server listening at `path`, its output to `log`; True once it
    said it listens (an end of file first: it failed, and its reason is in `log`)."""
    read_end, write_end = os.pipe()
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # appended to: an in-process report (`--master`, `--verbose`) may truncate it meanwhile
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    try:
        subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE, str(path), str(write_end)],
            env=dict(state.env),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            pass_fds=(write_end,),
            start_new_session=True,  # outlives the report that started it, and its terminal
        )
    except OSError:
        os.close(read_end)
        return False
    finally:
        os.close(write_end)
        os.close(out)
    with os.fdopen(read_end, "rb") as ready:
        return ready.read(1) == READY_BYTE


def stop(home: Path) -> bool:
    """Ask the server of the state dir `home` to end; True when one was there and said so."""
    path = server_socket(home)
    if path is None:
        return False
    answer = ask(path, {"stop": True})
    return bool(answer and answer.get("ok"))
