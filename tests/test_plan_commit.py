"""A plan registers all its jobs in one registry transaction (issue 31, item 4): one lock, one
sync of the file system however many jobs it holds, all of it or (after a crash) none."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from delegate.adapters import fsio
from delegate.adapters.registry import PLAN_DIR
from delegate.core.model import JobState
from delegate.services.jobs.plan import PlannedJob, read_plan, submit_plan
from delegate.services.jobs.submit import SubmitRequest
from delegate.services.state import State

from .helpers import run_cli


def _plan_file(tmp_path: Path, count: int, *, keys: bool = False) -> Path:
    lines = ['agent = "shell"', f'workdir = "{tmp_path}"', 'group = "nightly"', ""]
    for n in range(count):
        lines += ["[[jobs]]", f'name = "j{n}"', f'prompt = "echo {n}"']
        if n:
            lines.append(f'after = ["j{n - 1}"]')
        if keys:
            lines.append(f'idempotency_key = "nightly-{n}"')
        lines.append("")
    path = tmp_path / f"plan-{count}.toml"
    path.write_text("\n".join(lines))
    return path


def _paused_state(home: Path, tmux_env: dict[str, str]) -> State:
    for words in (("group", "add", "nightly"), ("group", "pause", "nightly")):
        assert run_cli(home, *words, env=tmux_env).returncode == 0
    return State.open(env={**tmux_env, "DELEGATE_HOME": str(home)})


def _request(job: PlannedJob, after: str | None) -> SubmitRequest:
    fields = job.fields
    return SubmitRequest(
        prompt=str(fields["prompt"]).encode(),
        agent=str(fields["agent"]),
        workdir=Path(fields["workdir"]),
        group=str(fields["group"]),
        after=tuple(after.split(",")) if after else (),
        idempotency_key=fields.get("idempotency_key"),
    )


def _submit_counted(state: State, plan: Path, monkeypatch) -> dict[str, int]:
    """Submit `plan` in this process, counting the registry lock's acquisitions, syncs and
    fsyncs while it runs."""
    counts = {"registry_locks": 0, "sync": 0, "fsync": 0}
    real_acquire, real_sync, real_fsync = fsio.FileLock.acquire, os.sync, os.fsync
    registry_lock = state.layout.jobs / ".lock"

    def acquire(self: fsio.FileLock) -> None:
        counts["registry_locks"] += self.path == registry_lock
        real_acquire(self)

    def sync() -> None:
        counts["sync"] += 1
        real_sync()

    def fsync(fd: int) -> None:
        counts["fsync"] += 1
        real_fsync(fd)

    monkeypatch.setattr(fsio.FileLock, "acquire", acquire)
    monkeypatch.setattr(os, "sync", sync)
    monkeypatch.setattr(os, "fsync", fsync)
    jobs = read_plan(plan)
    assert jobs is not None
    made = submit_plan(state, jobs, _request)
    monkeypatch.undo()
    counts["jobs"] = len(made)
    return counts


def test_a_plan_takes_the_lock_once_and_syncs_once_however_long(
    home: Path, tmux_env, tmp_path: Path, monkeypatch
):
    state = _paused_state(home, tmux_env)
    small = _submit_counted(state, _plan_file(tmp_path, 20), monkeypatch)
    large = _submit_counted(state, _plan_file(tmp_path, 200), monkeypatch)
    assert small["registry_locks"] == large["registry_locks"] == 1
    assert small["sync"] == large["sync"] == 1
    assert large["fsync"] == small["fsync"]  # the fsyncs do not grow with the plan
    queued = state.registry.open_jobs()
    assert len(queued) == 220 and {j.status for j in queued} == {JobState.QUEUED}
    one = queued[-1]
    lines = state.audit.read_events(one.job_id)
    assert [(line["kind"], line["status"]) for line in lines] == [
        ("registered", "pending"),
        ("status_changed", "queued"),
    ]
    assert (state.audit.job_dir(one.job_id) / "prompt").read_bytes() == b"echo 199"
    assert one.after and state.registry.get(one.after[0]).status is JobState.QUEUED
    shown = run_cli(home, "ps", "--json", env=tmux_env)
    rows = [json.loads(line) for line in shown.stdout.splitlines()]
    reasons = [row["waiting_for"] for row in rows]
    assert reasons.count("group nightly is paused") == 2  # the first job of each plan
    assert all(r.startswith("waits for ") for r in reasons if r != "group nightly is paused")


def test_a_plan_refused_or_failing_midway_records_nothing(
    home: Path, tmux_env, tmp_path: Path, monkeypatch
):
    state = _paused_state(home, tmux_env)
    jobs = read_plan(_plan_file(tmp_path, 30, keys=True))
    assert jobs is not None
    written = []
    real = state.audit.record_planned

    def record_planned(job, cause):  # type: ignore[no-untyped-def]
        written.append(job.job_id)
        if len(written) == 25:
            raise OSError(28, "No space left on device")
        real(job, cause)

    monkeypatch.setattr(state.audit, "record_planned", record_planned)
    with pytest.raises(OSError):
        submit_plan(state, jobs, _request)
    monkeypatch.undo()
    assert not list(state.layout.jobs.glob("*.json"))
    assert not os.listdir(state.layout.jobs / "open")
    assert not os.listdir(state.layout.jobs / "keys")
    assert not (state.layout.jobs / PLAN_DIR).exists()
    assert not [p for p in state.layout.logs.iterdir() if p.is_dir()]
    # the same plan again registers whole, keys and all; once more, it makes nothing new
    first = submit_plan(state, jobs, _request)
    again = submit_plan(state, jobs, _request)
    assert all(job.created for job in first) and not any(job.created for job in again)
    assert [job.job_id for job in first] == [job.job_id for job in again]
    assert len(state.registry.open_jobs()) == 30


CRASH = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from delegate.adapters import registry
    from delegate.services.jobs.plan import read_plan, submit_plan
    from delegate.services.state import State
    from tests.test_plan_commit import _request

    state = State.open(env={{**os.environ}})
    where = sys.argv[1]
    if where == "before-commit":  # everything staged, not yet marked whole
        os.sync = lambda: os.kill(os.getpid(), signal.SIGKILL)
    else:  # marked whole, half of the records moved in
        real, moved = os.replace, []
        def replace(src, dst):
            if str(src).endswith(".json") and registry.PLAN_DIR in str(src):
                moved.append(src)
                if len(moved) == 20:
                    os.kill(os.getpid(), signal.SIGKILL)
            real(src, dst)
        os.replace = replace
    submit_plan(state, read_plan(Path(sys.argv[2])), _request)
    """
)


@pytest.mark.parametrize(("where", "kept"), [("before-commit", 0), ("half-moved", 40)])
def test_a_plan_killed_while_committed_is_all_there_or_not_at_all(
    home: Path, tmux_env, tmp_path: Path, where: str, kept: int
):
    _paused_state(home, tmux_env)
    plan = _plan_file(tmp_path, 40)
    env = {**tmux_env, "DELEGATE_HOME": str(home)}
    script = CRASH.format(tests=str(Path(__file__).parents[1]))
    died = subprocess.run([sys.executable, "-c", script, where, str(plan)], env=env, check=False)
    assert died.returncode == -signal.SIGKILL
    assert (home / "jobs" / PLAN_DIR).is_dir()  # the crash left it half done
    state = State.open(env=env)  # the next opener finishes it, or throws it away
    assert not (home / "jobs" / PLAN_DIR).exists()
    assert len(state.registry.open_jobs()) == len(list((home / "jobs").glob("*.json"))) == kept
    audited = [p for p in (home / "logs").iterdir() if p.is_dir()]
    assert len(audited) == kept
    for job in state.registry.open_jobs():
        assert job.status is JobState.QUEUED
        assert [line["kind"] for line in state.audit.read_events(job.job_id)] == [
            "registered",
            "status_changed",
        ]
