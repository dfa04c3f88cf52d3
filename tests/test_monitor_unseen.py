"""Never act on not knowing (issue 20, item 6): a tmux server out of sight is not a dead one.

Real tmux on an isolated socket, real monitors and supervisors: the socket file is moved aside
(as a /tmp cleaner does) or deleted for good while the server and its agents run on, tmux is
made unaskable for longer than the grace, and an event arrives for a job already ended.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from delegate.adapters.tmux import alive, listening_server
from delegate.core.model import JobState, SessionState

from .helpers import json_lines, retry_until, run_cli
from .test_monitor import (
    _publish_raw,
    kill_supervisor,
    monitor_once,
    open_state,
    pane_pid,
    session_of,
    start_monitor,
    stop_monitor,
    submit_no_wait,
    wait_running,
)
from .tmux_fixtures import socket_path

# An agent that waits for the test to say `go`, then finishes with its own outcome.
WAIT_FOR_GO = "while [ ! -e {go} ]; do sleep 0.1; done; echo finished > {out}"


def _jobs_waiting_for_go(home: Path, env: dict[str, str], tmp_path: Path, n: int) -> list[str]:
    ids = []
    for i in range(n):
        prompt = WAIT_FOR_GO.format(go=tmp_path / "go", out=tmp_path / f"out{i}")
        ids.append(submit_no_wait(home, env, tmp_path, prompt))
    for job_id in ids:
        wait_running(home, job_id)
    return ids


def test_a_socket_moved_aside_for_three_intervals_changes_nothing(
    home: Path, tmux_env, tmp_path: Path
):
    ids = _jobs_waiting_for_go(home, tmux_env, tmp_path, 2)
    panes = {job_id: pane_pid(home, job_id) for job_id in ids}
    path = socket_path(tmux_env["DELEGATE_TMUX_SOCKET"])
    server = listening_server(path)
    assert server is not None
    monitor = start_monitor(home, tmux_env, "--interval", "1")
    try:
        time.sleep(1.5)  # the monitor has made its first pass
        os.rename(path, path + ".aside")
        time.sleep(3.5)  # three intervals and more
        state = open_state(home)
        for job_id in ids:
            assert state.registry.get(job_id).status is JobState.RUNNING
            assert session_of(home, job_id).state is SessionState.RUNNING
            assert alive(panes[job_id])
        assert listening_server(path) == server  # the same server, never killed
        os.replace(path + ".aside", path)  # the cleaner puts it back
        time.sleep(1.5)
        (tmp_path / "go").touch()
        for job_id in ids:
            retry_until(lambda j=job_id: state.registry.get(j).status.terminal, timeout=30)
    finally:
        out, _err = stop_monitor(monitor)
    for i, job_id in enumerate(ids):
        job = state.registry.get(job_id)
        assert job.status is JobState.COMPLETED, job  # their agents' own outcome
        assert (tmp_path / f"out{i}").read_text() == "finished\n"
        assert [e for e in state.audit.read_events(job_id, kind="reconciled")
                if e["action"] in ("fail_job", "kill_session")] == []  # fmt: skip
    printed = json_lines(out)
    assert not [line for line in printed if line["action"] in ("fail_job", "kill_session")]


def test_a_socket_deleted_for_good_is_made_again_not_taken_for_dead(
    home: Path, tmux_env, tmp_path: Path
):
    (job_id,) = _jobs_waiting_for_go(home, tmux_env, tmp_path, 1)
    path = socket_path(tmux_env["DELEGATE_TMUX_SOCKET"])
    server = listening_server(path)
    os.unlink(path)

    actions = monitor_once(home, tmux_env)

    assert [a for a in actions if a["action"] in ("fail_job", "kill_session")] == []
    assert os.path.exists(path) and listening_server(path) == server  # SIGUSR1 made it again
    state = open_state(home)
    assert state.registry.get(job_id).status is JobState.RUNNING
    (tmp_path / "go").touch()
    retry_until(lambda: state.registry.get(job_id).status is JobState.COMPLETED, timeout=30)


def test_tmux_unaskable_past_the_grace_ends_the_job_lost_and_kills_nothing_until_seen(
    home: Path, tmux_env, tmp_path: Path
):
    (job_id,) = _jobs_waiting_for_go(home, tmux_env, tmp_path, 1)
    (home / "delegate.toml").write_text("[monitor]\nlost_after_s = 2\n")
    wrapper = pane_pid(home, job_id)
    # its supervisor, which sees tmux, would end each episode the blind monitor begins
    kill_supervisor(home, job_id)
    blind = {**tmux_env, "PATH": str(tmp_path / "no-tmux-here")}  # tmux cannot be run
    state = open_state(home)

    first = monitor_once(home, blind)
    assert [a["action"] for a in first] == ["skip_socket"]
    assert first[0]["jobs"] == [job_id]
    assert monitor_once(home, blind) == []  # once per episode, not per pass
    assert state.registry.get(job_id).status is JobState.RUNNING
    time.sleep(2.2)
    lost = monitor_once(home, blind)

    job = state.registry.get(job_id)
    assert job.status is JobState.ERROR and job.error is not None
    assert job.error.startswith("lost: tmux on ") and "grace 2 s" in job.error, job.error
    assert [a["action"] for a in lost] == ["fail_job"]
    assert alive(wrapper) and session_of(home, job_id).state is SessionState.RUNNING
    unseen = state.audit.read_events(job_id, kind="unseen")
    assert len(unseen) == 1 and "binary was not found" in unseen[0]["reason"]
    # seen again: the episode ends, and the session of the job it lost is killed
    seen = monitor_once(home, tmux_env)
    assert [a["action"] for a in seen] == ["seen_again", "kill_session"]
    retry_until(lambda: not alive(wrapper), timeout=15)
    assert len(state.audit.read_events(job_id, kind="seen_again")) == 1


def test_an_event_for_an_ended_job_is_audited_late_with_its_envelope(
    home: Path, tmux_env, tmp_path: Path
):
    (job_id,) = _jobs_waiting_for_go(home, tmux_env, tmp_path, 1)
    cancelled = run_cli(home, "cancel", job_id, env=tmux_env)
    assert cancelled.returncode == 0, cancelled.stderr
    state = open_state(home)
    monitor = start_monitor(home, tmux_env, "--interval", "1")
    try:
        time.sleep(1.5)  # subscribed
        _publish_raw(state, job_id, "completed", "done after all")
        late = retry_until(lambda: state.audit.read_events(job_id, kind="late_event"), timeout=15)
    finally:
        stop_monitor(monitor)
    assert len(late) == 1
    assert late[0]["event"] == "completed" and late[0]["envelope"]["detail"] == "done after all"
    assert "cancelled" in late[0]["note"]
    assert state.registry.get(job_id).status is JobState.CANCELLED  # its state stays
