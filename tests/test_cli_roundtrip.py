"""The publish / watch round trip through the real CLI, in separate processes, on real files."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from delegate.adapters.bus import open_bus
from delegate.core.model import JobState
from delegate.core.protocol import build_envelope, encode, sign
from delegate.services.state import State

from .helpers import json_lines, popen_cli, retry_until, run_cli


def _register(home: Path, *args: str) -> str:
    result = run_cli(home, "register", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _publish(home: Path, job_id: str, event: str, *args: str) -> None:
    result = run_cli(home, "publish", "--job", job_id, "--event", event, *args)
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout)
    assert receipt["job_id"] == job_id and receipt["event"] == event


def _received(state: State, job_id: str) -> list[dict]:
    return state.audit.read_events(job_id, kind="received")


def test_round_trip_across_processes(home: Path):
    job_id = _register(home)
    watcher = popen_cli(home, "watch", job_id, "--idle-timeout", "30")
    _publish(home, job_id, "started", "--detail", "booting")
    # DELEGATE_JOB_ID instead of --job, as an agent in its pane would do
    result = run_cli(
        home,
        "publish",
        "--event",
        "progress",
        "--detail",
        "half way",
        "--data",
        '{"done": 1}',
        env={"DELEGATE_JOB_ID": job_id},
    )
    assert result.returncode == 0, result.stderr
    _publish(home, job_id, "completed", "--detail", "all good")
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    lines = json_lines(out)
    assert [(e["seq"], e["event"]) for e in lines] == [
        (1, "started"),
        (2, "progress"),
        (3, "completed"),
    ]
    assert lines[1]["data"]["done"] == 1 and lines[1]["detail"] == "half way"

    state = State.open(env={"DELEGATE_HOME": str(home)})
    status = json.loads((state.audit.job_dir(job_id) / "status.json").read_text())
    assert status["status"] == "completed" and status["last_seq"] == 3
    published = state.audit.read_events(job_id, kind="published")
    assert [(e["seq"], e["event"]) for e in published] == [
        (1, "started"),
        (2, "progress"),
        (3, "completed"),
    ]
    # the state dir's supervisor (which `watch` started: it only follows) received each once
    received = retry_until(lambda: len(_received(state, job_id)) >= 3 and _received(state, job_id))
    assert [e["seq"] for e in received] == [1, 2, 3]
    changes = [
        (e["previous"], e["status"]) for e in state.audit.read_events(job_id, kind="status_changed")
    ]
    assert changes == [("pending", "running"), ("running", "completed")]
    kinds = [e["kind"] for e in state.audit.read_events(job_id)]
    assert kinds[0] == "registered"


def test_watch_of_a_finished_job_replays_and_exits_with_its_outcome(home: Path):
    job_id = _register(home)
    _publish(home, job_id, "started")
    _publish(home, job_id, "error", "--detail", "tests failed")
    result = run_cli(home, "watch", job_id)
    assert result.returncode == 1
    assert [e["event"] for e in json_lines(result.stdout)] == ["started", "error"]
    show = json.loads(run_cli(home, "show", job_id, "--json").stdout)
    assert show["status"] == "error" and show["error"] == "agent_error: tests failed"
    assert "auth_token" not in show


def test_idle_timeout_ends_watch_with_2(home: Path):
    job_id = _register(home, "--idle-timeout", "0.6")
    _publish(home, job_id, "started")
    started = time.monotonic()
    result = run_cli(home, "watch", job_id)
    assert result.returncode == 2, result.stderr
    assert time.monotonic() - started < 20
    job = State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id)
    assert job.status is JobState.ERROR and job.error == "idle_timeout"
    # the deadline came from the record: the last event plus the idle budget
    from delegate.core.timefmt import parse_timestamp

    ended = [e for e in State.open(env={"DELEGATE_HOME": str(home)}).audit.read_events(job_id)]
    failed = next(e for e in ended if e.get("kind") == "reconciled")
    assert failed["action"] == "fail_job" and failed["reason"] == "idle_timeout"
    silent = parse_timestamp(failed["evidence"]["now"]) - parse_timestamp(job.last_event_at)
    assert silent.total_seconds() >= 0.6


def test_an_onlookers_patience_never_ends_the_job(home: Path):
    job_id = _register(home, "--idle-timeout", "60")
    _publish(home, job_id, "started")
    result = run_cli(home, "watch", job_id, "--wall-timeout", "0.5")
    assert result.returncode == 2, result.stderr
    assert "stopped watching" in result.stderr
    job = State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id)
    assert job.status is JobState.RUNNING and job.error is None


def test_wall_timeout_ends_watch_with_2_even_while_events_flow(home: Path):
    job_id = _register(home, "--wall-timeout", "1.5", "--idle-timeout", "30")
    watcher = popen_cli(home, "watch", job_id)
    _publish(home, job_id, "started")
    state = State.open(env={"DELEGATE_HOME": str(home)})
    from delegate.core.errors import PublishRefused
    from delegate.services.jobs.publish import publish_event

    deadline = time.monotonic() + 30
    refused = False
    while watcher.poll() is None and time.monotonic() < deadline:
        try:
            publish_event(state, job_id, "progress", detail="tick")  # keeps the idle timer fresh
        except PublishRefused:
            refused = True  # the watcher already ended the job: later events are refused
            break
        time.sleep(0.1)
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 2, err
    assert len(json_lines(out)) >= 5  # it was receiving events all along
    job = state.registry.get(job_id)
    assert job.status is JobState.ERROR and job.error == "wall_timeout"
    if not refused:
        with pytest.raises(PublishRefused):
            publish_event(state, job_id, "progress")


def test_cancel_ends_watch_with_3(home: Path):
    job_id = _register(home)
    watcher = popen_cli(home, "watch", job_id)
    _publish(home, job_id, "started")
    retry_until(
        lambda: (home / "logs" / job_id / "events.ndjson").read_text().count('"received"') >= 1
    )
    result = run_cli(home, "cancel", job_id)
    assert result.returncode == 0 and job_id in result.stdout
    watcher.communicate(timeout=30)
    assert watcher.returncode == 3
    refused = run_cli(home, "publish", "--job", job_id, "--event", "progress")
    assert refused.returncode != 0 and "cancelled" in refused.stderr


# --- rejected messages ------------------------------------------------------------------------


def _envelope(job_id: str, seq: int, event: str, token: str, **changes) -> dict:
    env = sign(build_envelope(job_id=job_id, seq=seq, event=event, detail=f"#{seq}"), token)
    env.update(changes)
    return env


def _bad_messages(job_id: str, token: str) -> dict[str, tuple[bytes, str, bool]]:
    """name -> (raw bytes, expected reason, sent after the terminal event?)"""
    forged = _envelope(job_id, 2, "progress", "not-the-token")
    unsigned = build_envelope(job_id=job_id, seq=2, event="progress")
    other_schema = _envelope(job_id, 2, "progress", token)
    other_schema["schema_version"] = 2
    other_schema = sign({k: v for k, v in other_schema.items()}, token)
    other_job = sign(build_envelope(job_id="fedcba98", seq=2, event="progress"), token)
    replay = _envelope(job_id, 1, "started", token)
    late = _envelope(job_id, 4, "progress", token)
    huge = _envelope(job_id, 2, "progress", token, detail="x" * (70 * 1024))
    return {
        "bad-signature": (encode(forged), "bad_signature", False),
        "missing-signature": (encode(unsigned), "missing_signature", False),
        "other-schema": (encode(other_schema), "bad_schema_version", False),
        "other-job": (encode(other_job), "wrong_job_id", False),
        "seen-seq": (encode(replay), "duplicate_seq", False),
        "after-terminal": (encode(late), "after_terminal", True),
        "not-json": (b"\x00\x01 definitely { not json", "not_json", False),
        "oversized": (json.dumps(huge).encode(), "too_large", False),
    }


@pytest.mark.parametrize(
    "case",
    [
        "bad-signature",
        "missing-signature",
        "other-schema",
        "other-job",
        "seen-seq",
        "after-terminal",
        "not-json",
        "oversized",
    ],
)
def test_bad_messages_are_rejected_audited_and_never_accepted(home: Path, case: str):
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job_id = _register(home)
    job = state.registry.get(job_id)
    raw, reason, after_terminal = _bad_messages(job_id, job.auth_token)[case]
    bus = open_bus(state.bus_url_for(job))
    try:
        bus.publish(job_id, encode(_envelope(job_id, 1, "started", job.auth_token)))
        if not after_terminal:
            bus.publish(job_id, raw)
        bus.publish(job_id, encode(_envelope(job_id, 3, "completed", job.auth_token)))
        if after_terminal:
            bus.publish(job_id, raw)
    finally:
        bus.close()
    result = run_cli(home, "watch", job_id)
    assert result.returncode == 0, result.stderr
    shown = json_lines(result.stdout)
    assert [(e["seq"], e["event"]) for e in shown] == [(1, "started"), (3, "completed")]
    rejected = state.audit.read_events(job_id, kind="rejected")
    assert [r["reason"] for r in rejected] == [reason]
    assert rejected[0]["explanation"]
    received = state.audit.read_events(job_id, kind="received")
    assert [r["seq"] for r in received] == [1, 3]
    assert state.registry.get(job_id).status is JobState.COMPLETED
