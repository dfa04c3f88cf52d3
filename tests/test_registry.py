from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import filelock
import pytest

from delegate.adapters.registry import Registry, url_token
from delegate.core.errors import (
    CorruptRecord,
    IllegalTransition,
    InvalidJobId,
    JobNotFound,
    LockTimeout,
    PublishRefused,
)
from delegate.core.model import EventType, Job, JobState
from delegate.services.jobs.finish import end_by_event, end_job
from delegate.services.jobs.submit import cancel as cancel_job
from delegate.services.state import State


def test_register_get_list(state: State):
    reg = state.registry
    a, created = reg.register(command="echo a", wall_timeout_s=5, idle_timeout_s=2)
    b, _ = reg.register(command="echo b")
    assert created
    assert a.status is JobState.PENDING and a.last_seq == 0
    assert len(a.auth_token) >= 32
    assert reg.get(a.job_id) == a
    assert [j.job_id for j in reg.list()] == [a.job_id, b.job_id]
    reg.transition(a.job_id, JobState.RUNNING)
    assert [j.job_id for j in reg.list(JobState.PENDING)] == [b.job_id]
    assert [j.job_id for j in reg.list(JobState.RUNNING)] == [a.job_id]


def test_idempotency_key_returns_the_same_job(state: State):
    first, created1 = state.registry.register(idempotency_key="nightly-2026-11-22")
    again, created2 = state.registry.register(idempotency_key="nightly-2026-11-22")
    other, created3 = state.registry.register(idempotency_key="nightly-2026-11-23")
    assert created1 and not created2 and created3
    assert again.job_id == first.job_id
    assert other.job_id != first.job_id
    assert len(state.registry.list()) == 2


def test_a_key_whose_record_was_never_written_is_completed(state: State):
    """A crash between writing the key file and the record: the retry finishes that job."""
    import hashlib

    digest = hashlib.sha256(b"k1").hexdigest()
    (state.registry.keys_dir / digest).write_text("0badc0de")
    job, created = state.registry.register(idempotency_key="k1")
    assert created and job.job_id == "0badc0de"
    assert state.registry.register(idempotency_key="k1")[0].job_id == "0badc0de"


def test_illegal_transitions_raise_and_change_nothing(state: State):
    job, _ = state.registry.register()
    state.registry.transition(job.job_id, JobState.RUNNING)
    end_job(state, job.job_id, JobState.COMPLETED)
    before = state.registry.path_for(job.job_id).read_bytes()
    for target in JobState:
        with pytest.raises(IllegalTransition):
            state.registry.transition(job.job_id, target)
    with pytest.raises(IllegalTransition):
        cancel_job(state, job.job_id)
    assert state.registry.path_for(job.job_id).read_bytes() == before


def test_cancel_pending_and_running(state: State):
    a, _ = state.registry.register()
    b, _ = state.registry.register()
    state.registry.transition(b.job_id, JobState.RUNNING)
    assert cancel_job(state, a.job_id).job.status is JobState.CANCELLED
    assert cancel_job(state, b.job_id).job.status is JobState.CANCELLED
    assert state.registry.pick("w") is None  # a cancelled job is not picked


def test_next_seq_counts_and_refuses_after_the_end(state: State):
    job, _ = state.registry.register()
    with pytest.raises(PublishRefused, match="not started"):
        state.registry.next_seq(job.job_id, EventType.PROGRESS)
    assert state.registry.next_seq(job.job_id, EventType.STARTED)[1] == 1
    with pytest.raises(PublishRefused, match="already started"):
        state.registry.next_seq(job.job_id, EventType.STARTED)
    state.registry.apply_event(job.job_id, EventType.STARTED)
    assert state.registry.next_seq(job.job_id, EventType.PROGRESS)[1] == 2
    assert state.registry.next_seq(job.job_id, EventType.COMPLETED)[1] == 3
    end_by_event(state, job.job_id, EventType.COMPLETED)
    with pytest.raises(PublishRefused, match="already completed"):
        state.registry.next_seq(job.job_id, EventType.PROGRESS)
    assert state.registry.get(job.job_id).last_seq == 3


def test_apply_event_is_idempotent(state: State):
    job, _ = state.registry.register()
    assert state.registry.apply_event(job.job_id, EventType.STARTED)[1]
    assert not state.registry.apply_event(job.job_id, EventType.STARTED)[1]
    assert not state.registry.apply_event(job.job_id, EventType.PROGRESS)[1]
    done, changed = end_by_event(state, job.job_id, EventType.ERROR, detail="boom")
    assert changed and done.status is JobState.ERROR and done.error == "agent_error: boom"
    assert not end_by_event(state, job.job_id, EventType.COMPLETED).changed
    assert state.registry.get(job.job_id).status is JobState.ERROR


@pytest.mark.parametrize("event", [EventType.COMPLETED, EventType.ERROR], ids=str)
def test_apply_event_is_no_second_door_to_the_end(state: State, event: EventType):
    """A terminal event goes through finish.end_job (Registry.record_end), never apply_event; nor
    does a terminal transition."""
    job, _ = state.registry.register()
    state.registry.apply_event(job.job_id, EventType.STARTED)
    with pytest.raises(ValueError, match="ends the job"):
        state.registry.apply_event(job.job_id, event)
    with pytest.raises(ValueError, match="ends the job"):
        state.registry.transition(job.job_id, JobState.COMPLETED)
    assert state.registry.get(job.job_id).status is JobState.RUNNING


def test_completed_while_pending_passes_through_running(state: State):
    job, _ = state.registry.register()
    end_by_event(state, job.job_id, EventType.COMPLETED)
    changes = state.audit.read_events(job.job_id, kind="status_changed")
    assert [(c["previous"], c["status"]) for c in changes] == [
        ("pending", "running"),
        ("running", "completed"),
    ]


def test_pick_takes_the_oldest_pending_job(state: State):
    jobs = [state.registry.register()[0] for _ in range(3)]
    picked = state.registry.pick("worker-1")
    assert picked is not None and picked.job_id == jobs[0].job_id
    assert picked.status is JobState.RUNNING and picked.picked_by == "worker-1"
    assert state.registry.pick("worker-2").job_id == jobs[1].job_id
    assert state.registry.pick("worker-2").job_id == jobs[2].job_id
    assert state.registry.pick("worker-2") is None


@pytest.mark.parametrize(
    "bad", ["../x", "ABCDEF12", "", "012345678"], ids=["dotdot", "upper", "empty", "nine"]
)
def test_bad_ids_are_refused_before_any_path_is_built(state: State, bad: str, monkeypatch):
    built = []
    original = Path.__truediv__
    monkeypatch.setattr(
        Path, "__truediv__", lambda self, other: built.append(other) or original(self, other)
    )
    for call in (
        lambda: state.registry.get(bad),
        lambda: state.registry.transition(bad, JobState.RUNNING),
        lambda: state.registry.next_seq(bad, EventType.STARTED),
        lambda: state.registry.record_end(bad, JobState.CANCELLED),
        lambda: state.audit.append(bad, "registered"),
    ):
        with pytest.raises(InvalidJobId):
            call()
    assert not any(bad and bad in str(part) for part in built)
    assert not (state.layout.home / "x").exists()


def test_unknown_job(state: State):
    with pytest.raises(JobNotFound):
        state.registry.get("0badc0de")


def test_records_are_0600_and_the_state_dir_0700(state: State):
    job, _ = state.registry.register()
    state.registry.transition(job.job_id, JobState.RUNNING)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(state.layout.home) == 0o700
    assert mode(state.layout.jobs) == 0o700
    assert mode(state.layout.logs) == 0o700
    assert mode(state.registry.path_for(job.job_id)) == 0o600
    for path in state.audit.job_dir(job.job_id).iterdir():
        assert mode(path) == 0o600, path


def test_a_state_dir_the_user_made_keeps_its_mode_and_doctor_warns(tmp_path: Path):
    from delegate.services.doctor import run_checks

    home = tmp_path / "loose"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    assert stat.S_IMODE(home.stat().st_mode) == 0o755  # not ours to change
    assert stat.S_IMODE(state.layout.jobs.stat().st_mode) == 0o700  # ours: private
    [check] = [c for c in run_checks(state) if c.name == "state_dir"]
    assert check.status == "warn" and "readable by others" in check.detail


def test_a_shared_1777_folder_holding_a_bus_keeps_its_mode(tmp_path: Path):
    from delegate.adapters.bus import open_bus

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    bus = open_bus(f"sqlite://{shared / 'bus.db'}")
    try:
        bus.publish("0badc0de", b"x" * 10_000)  # a blob folder too
    finally:
        bus.close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "bus.db").stat().st_mode) == 0o600
    assert stat.S_IMODE((shared / "blobs").stat().st_mode) == 0o700
    fresh = tmp_path / "a" / "b" / "c"
    open_bus(f"sqlite://{fresh / 'bus.db'}").close()
    for folder in (tmp_path / "a", tmp_path / "a" / "b", fresh):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


def test_corrupt_record_is_quarantined_never_replaced(state: State):
    good, _ = state.registry.register()
    bad, _ = state.registry.register()
    path = state.registry.path_for(bad.job_id)
    path.write_bytes(b'{"job_id": "' + bad.job_id.encode() + b'", "status": ')
    with pytest.raises(CorruptRecord) as info:
        state.registry.get(bad.job_id)
    assert not path.exists()
    [kept] = state.registry.quarantined()
    assert kept.read_bytes().startswith(b'{"job_id"')  # kept byte for byte
    assert info.value.quarantined_to == str(kept)
    assert [j.job_id for j in state.registry.list()] == [good.job_id]


def test_list_quarantines_instead_of_failing(state: State):
    ok, _ = state.registry.register()
    (state.layout.jobs / "0badc0de.json").write_text("[]")
    assert [j.job_id for j in state.registry.list()] == [ok.job_id]
    assert len(state.registry.quarantined()) == 1


def test_the_lock_is_the_one_filelock_takes(state: State):
    """Tools using the filelock library on jobs/.lock exclude the registry, and vice versa."""
    short = Registry(state.layout.jobs, lock_timeout_s=0.2)
    with filelock.FileLock(str(state.layout.jobs / ".lock")), pytest.raises(LockTimeout):
        short.register()
    short.register()  # released: works again


# --- many processes ---------------------------------------------------------------------------


def _spawn(code: str, home: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DELEGATE_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_all(procs):
    for p in procs:
        _out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()


REGISTER_50 = """
    from delegate.services.state import State
    state = State.open()
    for _ in range(50):
        state.registry.register(command="x")
"""


def test_eight_processes_register_400_distinct_jobs(state: State, home: Path):
    _wait_all([_spawn(REGISTER_50, home) for _ in range(8)])
    files = sorted(state.layout.jobs.glob("*.json"))
    ids = {p.stem for p in files}
    assert len(files) == 400 and len(ids) == 400
    for path in files:
        assert Job.from_dict(json.loads(path.read_bytes())).job_id == path.stem
    assert len(state.registry.list(JobState.PENDING)) == 400


PUBLISH_200 = """
    import sys
    from delegate.services.jobs.publish import publish_event
    from delegate.services.state import State
    state = State.open()
    for i in range(200):
        publish_event(state, sys.argv[1], "progress", detail=f"step {i}")
"""


def test_eight_processes_publish_1600_events_with_seqs_1_to_1600(state: State, home: Path):
    job, _ = state.registry.register()
    assert state.registry.pick("bench") is not None  # running, no event yet: seq starts at 1
    _wait_all([_spawn(PUBLISH_200, home, job.job_id) for _ in range(8)])
    expected = list(range(1, 1601))
    published = [e["seq"] for e in state.audit.read_events(job.job_id, kind="published")]
    assert sorted(published) == expected
    bus = state.open_bus_for(job)
    sub = bus.subscribe(job.job_id)
    on_bus = []
    while (message := sub.get(timeout=0)) is not None:
        on_bus.append(json.loads(message.payload)["seq"])
    bus.close()
    assert sorted(on_bus) == expected
    assert state.registry.get(job.job_id).last_seq == 1600


UPDATE_100 = """
    import sys
    from delegate.services.state import State
    state = State.open()
    for i in range(100):
        state.registry.update(sys.argv[1], session=f"s-{sys.argv[2]}-{i}")
        state.registry.add_sub_jobs_spent(sys.argv[1], 1, 0.0)
"""


def test_seqs_taken_while_other_writers_rewrite_the_record_are_never_lost(state: State, home: Path):
    """Publishers take seqs while other writers rewrite the same record (its session, its
    sub-jobs' spending): no seq is lost or taken twice, and no writer's change is lost."""
    job, _ = state.registry.register()
    assert state.registry.pick("bench") is not None
    writers = [_spawn(UPDATE_100, home, job.job_id, str(n)) for n in range(3)]
    _wait_all([_spawn(PUBLISH_200, home, job.job_id) for _ in range(4)] + writers)
    published = [e["seq"] for e in state.audit.read_events(job.job_id, kind="published")]
    assert sorted(published) == list(range(1, 801))
    after = state.registry.get(job.job_id)
    assert after.last_seq == 800
    assert after.sub_jobs_tokens == 300  # and no writer's change was lost either


REWRITE_FOREVER = """
    import sys
    from delegate.services.state import State
    state = State.open()
    ids = sys.argv[1:]
    version = 0
    while True:
        version += 1
        for job_id in ids:
            # announce first, then write: after a kill the record holds this or the previous one
            sys.stdout.write(f"{job_id} v{version}\\n"); sys.stdout.flush()
            state.registry.update(job_id, command=f"v{version}")
"""


def test_sigkill_mid_write_leaves_old_or_new_record(state: State, home: Path):
    jobs = [state.registry.register(command="v0")[0].job_id for _ in range(4)]
    rng = random.Random(20261122)
    rounds_that_rewrote = 0
    for _round in range(50):
        before = {j: state.registry.get(j).command for j in jobs}
        writer = _spawn(REWRITE_FOREVER, home, *jobs)
        # let it reach the write loop, then kill at a random moment within it
        first = writer.stdout.readline()
        assert first, writer.stderr.read().decode()
        time.sleep(rng.uniform(0.0, 0.05))
        writer.send_signal(signal.SIGKILL)
        out, _ = writer.communicate()
        announced: dict[str, str] = {}
        for line in (first + out).decode().splitlines():
            job_id, version = line.split()
            announced[job_id] = version
        rounds_that_rewrote += any(int(v[1:]) >= 2 for v in announced.values())
        for job_id in jobs:
            path = state.registry.path_for(job_id)
            record = Job.from_dict(json.loads(path.read_bytes()))  # parses, always
            new = announced.get(job_id)
            if new is None:
                allowed = {before[job_id]}
            else:
                n = int(new[1:])
                allowed = {new, before[job_id] if n == 1 else f"v{n - 1}"}
            assert record.command in allowed, (job_id, record.command, allowed)
    assert state.registry.quarantined() == []
    assert rounds_that_rewrote >= 25  # the kills landed inside the rewrite loop, not before it


def test_a_host_job_already_sent_is_not_claimed_by_one_that_saw_it_queued(state: State):
    """Two launchers see a retry queued for its host; the first claims it and sends it. The
    second, which expects it still queued (no launcher), must find nothing to claim: a host job
    sent is marked so (SENT_TO_HOST), never left with no launcher, or it is sent twice (seen
    once in CI: the host refused the second as already assigned)."""
    from delegate.services.jobs.launch import SENT_TO_HOST

    job, _ = state.registry.register(agent="shell", host="h1")
    queued = state.registry.admit(job.job_id, {"argv": ["true"]}, lambda j, others: False)
    assert queued.status is JobState.QUEUED
    first = {"pid": os.getpid(), "start": 1}
    claimed = state.registry.claim_launch(
        job.job_id, first, expected_launcher=None, may_start=lambda j, others: True
    )
    assert claimed is not None and claimed.status is JobState.PENDING
    state.registry.update(job.job_id, stamp=False, launcher=dict(SENT_TO_HOST))  # it was sent
    second = {"pid": os.getpid() + 1, "start": 2}
    again = state.registry.claim_launch(
        job.job_id, second, expected_launcher=None, may_start=lambda j, others: True
    )
    assert again is None
    assert state.registry.get(job.job_id).launcher == SENT_TO_HOST


def test_url_token_is_what_secrets_token_urlsafe_makes_of_the_same_bytes(monkeypatch):
    import base64
    import secrets

    for size in (1, 2, 3, 32):
        drawn = bytes(range(250, 250 - size, -1))  # +/ in plain base64: -_ here
        monkeypatch.setattr(os, "urandom", lambda n, drawn=drawn: drawn[:n])
        expected = base64.urlsafe_b64encode(drawn).rstrip(b"=").decode("ascii")
        assert url_token(size) == expected  # as secrets.token_urlsafe encodes its bytes
        assert len(url_token(size)) == len(secrets.token_urlsafe(size))
