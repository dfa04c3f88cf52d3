"""The monitor under load and races: the queue, two monitors at once, cancel against completed,
notifiers, and a broker that goes away before the agent ends."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from delegate.adapters.sessions_db import SessionInventory
from delegate.core.model import JobState
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.submit import cancel as cancel_job
from delegate.services.jobs.watch import Watcher, exit_code_for
from delegate.services.state import State

from .helpers import json_lines, retry_until, run_cli, submit_shell
from .mqtt_fixtures import free_port
from .test_monitor import (
    kill_supervisor,
    monitor_once,
    open_state,
    pane_pid,
    start_monitor,
    stop_monitor,
    submit_no_wait,
    supervisor_pid,
    wait_running,
)


def test_max_running_2_with_6_jobs(home: Path, tmux_env, tmp_path: Path):
    ids = []
    for i in range(6):
        result = submit_shell(
            home,
            tmux_env,
            tmp_path,
            f"sleep 2; echo {i} >> order.txt",
            "--no-wait",
            "--json",
            "--max-running",
            "2",
        )
        assert result.returncode == 0, result.stderr
        ids.append(json.loads(result.stdout)["job_id"])
        if i >= 2:
            assert "queued at position" in result.stderr
    ps = json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)
    positions = [r["queue_position"] for r in ps if r["job_state"] == "queued"]
    assert positions == list(range(1, len(positions) + 1))  # shown in queue order
    state = open_state(home)
    retry_until(
        lambda: all(state.registry.get(j).status is JobState.COMPLETED for j in ids), timeout=90
    )
    # never more than two at once: each job from its launch (its session recorded running) to
    # its end (its record's terminal change). Not the sessions alone: an ended job's session is
    # closed by its supervisor a moment after the end, and the next job may launch before that.
    # A job's launch is the first time its session was recorded running for it: a launcher
    # that finds the job already running in its pane records it again and adopts the pane (no
    # second run: order.txt below holds each job once).
    history = SessionInventory(state.layout.sessions_db).history()
    shown = "\n".join(map(str, history))
    marks: list[tuple[datetime, int]] = []
    for job_id in ids:
        launches = [e.at for e in history if e.state == "running" and e.job_id == job_id]
        assert launches, shown
        marks.append((parse_timestamp(launches[0]), +1))
        [ended] = [
            e
            for e in state.audit.read_events(job_id, "status_changed")
            if e["status"] == "completed"
        ]
        marks.append((parse_timestamp(ended["ts"]), -1))
    running, most = 0, 0
    for _, step in sorted(marks):  # (an end and a launch at the same instant: the end first)
        running += step
        most = max(most, running)
    assert len(marks) == 2 * len(ids) and most == 2, shown
    # started oldest first
    jobs = [state.registry.get(j) for j in ids]
    starts = [parse_timestamp(j.started_at or "") for j in jobs]
    assert starts == sorted(starts)
    order = (tmp_path / "order.txt").read_text().split()
    assert sorted(order) == [str(i) for i in range(6)], shown  # each job ran once
    assert order[:2] in (["0", "1"], ["1", "0"])


def _race_once(state: State, cancel_delay_s: float):
    """One job, one watcher, then a `completed` publish and a `cancel` released together."""
    from delegate.core.errors import IllegalTransition, PublishRefused

    job, _ = state.registry.register(idle_timeout_s=60)
    publish_event(state, job.job_id, "started")
    result = {}
    subscribed = threading.Event()

    def watch() -> None:
        watcher = Watcher(state, job.job_id)  # SQLite connections stay in their thread
        subscribed.set()
        result["outcome"] = watcher.run()

    thread = threading.Thread(target=watch)
    thread.start()
    assert subscribed.wait(10)
    barrier = threading.Barrier(2)

    def complete() -> None:
        barrier.wait()
        with contextlib.suppress(PublishRefused):  # the cancel was first
            publish_event(state, job.job_id, "completed")

    def cancel() -> None:
        barrier.wait()
        time.sleep(cancel_delay_s)
        with contextlib.suppress(IllegalTransition):  # the completion was first
            cancel_job(state, job.job_id)

    racers = [threading.Thread(target=complete), threading.Thread(target=cancel)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join()
    thread.join(30)
    return result["outcome"], state.registry.get(job.job_id)


def test_cancel_racing_completed_exit_code_and_registry_agree(home: Path):
    state = State.open(env={"DELEGATE_HOME": str(home)})
    outcomes: Counter[str] = Counter()
    for round_ in range(50):
        outcome, final = _race_once(state, (round_ % 25) * 0.0004)
        assert outcome.exit_code == exit_code_for(final), (outcome, final.status)
        assert outcome.status == final.status.value
        outcomes[final.status.value] += 1
    assert sum(outcomes.values()) == 50
    # the delays spread the cancel across the publish, so both sides won some rounds
    assert outcomes["completed"] > 0 and outcomes["cancelled"] > 0, outcomes


NOTIFIER = """#!/bin/sh
cat >> "{out}"
"""

PERMISSION_AGENT = """
delegate publish --event permission_required --detail "may I run rm?"
while [ ! -e go ]; do sleep 0.05; done
"""


def test_the_notifier_hears_each_event_once(home: Path, tmux_env, tmp_path: Path):
    notifier = tmp_path / "notify.sh"
    heard = tmp_path / "heard.ndjson"
    notifier.write_text(NOTIFIER.format(out=heard))
    notifier.chmod(0o755)
    monitor = start_monitor(home, tmux_env, "--interval", "0.5")
    try:
        job_id = submit_no_wait(
            home, tmux_env, tmp_path, PERMISSION_AGENT, "--on-event", f"{notifier} --flag"
        )
        retry_until(lambda: heard.exists() and heard.read_text().count("\n") >= 1, timeout=30)
        (tmp_path / "go").touch()
        state = open_state(home)
        retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
        retry_until(lambda: heard.read_text().count("\n") >= 2, timeout=30)
        time.sleep(1)  # a second notification, were there one, would have come by now
    finally:
        stop_monitor(monitor)
    events = json_lines(heard.read_text())
    assert [e["event"] for e in events] == ["permission_required", "completed"]
    assert events[0]["detail"] == "may I run rm?" and events[0]["job_id"] == job_id
    notified = state.audit.read_events(job_id, kind="notified")
    assert [(n["event"], n["argv"]) for n in notified] == [
        ("permission_required", [str(notifier), "--flag"]),
        ("completed", [str(notifier), "--flag"]),
    ]


def test_a_hanging_notifier_delays_nothing_past_its_limit(home: Path, tmux_env, tmp_path: Path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[notify]\ncommand = ["sleep", "60"]\nevents = ["permission_required", "completed"]\n'
    )
    started = time.monotonic()
    job_id = submit_no_wait(
        home,
        {**tmux_env, "DELEGATE_SUPERVISOR_QUIET_S": "1"},  # it leaves a second after the job
        tmp_path,
        'delegate publish --event permission_required --detail "ok?"; echo done > out.txt',
    )
    state = open_state(home)
    supervisor = supervisor_pid(home, job_id)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    assert time.monotonic() - started < 10  # the job did not wait for its notifier
    assert (tmp_path / "out.txt").read_text() == "done\n"
    retry_until(lambda: not os.path.exists(f"/proc/{supervisor}"), timeout=20)
    assert time.monotonic() - started < 25  # the supervisor waited at most the 10 s limit
    failures = state.audit.read_events(job_id, kind="notify_failed")
    assert failures and all("killed after 10 s" in f["reason"] for f in failures)


def test_two_monitors_over_20_jobs_act_once_each(home: Path, tmux_env, tmp_path: Path):
    ids = [
        submit_no_wait(home, tmux_env, tmp_path, f"while [ ! -e go{i} ]; do sleep 0.05; done")
        for i in range(20)
    ]
    for job_id in ids:
        wait_running(home, job_id)
        kill_supervisor(home, job_id)  # the monitors are on their own
    monitors = [
        start_monitor(home, tmux_env, "--interval", "0.3", "--keep-finished", "1") for _ in range(2)
    ]
    state = open_state(home)
    try:
        for i, job_id in enumerate(ids):
            if i % 2:
                os.kill(pane_pid(home, job_id), signal.SIGKILL)
            else:
                (tmp_path / f"go{i}").touch()
            time.sleep(0.05)
        retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=60)
        sessions = SessionInventory(state.layout.sessions_db)
        retry_until(
            lambda: all(
                sessions.get(f"dlg-{j}").state.value == "terminated"
                for j in ids  # type: ignore[union-attr]
            ),
            timeout=60,
        )
    finally:
        outs = [stop_monitor(m)[0] for m in monitors]
    for i, job_id in enumerate(ids):
        job = state.registry.get(job_id)
        entries = state.audit.read_events(job_id, kind="reconciled")
        kinds = Counter((e["action"], e.get("session"), e.get("state")) for e in entries)
        assert all(n == 1 for n in kinds.values()), (job_id, kinds)
        if i % 2:
            assert job.error and job.error.startswith("agent_exited"), job
            assert kinds[("fail_job", None, None)] == 1
        else:
            assert job.status is JobState.COMPLETED
        # the session ended once: killed by one monitor (the other, seeing it gone a moment
        # later, may be the one whose "terminated" lands; either way one transition)
        ended = [
            key
            for key in kinds
            if key[0] == "kill_session" or (key[0] == "set_session" and key[2] == "terminated")
        ]
        assert len(ended) == 1, (job_id, kinds)
    printed = [json.loads(line) for out in outs for line in out.splitlines() if line.strip()]
    taken = Counter(
        (p["action"], p["job_id"], p.get("state"))
        for p in printed
        if p["action"] != "orphan" and not p.get("note", "").startswith("failed")
    )
    assert all(n == 1 for n in taken.values()), taken


def test_broker_stopped_before_the_agent_ends(home: Path, tmux_env, tmp_path: Path, own_broker):
    env = {**tmux_env, "DELEGATE_BUS": own_broker.url}
    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_BUS": own_broker.url})

    def status_of(job_id: str) -> JobState:
        return state.registry.get(job_id).status

    for outcome, script in (("completed", "exit 0"), ("error", "exit 5")):
        gate = tmp_path / f"gate-{outcome}"
        result = submit_shell(
            home,
            env,
            tmp_path,
            f'while [ ! -e "{gate}" ]; do sleep 0.05; done; {script}',
            "--no-wait",
            "--json",
        )
        assert result.returncode == 0, result.stderr
        job_id = json.loads(result.stdout)["job_id"]
        retry_until(lambda j=job_id: status_of(j) is JobState.RUNNING, timeout=30)
        own_broker.stop()
        gate.touch()
        retry_until(lambda j=job_id: status_of(j).terminal, timeout=60)
        job = state.registry.get(job_id)
        assert job.status.value == outcome
        recorded = state.audit.read_events(job_id, kind="recorded_without_bus")
        assert len(recorded) == 1 and recorded[0]["event"] == outcome
        assert "bus unreachable" in recorded[0]["reason"]
        assert state.audit.read_events(job_id, kind="publish_failed")
        own_broker.start()


def test_a_started_the_bus_refused_does_not_strand_the_job(home: Path, tmp_path: Path):
    from delegate.core.caps import Caps, may_start

    url = f"mqtt://127.0.0.1:{free_port()}"  # nothing listens there
    state = State.open(env={"DELEGATE_HOME": str(home)})
    job, _ = state.registry.register(agent="cmd", workdir=str(tmp_path), bus={"url": url})
    state.registry.admit(
        job.job_id,
        {"argv": ["sh", "-c", "echo ran > ran.txt"], "prompt": "stdin", "prompt_path": ""},
        lambda j, others: may_start(j, others, Caps()),
    )
    wrapper = subprocess.run(
        [sys.executable, "-m", "delegate.runtime.wrapper", job.job_id],
        env={**os.environ, "DELEGATE_HOME": str(home), "DELEGATE_BUS": url},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert wrapper.returncode == 0, wrapper.stderr
    assert (tmp_path / "ran.txt").read_text() == "ran\n"
    final = state.registry.get(job.job_id)
    assert final.status is JobState.COMPLETED and final.started_at is not None
    recorded = state.audit.read_events(job.job_id, kind="recorded_without_bus")
    assert [r["event"] for r in recorded] == ["started", "completed"]
    assert all("bus unreachable" in r["reason"] for r in recorded)
    assert "Traceback" not in wrapper.stderr


def test_monitor_once_twice_changes_nothing_the_second_time(home: Path, tmux_env, tmp_path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, "sleep 300")
    wait_running(home, job_id)
    kill_supervisor(home, job_id)
    os.kill(pane_pid(home, job_id), signal.SIGKILL)
    first = monitor_once(home, tmux_env)
    assert {a["action"] for a in first} >= {"fail_job", "kill_session"}
    assert monitor_once(home, tmux_env) == []


def test_monitor_rejects_bad_flags_in_one_line(home: Path):
    for args in (["--interval", "0"], ["--keep-finished", "-1"], ["--interval", "x"]):
        result = run_cli(home, "monitor", "--once", *args)
        assert result.returncode == 64, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_the_systemd_unit_names_a_real_command():
    unit = Path(__file__).resolve().parent.parent / "examples" / "systemd"
    text = (unit / "delegate-monitor.service").read_text()
    assert "ExecStart=" in text and "delegate monitor" in text
    assert "KillSignal=SIGTERM" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    args = exec_start.split("=", 1)[1].split()
    assert args[1:3] == ["monitor", "--interval"]
    result = subprocess.run(
        [sys.executable, "-m", "delegate", *args[1:], "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_an_all_jobs_mqtt_listener_gets_no_retained_outcomes_even_after_reconnect(
    home: Path, own_broker
):
    from delegate.adapters.bus import open_bus

    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_BUS": own_broker.url})
    for _ in range(5):  # five past jobs, each with a retained outcome on the broker
        job, _ = state.registry.register(bus={"url": own_broker.url})
        publish_event(state, job.job_id, "started")
        publish_event(state, job.job_id, "completed")
    bus = open_bus(own_broker.url)
    sub = bus.subscribe(None, live_only=True)
    try:
        assert sub.get(timeout=1.0) is None
        live, _ = state.registry.register(bus={"url": own_broker.url})
        publish_event(state, live.job_id, "started")
        message = sub.get(timeout=10)
        assert message is not None and message.job_id == live.job_id
        sub.ack(message)
        # while an ordinary one-job subscriber still learns a past outcome at once
        one = open_bus(own_broker.url).subscribe(job.job_id)
        try:
            got = one.get(timeout=10)
            assert got is not None and json.loads(got.payload)["event"] == "completed"
        finally:
            one.close()
        own_broker.wait_for_save()  # our session (and its subscription) is on the broker's disk
        own_broker.kill()  # the broker goes away and comes back: the client reconnects
        own_broker.start()
        # publish until the reconnected listener hears one (it may still be reconnecting)
        message = None
        deadline = time.monotonic() + 30
        while message is None and time.monotonic() < deadline:
            publish_event(state, live.job_id, "progress")
            message = sub.get(timeout=1.0)
        assert message is not None and message.job_id == live.job_id
        assert json.loads(message.payload)["event"] == "progress"
        sub.ack(message)
        while (more := sub.get(timeout=1.0)) is not None:  # only the live job's progress,
            assert more.job_id == live.job_id  # no retained outcome of the five
            sub.ack(more)
    finally:
        sub.close()
        bus.close()


def test_a_monitor_over_mqtt_applies_what_a_dead_supervisor_missed(
    home: Path, tmux_env, tmp_path: Path, own_broker
):
    from .test_monitor import _publish_raw

    env = {**tmux_env, "DELEGATE_BUS": own_broker.url}
    job_id = submit_no_wait(home, env, tmp_path, "sleep 300")
    wait_running(home, job_id)
    kill_supervisor(home, job_id)
    monitor = start_monitor(home, env, "--interval", "30")
    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_BUS": own_broker.url})
    try:
        time.sleep(1.0)  # subscribed
        _publish_raw(state, job_id, "error", "failed on another machine")
        retry_until(lambda: state.registry.get(job_id).status is JobState.ERROR, timeout=20)
    finally:
        out, _err = stop_monitor(monitor)
    assert state.registry.get(job_id).error == "agent_error: failed on another machine"
    assert ("apply_event", job_id) in {(a["action"], a["job_id"]) for a in json_lines(out)}


def test_sigterm_to_the_wrapper_reaches_the_agent_and_names_the_signal(
    home: Path, tmux_env, tmp_path: Path
):
    marker = tmp_path / "got-term"
    ready = tmp_path / "trap-set"
    job_id = submit_no_wait(
        home,
        tmux_env,
        tmp_path,
        f'trap \'echo term > "{marker}"; exit 0\' TERM\ntouch "{ready}"\nsleep 300 &\nwait',
    )
    retry_until(ready.exists, timeout=30)
    state = open_state(home)
    os.kill(pane_pid(home, job_id), signal.SIGTERM)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=20)
    job = state.registry.get(job_id)
    assert job.status is JobState.ERROR and "SIGTERM" in (job.error or ""), job.error
    assert marker.read_text() == "term\n"  # the agent heard it, through its process group


def test_submit_wait_on_a_queued_job_waits_through_queue_and_run(
    home: Path, tmux_env, tmp_path: Path
):
    first = submit_no_wait(home, tmux_env, tmp_path, "sleep 1.5", "--max-running", "1")
    wait_running(home, first)
    result = submit_shell(
        home, tmux_env, tmp_path, "echo second > second.txt", "--max-running", "1", "--wait"
    )
    assert result.returncode == 0, result.stderr
    assert "queued at position 1" in result.stderr
    assert [e["event"] for e in json_lines(result.stdout)] == ["started", "completed"]
    state = open_state(home)
    second = state.registry.get(json_lines(result.stdout)[0]["job_id"])
    assert parse_timestamp(second.started_at or "") >= parse_timestamp(
        state.registry.get(first).last_event_at or ""
    )
