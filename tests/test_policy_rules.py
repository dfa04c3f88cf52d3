"""The reconcile policy rule by rule, and a golden record that the composition decides as before.

The golden file (tests/data/policy_golden.json) holds, for each of a few thousand seeded random
worlds, a digest of the actions `reconcile()` returned for it when the policy was still one
function (`<count>:<sha256 prefix>` of every field of every action, in order). The worlds are
rebuilt here from their seeds, so the file stays small (about 90 KB) and is deterministic.
Regenerate it only when the policy is meant to decide differently:
`.venv/bin/python -m tests.test_policy_rules`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any

from delegate.core.model import Job, JobState, Pane, Session, SessionState, TmuxView
from delegate.core.policy import (
    ENDED_BY_RECONCILE,
    Action,
    Caps,
    PolicySettings,
    SeenEvent,
    Snapshot,
    reconcile,
)
from delegate.core.timefmt import record_timestamp

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
SOCKETS = ("/tmp/tmux-0/a", "/tmp/tmux-0/b", "/tmp/tmux-0/c")
LAUNCH = {"argv": ["true"], "prompt": "stdin", "prompt_path": ""}
GOLDEN = Path(__file__).resolve().parent / "data" / "policy_golden.json"
GOLDEN_WORLDS = 3000
EVENT_NAMES = ("started", "progress", "permission_required", "completed", "error")


def at(seconds_ago: float) -> str:
    return record_timestamp(NOW - timedelta(seconds=seconds_ago))


# --- seeded random worlds --------------------------------------------------------------------
# Chosen to reach every branch: every job state, remote and outside-tmux jobs, rows that name
# another job, panes marked for another job, servers ok/gone/unreachable/not asked, events of
# unknown jobs and unknown names, every setting.


def _random_job(rnd: random.Random, job_id: str, names: list[str]) -> Job:
    status = rnd.choice(list(JobState))
    error = None
    if status is JobState.ERROR:
        error = rnd.choice([None, "agent_error: tests failed", *ENDED_BY_RECONCILE])
    session = rnd.choice([f"dlg-{job_id}", f"dlg-{job_id}", None, "work", *names[-1:]])
    return Job(
        job_id=job_id,
        status=status,
        created_at=at(rnd.choice([100, 200, 300])),  # ties: the id decides
        updated_at=at(100),
        auth_token="t",
        agent=rnd.choice(["shell", "claude", None]),
        session=session,
        wall_timeout_s=rnd.choice([None, 3600.0, 30.0]),
        idle_timeout_s=rnd.choice([None, 600.0, 20.0]),
        error=error,
        launch=rnd.choice([LAUNCH, LAUNCH, {}]),
        started_at=rnd.choice([None, at(5), at(700), at(4000)]),
        last_event_at=rnd.choice([None, None, at(1), at(25)]),
        tmux_socket=rnd.choice([*SOCKETS, None]),
        max_running=rnd.choice([None, None, 1, 3]),
        launcher=rnd.choice([None, {"pid": 7, "start": 1.5}]),
        host=rnd.choice([None, None, None, "h1", "h2"]),
    )


def _random_row(rnd: random.Random, job: Job, ids: list[str]) -> Session:
    return Session(
        name=job.session or f"dlg-{job.job_id}",
        state=rnd.choice([SessionState.RUNNING, SessionState.STOPPED, SessionState.ARCHIVED]),
        job_id=rnd.choice([job.job_id, job.job_id, job.job_id, None, *ids[:1]]),
        agent=job.agent,
        workdir="/w",
        pane_pid=rnd.choice([1234, None]),
        created_at=at(300),
        updated_at=at(rnd.choice([5, 25, 700, 5000])),
        socket=rnd.choice([None, None, *SOCKETS]),
    )


def _random_pane(rnd: random.Random, session: str, job_id: str, ids: list[str]) -> Pane:
    dead = rnd.random() < 0.4
    return Pane(
        session=session,
        pane_id=f"%{rnd.randrange(100)}",
        pid=rnd.randrange(1000, 2000),
        dead=dead,
        exit_status=rnd.choice([None, 0, 3]) if dead else None,
        job_id=rnd.choice([job_id, job_id, "", *ids[:1]]),
        exit_signal=rnd.choice([None, None, 9]) if dead else None,
    )


def random_world(seed: int) -> tuple[Snapshot, PolicySettings]:
    rnd = random.Random(seed)
    ids = [f"{rnd.randrange(16**8):08x}" for _ in range(rnd.randrange(0, 8))]
    jobs: list[Job] = []
    for job_id in ids:
        jobs.append(_random_job(rnd, job_id, [j.session for j in jobs if j.session]))
    rows = [_random_row(rnd, j, ids) for j in jobs if rnd.random() < 0.6]
    panes: dict[str, list[Pane]] = {s: [] for s in SOCKETS}
    for j in jobs:
        for _ in range(rnd.choice([0, 1, 1, 2])):
            socket = rnd.choice([j.tmux_socket or SOCKETS[0], *SOCKETS])
            name = j.session or f"dlg-{j.job_id}"
            panes[socket].append(_random_pane(rnd, name, j.job_id, ids))
    strays = ["dlg-stray", "work", "renamed"]
    for name in rnd.sample(strays, rnd.randrange(0, 3)):
        panes[rnd.choice(SOCKETS)].append(_random_pane(rnd, name, rnd.choice(["", "0badc0de"]), []))
    views = {}
    for socket in SOCKETS:
        status = rnd.choice(["ok", "ok", "ok", "gone", "unreachable", "absent"])
        if status == "ok":
            views[socket] = TmuxView(socket, "ok", tuple(panes[socket]))
        elif status != "absent":
            views[socket] = TmuxView(socket, status, (), f"{status} because")
    names = [*ids, "0badc0de", "ffffffff"]
    events = [
        SeenEvent(rnd.choice(names), rnd.choice([*EVENT_NAMES, "bogus"]), rnd.randrange(1, 9), "d")
        for _ in range(rnd.randrange(0, 4))
    ]
    closed = [
        Session(name, SessionState.TERMINATED, None, None, None, None, at(9), at(9), SOCKETS[0])
        for name in rnd.sample(strays, rnd.randrange(0, 2))
    ]
    snap = Snapshot(
        jobs=jobs,
        views=views,
        sessions=rows,
        now=NOW,
        events=events,
        launchers_alive=frozenset(i for i in ids if rnd.random() < 0.2),
        closed_sessions=closed,
        hosts={h: (rnd.choice([1.0, 61.0]), 60.0) for h in ("h1", "h2") if rnd.random() < 0.8},
        assigned_at={i: at(rnd.choice([10, 700])) for i in ids if rnd.random() < 0.4},
        queued_on_host=frozenset(i for i in ids if rnd.random() < 0.2),
    )
    settings = PolicySettings(
        keep_finished_s=rnd.choice([600.0, 0.0, 1e9]),
        reap_orphans=rnd.random() < 0.5,
        caps=rnd.choice(
            [None, Caps(), Caps(total=1), Caps(total=3), Caps(per_agent={"claude": 1})]
        ),
        launch_queued=rnd.random() < 0.8,
        report_orphans=rnd.random() < 0.8,
        default_socket=rnd.choice([None, SOCKETS[0], SOCKETS[2]]),
    )
    return snap, settings


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def action_record(action: Action) -> list[Any]:
    """Every field of an action, in order, as JSON: what "the same action" means here."""
    fields = [_plain(getattr(action, f.name)) for f in dataclasses.fields(action)]
    return [type(action).__name__, *fields]


def digest(actions: list[Action]) -> str:
    """`<count>:<sha256 prefix>` of every field of every action, in order."""
    text = json.dumps([action_record(a) for a in actions], separators=(",", ":"))
    return f"{len(actions)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def golden_digests() -> dict[str, str]:
    return {str(seed): digest(reconcile(*random_world(seed))) for seed in range(GOLDEN_WORLDS)}


def test_reconcile_decides_as_the_single_function_did():
    expected = json.loads(GOLDEN.read_text())
    assert len(expected) == GOLDEN_WORLDS
    changed = {}
    for seed, was in expected.items():
        actions = reconcile(*random_world(int(seed)))
        if digest(actions) != was:
            changed[seed] = (was, [a.describe() for a in actions])
    # the old actions of a seed: check out the commit that wrote the golden file and run
    # reconcile(*random_world(seed)) there
    assert not changed, dict(list(changed.items())[:3])


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden_digests(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
