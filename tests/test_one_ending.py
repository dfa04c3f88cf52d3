"""One place where a job ends: services/jobs/finish.py.

The scan proves the door is single (only finish.py calls the registry's terminal write, found by
attribute name on any object, so renaming a variable cannot hide a call), and that the scan can
fail. The behaviour tests use a real state directory: ending twice records once, a cancelled job
stays cancelled whatever arrives late, and a session stop moves the session row as before.
"""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path

import pytest

import delegate
from delegate.adapters.sessions_db import SessionInventory
from delegate.core.errors import IllegalTransition, PublishRefused
from delegate.core.model import EventType, JobState, SessionState
from delegate.core.policy import ApplyEvent
from delegate.core.protocol import build_envelope, sign
from delegate.services.jobs.finish import AuditLine, SessionMove, end_by_event, end_job
from delegate.services.jobs.notify import wait_for_notifiers
from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.submit import cancel
from delegate.services.reconciler import Reconciler
from delegate.services.session import stop
from delegate.services.state import State

from .helpers import retry_until
from .test_monitor import open_state

PACKAGE = Path(delegate.__file__).parent
TERMINAL_WRITE = "record_end"  # Registry.record_end: the registry's one terminal write
ALLOWED = {Path("services/jobs/finish.py")}


def terminal_writers(package: Path) -> list[str]:
    """`path:line` of every use of the terminal write outside finish.py: a call or reference
    `anything.record_end`, or `getattr(anything, "record_end")`."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            named = isinstance(node, ast.Attribute) and node.attr == TERMINAL_WRITE
            looked_up = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == TERMINAL_WRITE
            )
            if named or looked_up:
                found.append(f"{relative}:{node.lineno}")
    return found


def test_only_finish_calls_the_terminal_write():
    assert terminal_writers(PACKAGE) == []
    finish = (PACKAGE / "services/jobs/finish.py").read_text()
    assert f"registry.{TERMINAL_WRITE}(" in finish  # the scan looks for the name in use


@pytest.mark.parametrize(
    "sneaky",
    [
        "def stop(books, job_id):\n    books.record_end(job_id, JobState.CANCELLED)\n",
        "def stop(state, job_id):\n    door = state.registry.record_end\n    door(job_id)\n",
        "def stop(r, job_id):\n    getattr(r, 'record_end')(job_id)\n",
    ],
    ids=["renamed-variable", "bound-method", "getattr"],
)
def test_the_scan_reports_a_second_door(tmp_path: Path, sneaky: str):
    copy = tmp_path / "delegate"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "services" / "session.py"
    target.write_text(target.read_text() + "\n\n" + sneaky)
    lines = len(target.read_text().splitlines())
    found = terminal_writers(copy)
    assert found and all(f.startswith("services/session.py:") for f in found)
    assert all(lines - 3 <= int(f.rsplit(":", 1)[1]) <= lines for f in found)


# --- behaviour ------------------------------------------------------------------------


def _running(state: State, **fields: object) -> str:
    job, _ = state.registry.register(agent="shell", **fields)  # type: ignore[arg-type]
    state.registry.apply_event(job.job_id, EventType.STARTED)
    return job.job_id


def _notifier(tmp_path: Path) -> tuple[list[str], Path]:
    heard = tmp_path / "heard"
    script = tmp_path / "notify.py"
    script.write_text(
        "import sys\n"
        f"with open({str(heard)!r}, 'a') as out:\n"
        "    out.write(sys.stdin.read().strip() + '\\n')\n"
    )
    return [sys.executable, str(script)], heard


def _endings(state: State, job_id: str) -> list[str]:
    """The terminal states the job's status_changed lines record."""
    changes = state.audit.read_events(job_id, kind="status_changed")
    return [c["status"] for c in changes if JobState(c["status"]).terminal]


def _envelope(state: State, job_id: str, seq: int, event: str) -> dict[str, object]:
    token = state.registry.get(job_id).auth_token
    return sign(build_envelope(job_id=job_id, seq=seq, event=event, detail=""), token)


def test_ending_twice_writes_one_audit_line_and_one_notification(home: Path, tmp_path: Path):
    state = open_state(home)
    argv, heard = _notifier(tmp_path)
    job_id = _running(state)
    state.registry.update(job_id, notify=argv)
    envelope = _envelope(state, job_id, 2, "completed")
    why = AuditLine("recorded_without_bus", {"event": "completed", "reason": "test"})

    first = end_by_event(
        state, job_id, EventType.COMPLETED, envelope=envelope, actor="watch", because=why
    )
    again = end_by_event(
        state, job_id, EventType.COMPLETED, envelope=envelope, actor="monitor", because=why
    )
    wait_for_notifiers()

    assert first.changed and first.job.status is JobState.COMPLETED
    assert not again.changed and again.job == first.job
    ended = _endings(state, job_id)
    assert ended == ["completed"]
    assert len(state.audit.read_events(job_id, kind="recorded_without_bus")) == 1
    notified = state.audit.read_events(job_id, kind="notified")
    assert [(n["event"], n["actor"]) for n in notified] == [("completed", "watch")]
    retry_until(lambda: heard.exists() and heard.read_text().count("\n") == 1)
    assert '"event": "completed"' in heard.read_text()
    # the reason is on record before the status it explains
    kinds = [e["kind"] for e in state.audit.read_events(job_id)]
    assert kinds.index("recorded_without_bus") < len(kinds) - 1 - kinds[::-1].index(
        "status_changed"
    )


def test_an_ending_that_did_not_land_writes_no_reason_and_moves_no_session(home: Path):
    state = open_state(home)
    job_id = _running(state, session="dlg-x")
    SessionInventory(state.layout.sessions_db).record_start(
        "dlg-x", job_id=job_id, agent="shell", workdir=None, pane_pid=None
    )
    end_job(state, job_id, JobState.ERROR, reason="wall_timeout")
    late = end_job(
        state,
        job_id,
        JobState.CANCELLED,
        because=AuditLine("reconciled", {"action": "fail_job"}),
        session=SessionMove("dlg-x", SessionState.STOPPED, "too late"),
    )
    assert not late.changed and late.job.error == "wall_timeout"
    assert state.audit.read_events(job_id, kind="reconciled") == []
    row = SessionInventory(state.layout.sessions_db).get("dlg-x")
    assert row is not None and row.state is SessionState.RUNNING


def test_a_cancelled_job_is_not_completed_by_a_late_event(home: Path):
    state = open_state(home)
    job_id = _running(state)
    cancelled = cancel(state, job_id).job
    assert cancelled.status is JobState.CANCELLED

    # whichever way the `completed` arrives: its own publish, a subscriber, a monitor pass
    with pytest.raises(PublishRefused):
        publish_event(state, job_id, "completed")
    late = end_by_event(state, job_id, EventType.COMPLETED, actor="watch")
    assert not late.changed
    action = ApplyEvent(
        "apply_event", job_id, "completed received", {}, event="completed", seq=2, detail=""
    )
    assert Reconciler(state).execute([action]) == []
    with pytest.raises(ValueError):
        state.registry.apply_event(job_id, EventType.COMPLETED)
    with pytest.raises(IllegalTransition):
        cancel(state, job_id)  # nor cancelled a second time

    job = state.registry.get(job_id)
    assert job.status is JobState.CANCELLED and job == cancelled
    ended = _endings(state, job_id)
    assert ended == ["cancelled"]
    assert state.audit.read_events(job_id, kind="reconciled") == []


def test_a_session_stop_moves_the_row_then_cancels_the_job(home: Path):
    mode, row_state = "soft", SessionState.ARCHIVED  # soft: tmux is left alone
    state = open_state(home)
    job_id = _running(state, session="dlg-stop")
    sessions = SessionInventory(state.layout.sessions_db)
    sessions.record_start("dlg-stop", job_id=job_id, agent="shell", workdir=None, pane_pid=None)

    shown = stop(state, "dlg-stop", mode=mode)

    assert shown.state == row_state.value
    row = sessions.get("dlg-stop")
    assert row is not None and row.state is row_state and row.job_id == job_id
    job = state.registry.get(job_id)
    assert job.status is JobState.CANCELLED and job.error == f"session stopped ({mode})"
    history = [(h.state, h.reason) for h in sessions.history("dlg-stop")]
    assert history[-1] == (row_state.value, f"session stop --mode {mode}")
    # the job's end moved the row once; a second ending changes neither
    again = end_job(
        state,
        job_id,
        JobState.CANCELLED,
        session=SessionMove("dlg-stop", SessionState.TERMINATED, "again"),
    )
    assert not again.changed
    assert sessions.get("dlg-stop").state is row_state  # type: ignore[union-attr]
    assert len(sessions.history("dlg-stop")) == len(history)
