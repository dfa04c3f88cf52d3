"""The audit trail is never behind the status: every line is on disk before what follows it.

Two checks: the order of durable writes, replayed as a power cut after every single one of them;
and SIGKILL at random moments of real publishing processes.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from delegate.adapters import audit as audit_module
from delegate.adapters.audit import parse_line
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State

from .helpers import cli_env


def _invariant(status: dict | None, lines: list[dict]) -> None:
    """status.json never says more than the audit lines on disk before it."""
    if status is None:
        return
    changes = [e["status"] for e in lines if e.get("kind") in ("registered", "status_changed")]
    assert status["status"] in changes, (status, changes)
    published = [e["seq"] for e in lines if e.get("kind") == "published"]
    assert status["last_seq"] <= max(published, default=0), (status, published)


def test_every_power_cut_leaves_the_status_behind_the_audit(home: Path, monkeypatch):
    writes: list[tuple[str, Path, bytes]] = []
    real_append, real_write = audit_module.append_line, audit_module.atomic_write

    def append(path: Path, line: bytes, **kw) -> None:
        real_append(path, line, **kw)
        writes.append(("append", path, line))  # returned: on disk

    def write(path: Path, data: bytes, **kw) -> None:
        real_write(path, data, **kw)
        writes.append(("replace", path, data))

    monkeypatch.setattr(audit_module, "append_line", append)
    monkeypatch.setattr(audit_module, "atomic_write", write)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job, _ = state.registry.register()
    for event in ("started", "progress", "progress", "completed"):
        publish_event(state, job.job_id, event, detail=event)
    assert any(kind == "replace" and p.name == "status.json" for kind, p, _ in writes)
    # the power goes after write k, for every k: what is on disk must agree
    for cut in range(len(writes) + 1):
        status = None
        lines: list[dict] = []
        for kind, path, data in writes[:cut]:
            if kind == "replace" and path.name == "status.json":
                status = json.loads(data)
            elif kind == "append":
                entry = parse_line(data if data.endswith(b"\n") else data + b"\n")
                assert entry is not None
                lines.append(entry)
        _invariant(status, lines)


PUBLISHER = """
import sys
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State
state = State.open()
job = sys.argv[1]
publish_event(state, job, "started")
for i in range(200):
    publish_event(state, job, "progress", detail=str(i))
publish_event(state, job, "completed")
"""


@pytest.mark.parametrize("round_", range(30))
def test_sigkill_while_publishing_never_puts_the_status_ahead(home: Path, round_: int):
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job, _ = state.registry.register()
    proc = subprocess.Popen([sys.executable, "-c", PUBLISHER, job.job_id], env=cli_env(home))
    time.sleep(random.Random(round_).uniform(0.05, 0.6))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines = state.audit.read_events(job.job_id)
    status = state.audit.read_status(job.job_id)
    _invariant(status, lines)
    state.registry.get(job.job_id)  # the record still parses (it may be ahead of status.json)
