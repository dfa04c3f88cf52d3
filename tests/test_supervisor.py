"""One supervisor per state dir (issue 31): one process follows every job, queued ones cost
their record only, a killed supervisor is brought back by the next command and loses nothing,
applies nothing twice, and one with no open job leaves."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from delegate.core.model import JobState
from delegate.services.supervisor import running_supervisor

from .helpers import json_lines, retry_until, run_cli
from .test_monitor import open_state, submit_no_wait
from .tmux_fixtures import kill_processes_of


def _ours(home: Path) -> dict[int, str]:
    """pid -> command line of the processes whose environment names `home`."""
    marker = f"DELEGATE_HOME={home}".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if marker in Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0"):
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
                found[int(entry.name)] = cmd.decode()
        except OSError:
            continue
    return found


def _each_event_received_once(state, job_ids: list[str], *, timeout: float) -> None:
    """Each job's started, progress and completed on record as received, each seq once."""
    for job_id in job_ids:
        received = retry_until(
            lambda j=job_id: (r := state.audit.read_events(j, "received")) and len(r) >= 3 and r,
            timeout=timeout,
        )
        seqs = Counter(r["seq"] for r in received)
        assert all(n == 1 for n in seqs.values()), (job_id, seqs)
        assert [r["event"] for r in received] == ["started", "progress", "completed"]


def _supervisors(home: Path) -> list[int]:
    return [pid for pid, cmd in _ours(home).items() if "delegate.runtime.supervisor" in cmd]


@pytest.mark.timeout(180)
def test_one_process_follows_every_job_and_a_queued_job_costs_no_process(
    home: Path, tmux_env, tmp_path: Path
):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text("max_running = 3\n")
    gate = tmp_path / "go"
    ids = [
        submit_no_wait(home, tmux_env, tmp_path, f"while [ ! -e {gate} ]; do sleep 0.05; done")
        for _ in range(12)
    ]
    state = open_state(home)
    retry_until(lambda: sum(state.registry.get(j).status is JobState.RUNNING for j in ids) == 3)
    assert sum(state.registry.get(j).status is JobState.QUEUED for j in ids) == 9
    assert len(_supervisors(home)) == 1  # one for all twelve
    python = [c for c in _ours(home).values() if "python" in c and "runtime.wrapper" not in c]
    assert len(python) == 1, python  # the supervisor; the queued nine have no process at all
    gate.touch()
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=120)
    assert {state.registry.get(j).status for j in ids} == {JobState.COMPLETED}


@pytest.mark.timeout(240)
def test_a_killed_supervisor_is_brought_back_and_nothing_is_lost_or_applied_twice(
    home: Path, tmux_env, tmp_path: Path
):
    """SIGKILL, as the OOM killer sends it, while 4 jobs run and 12 wait: the next command
    (here a `watch`) starts another, which reads on from the bus cursor: every job ends as it
    would have, each event received once."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text("max_running = 4\n")
    script = "delegate publish --event progress --detail one; sleep 0.5"
    ids = [submit_no_wait(home, tmux_env, tmp_path, script) for _ in range(16)]
    state = open_state(home)
    first = retry_until(lambda: running_supervisor(state), timeout=30)
    retry_until(lambda: sum(state.registry.get(j).status is JobState.RUNNING for j in ids) >= 1)
    os.kill(first, signal.SIGKILL)
    retry_until(lambda: running_supervisor(state) is None, timeout=10)
    watched = run_cli(home, "watch", ids[-1], "--json", env=tmux_env, timeout=180)
    assert watched.returncode == 0, watched.stderr
    assert [e["event"] for e in json_lines(watched.stdout)][-1] == "completed"
    again = running_supervisor(state)
    assert again is not None and again != first
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=120)
    assert {state.registry.get(j).status for j in ids} == {JobState.COMPLETED}
    # every event on record as received, by one supervisor or the next: each seq once
    _each_event_received_once(state, ids, timeout=30)


def test_a_supervisor_with_no_open_job_leaves_and_the_next_submit_starts_one(
    home: Path, tmux_env, tmp_path: Path
):
    env = {**tmux_env, "DELEGATE_SUPERVISOR_QUIET_S": "0.5"}
    state = open_state(home)
    job = submit_no_wait(home, env, tmp_path, "true")
    first = retry_until(lambda: running_supervisor(state), timeout=30)
    retry_until(lambda: state.registry.get(job).status.terminal, timeout=30)
    retry_until(lambda: not _supervisors(home), timeout=30)  # no open job: it left
    assert running_supervisor(state) is None
    said = json.loads(run_cli(home, "doctor", "--json", env=env).stdout)["checks"]
    assert next(c for c in said if c["name"] == "supervisor")["detail"].startswith("not running")
    later = submit_no_wait(home, env, tmp_path, "true")
    second = retry_until(lambda: running_supervisor(state), timeout=30)
    assert second != first
    said = json.loads(run_cli(home, "doctor", "--json", env=env).stdout)["checks"]
    running = next(c for c in said if c["name"] == "supervisor")["detail"]
    assert running == f"running (pid {second}, started by a command)"
    retry_until(lambda: state.registry.get(later).status is JobState.COMPLETED, timeout=30)
    kill_processes_of(home)


@pytest.mark.timeout(180)
def test_a_broker_out_of_reach_for_three_passes_changes_nothing_and_is_said_once(
    home: Path, tmux_env, tmp_path: Path, own_broker
):
    """The broker stops for three of the supervisor's passes: no job changes state, and the
    supervisor says once that it cannot reach it, and once that it can again (its log, and the
    audit of each job on it); the job then ends as its agent says."""
    import time

    from delegate.runtime.monitor import DEFAULT_INTERVAL_S
    from delegate.services.state import State

    env = {**tmux_env, "DELEGATE_BUS": own_broker.url}
    gate = tmp_path / "go"
    job = submit_no_wait(home, env, tmp_path, f"while [ ! -e {gate} ]; do sleep 0.05; done")
    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_BUS": own_broker.url})
    retry_until(lambda: state.registry.get(job).status is JobState.RUNNING, timeout=30)
    own_broker.stop()
    said = retry_until(lambda: state.audit.read_events(job, "unseen"), timeout=30)
    assert said[0]["what"] == "bus" and "cannot be reached" in said[0]["note"]
    time.sleep(3 * DEFAULT_INTERVAL_S)  # three passes with the broker away: nothing is decided
    assert state.registry.get(job).status is JobState.RUNNING
    own_broker.start()
    retry_until(lambda: state.audit.read_events(job, "seen_again"), timeout=60)
    gate.touch()
    retry_until(lambda: state.registry.get(job).status is JobState.COMPLETED, timeout=60)
    assert len(state.audit.read_events(job, "unseen")) == 1
    assert len(state.audit.read_events(job, "seen_again")) == 1
    log = (home / "supervisor.log").read_text()
    assert log.count("cannot be reached") == 1 and log.count("is reached again") == 1


@pytest.mark.timeout(180)
def test_a_tmux_socket_removed_for_six_seconds_changes_no_job(home: Path, tmux_env, tmp_path: Path):
    """A temp-folder cleaner removes the tmux socket file for 6 s while its server and five
    agents live: the supervisor, blind, decides nothing (issue 31: one of two healthy jobs
    ended `error` while blind), and every job ends with its agent's own outcome."""
    import time

    from .tmux_fixtures import socket_path

    gate = tmp_path / "go"
    ids = [
        submit_no_wait(home, tmux_env, tmp_path, f"while [ ! -e {gate} ]; do sleep 0.05; done")
        for _ in range(5)
    ]
    state = open_state(home)
    retry_until(lambda: all(state.registry.get(j).status is JobState.RUNNING for j in ids))
    path = socket_path(tmux_env["DELEGATE_TMUX_SOCKET"])
    os.rename(path, path + ".aside")
    try:
        time.sleep(6.0)  # blind this long: more than one pass of the supervisor
        assert {state.registry.get(j).status for j in ids} == {JobState.RUNNING}
    finally:
        os.rename(path + ".aside", path)
    gate.touch()
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=60)
    assert {state.registry.get(j).status for j in ids} == {JobState.COMPLETED}


@pytest.mark.timeout(400)
def test_a_supervisor_killed_under_20_running_and_100_waiting_loses_nothing(
    home: Path, tmux_env, tmp_path: Path
):
    """Issue 31's size: 20 jobs run and 100 wait when the supervisor is SIGKILLed. The next
    command (one more submit) starts another: every job ends as it would have (three past their wall
    deadline while no supervisor ran end `wall_timeout` at its first pass), each event is
    applied once (each `seq` received once), and the queue runs to its end."""
    from delegate.core.timefmt import parse_timestamp
    from delegate.runtime.monitor import DEFAULT_INTERVAL_S

    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text("max_running = 20\n")
    lines = ['agent = "shell"', f'workdir = "{tmp_path}"', ""]
    for n in range(3):  # they outlive their wall deadline while no supervisor runs
        lines += ["[[jobs]]", f'name = "slow{n}"', 'prompt = "sleep 600"', "wall_timeout = 4", ""]
    script = "delegate publish --event progress --detail one; sleep 1"
    for n in range(117):
        lines += ["[[jobs]]", f'name = "j{n}"', f'prompt = "{script}"', ""]
    plan = tmp_path / "plan.toml"
    plan.write_text("\n".join(lines))
    made = run_cli(home, "submit", "--from-file", str(plan), env=tmux_env, timeout=120)
    assert made.returncode == 0, made.stderr
    ids = dict(line.split() for line in made.stdout.splitlines())
    slow = [ids[f"slow{n}"] for n in range(3)]
    state = open_state(home)

    def count(status: JobState) -> int:
        return sum(j.status is status for j in state.registry.open_jobs())

    first = retry_until(lambda: running_supervisor(state), timeout=30)
    retry_until(lambda: count(JobState.RUNNING) == 20, timeout=120)
    assert all(state.registry.get(j).status is JobState.RUNNING for j in slow)
    assert count(JobState.QUEUED) == 100
    os.kill(first, signal.SIGKILL)
    retry_until(lambda: running_supervisor(state) is None, timeout=10)
    deadlines = [
        parse_timestamp(str(state.registry.get(j).started_at)).timestamp() + 4 for j in slow
    ]
    retry_until(lambda: time.time() > max(deadlines) + 1, timeout=30)  # passed, unenforced
    assert all(state.registry.get(j).status is JobState.RUNNING for j in slow)
    assert count(JobState.QUEUED) > 0  # nothing launched them meanwhile
    revived = time.time()
    extra = submit_no_wait(home, tmux_env, tmp_path, script)  # the next command: more work
    again = retry_until(lambda: running_supervisor(state), timeout=30)
    assert again != first
    jobs = [*ids.values(), extra]
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in jobs), timeout=300)
    for job_id in slow:
        job = state.registry.get(job_id)
        assert job.status is JobState.ERROR and "wall_timeout" in str(job.error), job
        ended = parse_timestamp(job.updated_at).timestamp()
        assert ended - revived <= DEFAULT_INTERVAL_S, (ended - revived, job)  # its first pass
    quick = [j for j in jobs if j not in slow]
    assert {state.registry.get(j).status for j in quick} == {JobState.COMPLETED}
    _each_event_received_once(state, quick, timeout=60)
    assert len(_supervisors(home)) == 1
