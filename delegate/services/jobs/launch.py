"""Starting an admitted job in tmux.

Used by submit (a job that may start now) and by the reconciler (a queued job whose slot came
free, or a job whose launcher died before tmux started it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delegate.adapters.groups import GroupBook
from delegate.adapters.sessions_db import SessionError, SessionInventory
from delegate.adapters.tmux import (
    Tmux,
    TmuxError,
    alive,
    process_start,
    processes_of_job,
    terminate,
)
from delegate.config.profiles import max_running_caps, read_config
from delegate.config.settings import HOME_ENV, JOB_ENV, TMUX_SOCKET_ENV
from delegate.core.caps import Caps, Gate, busy_sessions, may_start
from delegate.core.errors import DelegateError
from delegate.core.model import Job, JobState, Session, SessionState
from delegate.services import worktrees
from delegate.services.jobs.finish import end_job
from delegate.services.state import State


def inventory(state: State) -> SessionInventory:
    return SessionInventory(state.layout.sessions_db)


def caps(state: State) -> Caps:
    """The caps every process reads: `max_running` of delegate.toml, global and per profile."""
    return max_running_caps(read_config(state.layout.home, state.env).tables)


def gate_for(
    state: State,
    jobs: Iterable[Job],
    now: datetime | None = None,
    known: Mapping[str, Job] | None = None,
) -> Gate:
    """What decides the start of `jobs` besides the caps: the states of the jobs they wait for
    (by their latest attempts; `known`: open jobs just read), the queue groups' rules and the
    time (retry backoffs)."""
    jobs = list(jobs)
    # a dependency not found (or unreadable) is left out: one that can never succeed
    wanted = {dep for job in jobs for dep in job.after or ()}
    dependencies = state.job_states(wanted, known)
    groups = GroupBook(state.layout.groups_book).rules() if any(j.group for j in jobs) else {}
    return Gate(dependencies, groups, now or datetime.now(UTC))


def busy_now(state: State) -> dict[str, str | None]:
    """Job id -> agent of the sessions still recorded running a job (they hold their slots)."""
    return busy_sessions(inventory(state).live())


def start_policy(state: State, cap: Caps) -> Callable[[Job, list[Job]], bool]:
    """The start check the registry runs under its lock: its dependencies, its group, open jobs,
    and sessions still running."""

    def decide(job: Job, others: list[Job]) -> bool:
        return may_start(job, others, cap, busy_now(state), gate_for(state, [job]))

    return decide


# The launcher of a host job once its assignment is sent: no process (so never alive), and not
# None either, which a claimer that saw the job still queued expects (claim_launch): such a
# claimer must not take a job already sent, or the host is sent it twice.
SENT_TO_HOST = {"sent_to_host": True}


def this_launcher() -> dict[str, Any]:
    """This process as a launcher: its pid and start time (a reused pid has another)."""
    return {"pid": os.getpid(), "start": process_start(os.getpid())}


def launcher_alive(launcher: Mapping[str, Any] | None) -> bool:
    if not launcher:
        return False
    pid = launcher.get("pid")
    # a launcher killed but not yet reaped (its parent gone, the reaper slow) is a zombie: it
    # keeps its pid and start time, yet will never launch anything
    return isinstance(pid, int) and process_start(pid) == launcher.get("start") and alive(pid)


def tmux_for(state: State, job: Job) -> Tmux:
    """The tmux server a job lives on: its recorded socket, else this environment's."""
    return Tmux(job.tmux_socket, state.env) if job.tmux_socket else Tmux.from_env(state.env)


def check_session_free(state: State, name: str) -> None:
    """Raise SessionError when session `name` hosts a job that has not ended."""
    row = inventory(state).get(name)
    if row is None or row.job_id is None or row.state is not SessionState.RUNNING:
        return
    try:
        hosted = state.registry.get(row.job_id)
    except DelegateError:
        return
    if not hosted.status.terminal:
        raise SessionError(f"session {name} is busy with job {hosted.job_id} ({hosted.status})")


def launch_in_tmux(state: State, job: Job, tmux: Tmux) -> bool:
    """Start the job's wrapper in its session; a session left by an ended job is replaced.

    False when the session already runs this very job (nothing was started). A job with its
    own worktree gets it made first (for a queued job: now, not at submit)."""
    job = worktrees.ensure(state, job)
    assert job.session is not None
    # Only what the wrapper needs to find its job; the agent's own environment is in
    # logs/<job>/agent.env and never passes through tmux's argv or its global environment.
    env = {
        JOB_ENV: job.job_id,
        HOME_ENV: str(state.layout.home),
        TMUX_SOCKET_ENV: tmux.socket_path,
    }
    sessions = inventory(state)
    previous = sessions.get(job.session)
    ended = None
    if previous is not None and previous.job_id != job.job_id:
        check_session_free(state, job.session)
        ended = previous.job_id  # its job has ended, whatever its row still says
    # Recorded before tmux starts: a fast job may end, and its supervisor look the session up,
    # before tmux.start() even returns.
    sessions.record_start(
        job.session,
        job_id=job.job_id,
        agent=job.agent,
        workdir=job.workdir,
        pane_pid=None,
        socket=tmux.socket_path,
        replacing=ended,
    )
    wrapper = [sys.executable, "-m", "delegate.runtime.wrapper", job.job_id]
    try:
        pane_pid, adopted = None, False
        if previous is None:  # a name never used: start it, without asking tmux first
            pane_pid = _start_new(tmux, job, wrapper, env)
        if pane_pid is None:
            pane_pid, adopted = _start_in_place(tmux, job, wrapper, env, previous)
    except BaseException:
        sessions.set_state(
            job.session, SessionState.TERMINATED, reason="launch failed", job_id=job.job_id
        )
        raise
    sessions.set_pane_pid(job.session, pane_pid)
    return not adopted


def _start_new(tmux: Tmux, job: Job, wrapper: list[str], env: dict[str, str]) -> int | None:
    """Start the job's session under a name no job used; None when tmux has a session of that
    name after all (made outside delegate): then it is handled as a used one."""
    assert job.session is not None
    try:
        return tmux.start(
            job.session, wrapper, workdir=Path(job.workdir or "."), env=env, job_id=job.job_id
        )
    except TmuxError as exc:
        if "duplicate session" in str(exc):
            return None
        raise


def _start_in_place(
    tmux: Tmux, job: Job, wrapper: list[str], env: dict[str, str], previous: Session | None
) -> tuple[int, bool]:
    """Start the job in a session name that hosted jobs before: a new session when tmux has
    none of that name, its pane respawned when it has. (pane pid, whether this very job was
    found running there and adopted rather than started)."""
    assert job.session is not None
    workdir = Path(job.workdir or ".")
    panes = [p for p in tmux.panes(owned_only=False) if p.session == job.session]
    running = [p for p in panes if p.job_id == job.job_id and not p.dead]
    if running:
        # This very job already runs there (a launcher we took for dead had launched it):
        # respawning would kill it with SIGHUP. Adopt the pane instead.
        return running[0].pid, True
    if not panes:
        started = tmux.start(job.session, wrapper, workdir=workdir, env=env, job_id=job.job_id)
        return started, False
    # The session of an ended job (kept for inspection, or stopped to be resumed): the same
    # tmux session goes on, its pane respawned, once what is left of that job ends.
    old_job = previous.job_id if previous is not None else None
    if old_job and old_job != job.job_id:
        terminate([], processes_of_job(old_job), grace_s=2.0)
    pane_pid = tmux.respawn(job.session, wrapper, workdir=workdir, env=env, job_id=job.job_id)
    return pane_pid, False


def claim_and_launch(
    state: State, job_id: str, *, expected_launcher: Mapping[str, Any] | None, cap: Caps
) -> Job | None:
    """Claim a queued (or abandoned pending) job and start it; None when not ours to start
    (claimed by another, no slot free, or found already running in its session).

    A launch that fails ends the job with `never_launched` and the reason.
    """
    job = state.registry.claim_launch(
        job_id,
        this_launcher(),
        expected_launcher=dict(expected_launcher) if expected_launcher is not None else None,
        may_start=start_policy(state, cap),
    )
    if job is None:
        return None
    try:
        if job.host is not None:
            # services.remote (uuid, platform, the MQTT wire): a local job's path goes without
            from delegate.services.remote import assign

            # its submit died before sending it, or its retry backoff has passed; the host
            # takes an id once
            assign(state, job)
            # sent: from now its assignment's time judges it, as for a submit that exits once
            # it sent it (a supervisor or monitor that claimed it lives on, and a live
            # launcher's job is never judged)
            return state.registry.update(job.job_id, stamp=False, launcher=dict(SENT_TO_HOST))
        started = launch_in_tmux(state, job, tmux_for(state, job))
    except DelegateError as exc:
        cause = {"source": "launcher", "observed": True, "error": str(exc)}
        reason = f"never_launched: {exc}"
        end_job(state, job_id, JobState.ERROR, reason=reason, actor="launch", cause=cause)
        raise
    return job if started else None
