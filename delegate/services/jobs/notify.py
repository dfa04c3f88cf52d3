"""Notifications: run a command with an event's JSON on stdin (`--on-event`, `[notify]`).

Each event notifies once, whoever sees it first (a supervisor, a monitor): the right to notify is
a marker file created with O_EXCL, and the notification is audited. A notifier runs as an
argument vector (never through a shell), in its own process group, with a time limit; nothing
waits on it but a watchdog thread, so a hanging notifier delays no pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from typing import Any

from delegate.config.logsetup import get_logger
from delegate.config.profiles import NOTIFY_EVENTS_DEFAULT, notifier, read_config
from delegate.core.errors import DelegateError
from delegate.core.model import Job
from delegate.services.state import State

log = get_logger(__name__)

NOTIFY_LIMIT_S = 10.0
NOTIFIED = "notified"
_running: list[threading.Thread] = []


def notifiers(state: State, job: Job) -> list[tuple[list[str], tuple[str, ...]]]:
    """(argv, events) of the job's own `--on-event` and of delegate.toml's `[notify]`."""
    found: list[tuple[list[str], tuple[str, ...]]] = []
    if job.notify:
        found.append((list(job.notify), NOTIFY_EVENTS_DEFAULT))
    try:
        source, config = read_config(state.layout.home, state.env)
        configured = notifier(config, source)
    except DelegateError as exc:
        log.warning("not notifying from delegate.toml: %s", exc)
        configured = None
    if configured is not None:
        found.append(configured)
    return found


def _claim(state: State, job_id: str, seq: int) -> bool:
    """True for the one caller that may notify this event."""
    folder = state.audit.job_dir(job_id, create=True) / "notified"
    folder.mkdir(mode=0o700, exist_ok=True)
    try:
        os.close(os.open(folder / str(seq), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    return True


def notify(state: State, job: Job, envelope: dict[str, Any], *, actor: str) -> bool:
    """Notify about `envelope` if a notifier wants its event and no one has yet; True if so."""
    event = str(envelope.get("event"))
    wanted = [argv for argv, events in notifiers(state, job) if event in events]
    if not wanted:
        return False
    seq = int(envelope.get("seq", 0))
    if not _claim(state, job.job_id, seq):
        return False
    payload = json.dumps(envelope, ensure_ascii=False, sort_keys=True).encode() + b"\n"
    for argv in wanted:
        state.audit.append(job.job_id, NOTIFIED, seq=seq, event=event, argv=argv, actor=actor)
        thread = threading.Thread(
            target=_run, args=(state, job.job_id, argv, payload, seq), daemon=True
        )
        thread.start()
        _running.append(thread)
    return True


def _run(state: State, job_id: str, argv: list[str], payload: bytes, seq: int) -> None:
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        state.audit.append(job_id, "notify_failed", seq=seq, reason=exc.strerror or str(exc))
        return
    try:
        process.communicate(payload, timeout=NOTIFY_LIMIT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        state.audit.append(
            job_id, "notify_failed", seq=seq, reason=f"killed after {NOTIFY_LIMIT_S:g} s"
        )
        return
    except OSError:
        pass  # it did not read its stdin; its exit status says the rest
    if process.returncode != 0:
        state.audit.append(
            job_id, "notify_failed", seq=seq, reason=f"exited with status {process.returncode}"
        )


def wait_for_notifiers(limit_s: float = NOTIFY_LIMIT_S + 1) -> None:
    """Before a process exits: let running notifiers finish (each is bounded by its limit)."""
    for thread in list(_running):
        thread.join(limit_s)
    _running.clear()
