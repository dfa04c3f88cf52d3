"""Synthetic audit logs in the exact on-disk form of delegate's own (logs/<job_id>/...).

For tests and benchmarks: N jobs with about M events each, a mix of outcomes, silences,
permission requests, rejected messages, jobs still running, jobs with no events, duplicate and
malformed lines, and days that cross midnight. Deterministic for a given seed.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

AGENTS = ("claude", "codex", "shell", "aider")
REJECT_REASONS = ("bad_signature", "duplicate_seq", "missing_signature", "too_large", "not_json")
START = datetime(2026, 11, 20, 21, 30, tzinfo=UTC)  # jobs run across midnight


class Spec(NamedTuple):
    jobs: int = 50
    events_per_job: int = 20
    seed: int = 1
    p_running: float = 0.08
    p_no_events: float = 0.05
    p_error: float = 0.2
    p_cancelled: float = 0.07
    p_permission: float = 0.05
    p_rejected: float = 0.03
    p_duplicate_line: float = 0.01
    p_malformed_line: float = 0.005
    days: float = 3.0


def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dump(obj: dict[str, Any]) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n"


# Why generated jobs fail, as the wrapper and the monitor word it; picked from the job id, so
# the random sequence (and every other figure of a seed) stays what it was.
FAILURES = (
    "agent_exited: exit status 1",
    "agent_exited: exit status 3",
    "idle_timeout",
    "agent_error: generated",
    "launch_failed: tmux new-session failed",
)


def _failure(job_id: str) -> str:
    return FAILURES[int(job_id, 16) % len(FAILURES)]


ENDINGS = ("completed", "error")  # outcomes announced by the job's last event


class _JobLog:
    """One job's events.ndjson as it is written: its lines, its status and error so far, and
    the time of the next line."""

    def __init__(self, job_id: str, t: datetime) -> None:
        self.job_id = job_id
        self.t = t
        self.lines: list[str] = []
        self.status = "pending"
        self.error: str | None = None

    def emit(self, kind: str, **fields: Any) -> None:
        self.lines.append(_dump({"ts": _ts(self.t), "kind": kind, "job_id": self.job_id, **fields}))

    def change(self, new: str, err: str | None = None) -> None:
        self.emit("status_changed", previous=self.status, status=new, error=err)
        self.status, self.error = new, err


def _outcome(roll: float, spec: Spec) -> str:
    """How a job with events ends (or that it is still running), from one roll of the dice."""
    if roll < spec.p_running:
        return "running"
    if roll < spec.p_running + spec.p_error:
        return "error"
    if roll < spec.p_running + spec.p_error + spec.p_cancelled:
        return "cancelled"
    return "completed"


def _event_name(rng: random.Random, spec: Spec, seq: int, last: int, outcome: str) -> str:
    if seq == 1:
        return "started"
    if seq == last and outcome in ENDINGS:
        return outcome
    return "permission_required" if rng.random() < spec.p_permission else "progress"


def _exchange(
    rng: random.Random, spec: Spec, job: _JobLog, seq: int, event: str, outcome: str
) -> None:
    """One event: published, received (now and then rejected too), the status change it
    brings, and the silence after it."""
    envelope = {
        "schema_version": 1,
        "seq": seq,
        "job_id": job.job_id,
        "event": event,
        "timestamp": _ts(job.t)[:23] + "Z",
        "detail": f"{event} {seq}",
        "data": {"hmac_sig": f"{rng.getrandbits(256):064x}"},
    }
    job.emit("published", seq=seq, event=event, envelope=envelope)
    if seq == 1:
        job.change("running")
    job.t += timedelta(milliseconds=rng.uniform(1, 40))
    job.emit("received", seq=seq, event=event, envelope=envelope)
    if rng.random() < spec.p_rejected:
        job.emit(
            "rejected",
            reason=rng.choice(REJECT_REASONS),
            explanation="generated",
            seq=seq,
            size=300,
            excerpt="{...",
        )
    if event in ENDINGS:
        job.change(outcome, _failure(job.job_id) if outcome == "error" else None)
    # silences: mostly seconds, now and then many minutes
    gap = rng.expovariate(1 / 20) if rng.random() > 0.03 else rng.uniform(600, 5400)
    job.t += timedelta(seconds=gap)


def _job_lines(
    rng: random.Random, spec: Spec, job_id: str, t: datetime
) -> tuple[list[str], str, str | None, datetime]:
    """The events.ndjson lines of one job, its final status and error, and its last time."""
    job = _JobLog(job_id, t)
    job.emit("registered", status="pending")
    roll = rng.random()
    if rng.random() < spec.p_no_events:
        if roll < 0.5:  # cancelled before it started; otherwise still waiting
            job.t += timedelta(seconds=rng.uniform(1, 600))
            job.change("cancelled")
        return job.lines, job.status, job.error, job.t
    count = max(2, int(rng.gauss(spec.events_per_job, spec.events_per_job / 4)))
    outcome = _outcome(roll, spec)
    last = count if outcome in ENDINGS else count - 1
    job.t += timedelta(seconds=rng.uniform(0.2, 30))  # time to the first event
    for seq in range(1, last + 1):
        _exchange(rng, spec, job, seq, _event_name(rng, spec, seq, last, outcome), outcome)
    if outcome == "cancelled":
        job.change("cancelled")
    return job.lines, job.status, job.error, job.t


def generate(logs: Path, spec: Spec | None = None) -> int:
    """Write `spec.jobs` jobs under `logs`; return the number of lines written."""
    spec = spec or Spec()
    rng = random.Random(spec.seed)  # noqa: S311 - synthetic data, not secrets
    logs.mkdir(parents=True, exist_ok=True)
    written = 0
    for n in range(spec.jobs):
        job_id = f"{rng.getrandbits(32):08x}"
        while (logs / job_id).exists():
            job_id = f"{rng.getrandbits(32):08x}"
        folder = logs / job_id
        folder.mkdir()
        agent = rng.choice(AGENTS)
        session = f"dlg-{job_id}" if rng.random() < 0.7 else f"worker-{n % 5}"
        start = START + timedelta(seconds=rng.uniform(0, spec.days * 86400))
        lines, status, error, end = _job_lines(rng, spec, job_id, start)
        text = "".join(line * (2 if rng.random() < spec.p_duplicate_line else 1) for line in lines)
        if rng.random() < spec.p_malformed_line * len(lines):
            text += '{"ts": "2026-11-21T00:00:00Z", "kind": "published", "seq": \n'
        (folder / "events.ndjson").write_text(text)
        written += text.count("\n")
        (folder / "status.json").write_text(
            _dump(
                {
                    "job_id": job_id,
                    "status": status,
                    "updated_at": _ts(end),
                    "last_seq": 0,
                    "error": error,
                    "agent": agent,
                    "session": session,
                }
            )
        )
        (folder / "meta.json").write_text(_dump({"job_id": job_id, "agent": agent}))
    return written
