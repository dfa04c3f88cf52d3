"""A person's hand on sessions: list, stop (graceful, soft, hard), resume, send, peek, attach.

Stopping ends the job inside as `cancelled` with the mode in its reason, before the agent is
touched, so whatever the agent reports afterwards is refused (and audited as refused):
- graceful: the agent's process group gets SIGINT (or the profile's `stop = { signal = ... }`),
  SIGTERM after the timeout, SIGKILL after as long again; the tmux session stays with its dead
  pane, state `stopped`, ready for `resume`;
- soft: state `archived`, tmux and the agent left alive for a person to look at;
- hard: the tmux session and every process of the job killed, state `terminated`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.sessions_db import SessionError
from delegate.adapters.tmux import Tmux, alive, processes_of_job, validate_session_name
from delegate.config.profiles import config_path, profiles, read_config
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import Job, JobState, Session, SessionState
from delegate.services.jobs.finish import SessionMove, end_job, operator_cause
from delegate.services.jobs.launch import inventory, tmux_for
from delegate.services.jobs.retry import carried_usage, spec_of
from delegate.services.jobs.submit import SubmitRequest, submit
from delegate.services.state import State

STOP_MODES = ("graceful", "soft", "hard")
DEFAULT_STOP_TIMEOUT_S = 30.0


class SessionNotFound(DelegateError):
    exit_code = 66

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no session {name}")


class SessionView(NamedTuple):
    name: str
    state: str
    job_id: str | None
    jobs: list[str]
    agent: str | None
    workdir: str | None
    created_at: str
    conversation_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def _row(state: State, name: str) -> Session:
    validate_session_name(name)
    row = inventory(state).get(name)
    if row is None:
        raise SessionNotFound(name)
    return row


def _jobs_of(state: State, name: str) -> list[str]:
    hosted: list[str] = []
    for entry in inventory(state).history(name):
        if entry.job_id and entry.job_id not in hosted:
            hosted.append(entry.job_id)
    return hosted


def view(state: State, row: Session) -> SessionView:
    conversation = None
    if row.job_id:
        with contextlib.suppress(DelegateError):
            conversation = state.registry.get(row.job_id).conversation_id
    return SessionView(
        row.name,
        row.state.value,
        row.job_id,
        _jobs_of(state, row.name),
        row.agent,
        row.workdir,
        row.created_at,
        conversation,
    )


def list_sessions(state: State, *, show_all: bool = False) -> list[SessionView]:
    """Running and stopped sessions (with `show_all`, terminated and archived ones too)."""
    rows = inventory(state).list()
    if not show_all:
        rows = [r for r in rows if r.state in (SessionState.RUNNING, SessionState.STOPPED)]
    return [view(state, r) for r in rows]


def _ask_to_stop(state: State, job: Job, server: Tmux, name: str, groups: set[int]) -> None:
    """What the profile's `stop = {...}` says: `keys` (tmux key names typed into the pane, such
    as ["C-c"]), `command` (a line typed into the pane, such as "/exit"), or `signal` to the
    agent's process group (SIGINT when nothing is said)."""
    tables = read_config(state.layout.home, state.env).tables
    table = tables.get("profiles", {}).get(job.agent or "", {})
    stop = table.get("stop", {}) if isinstance(table, dict) else {}
    stop = stop if isinstance(stop, dict) else {}
    if isinstance(stop.get("keys"), list):
        server.send_key_names(name, [str(k) for k in stop["keys"]])
        return
    if isinstance(stop.get("command"), str):
        server.send_keys(name, stop["command"], enter=True)
        return
    signal_name = str(stop.get("signal", "SIGINT"))
    try:
        signum = int(signal.Signals[signal_name])
    except KeyError:
        raise UsageError(
            f"[profiles.{job.agent}] stop.signal {signal_name!r} is not a signal"
        ) from None
    _signal_groups(groups, signum)


def _agent_groups(job_id: str, wrapper_pid: int | None) -> set[int]:
    """Process groups of the job's agent (the wrapper's own group left out)."""
    groups = set()
    wrapper_group = None
    if wrapper_pid:
        with contextlib.suppress(OSError):
            wrapper_group = os.getpgid(wrapper_pid)
    for pid in processes_of_job(job_id):
        with contextlib.suppress(OSError):
            group = os.getpgid(pid)
            if group != wrapper_group:
                groups.add(group)
    return groups


def _signal_groups(groups: set[int], signum: int) -> None:
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)


def _wait_gone(job_id: str, wrapper_pid: int | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _agent_groups(job_id, wrapper_pid) and not (wrapper_pid and alive(wrapper_pid)):
            return True
        time.sleep(0.05)
    return False


def _check_stop_request(state: State, mode: str, timeout_s: float) -> None:
    """UsageError for a mode or timeout `session stop` does not take; ConfigError (from
    config_path) for a bad DELEGATE_CONFIG when the graceful mode will read the profile."""
    if mode not in STOP_MODES:
        raise UsageError(f"--mode must be one of {', '.join(STOP_MODES)}")
    if timeout_s < 0:
        raise UsageError("--timeout must be zero or more seconds")
    if mode == "graceful":  # it reads the profile's `stop`: a bad DELEGATE_CONFIG fails first
        config_path(state.layout.home, state.env)


def _stop_agent(
    state: State, job: Job, server: Tmux, name: str, pane_pid: int | None, timeout_s: float
) -> None:
    """Ask the agent to stop its profile's way; SIGTERM to its process groups when it has not
    after `timeout_s`, SIGKILL when they outlive as long again (at least a second)."""
    _ask_to_stop(state, job, server, name, _agent_groups(job.job_id, pane_pid))
    if _wait_gone(job.job_id, pane_pid, timeout_s):
        return
    _signal_groups(_agent_groups(job.job_id, pane_pid), signal.SIGTERM)
    if not _wait_gone(job.job_id, pane_pid, max(timeout_s, 1.0)):
        _signal_groups(_agent_groups(job.job_id, pane_pid), signal.SIGKILL)


def stop(
    state: State, name: str, *, mode: str, timeout_s: float = DEFAULT_STOP_TIMEOUT_S
) -> SessionView:
    _check_stop_request(state, mode, timeout_s)
    row = _row(state, name)
    sessions = inventory(state)
    target = {
        "graceful": SessionState.STOPPED,
        "soft": SessionState.ARCHIVED,
        "hard": SessionState.TERMINATED,
    }[mode]
    if row.state is not SessionState.RUNNING and not (
        mode == "hard" and row.state in (SessionState.STOPPED, SessionState.ARCHIVED)
    ):
        raise SessionError(
            f"session {name} is {row.state.value}; only a running one can be stopped"
        )
    job = state.registry.get(row.job_id) if row.job_id else None
    moved = SessionMove(name, target, f"session stop --mode {mode}", strict=True)
    settled = False
    if job is not None and not job.status.terminal:
        # The session's new state first (end_job writes it before the end): a supervisor or
        # monitor that sees the job cancelled next must find the session stopped or archived,
        # not running (which it would kill). Then the books: the agent's reports are refused.
        ending = end_job(
            state,
            job.job_id,
            JobState.CANCELLED,
            reason=f"session stopped ({mode})",
            actor="session stop",
            session=moved if mode != "hard" else None,
            cause=operator_cause(f"session stop --mode {mode}"),
        )
        job, settled = ending.job, ending.changed
    if mode != "hard" and not settled:  # no job, or it ended otherwise: the session still stops
        sessions.set_state(name, target, reason=moved.reason, job_id=row.job_id, strict=True)
    server = tmux_for(state, job) if job is not None else Tmux(row.socket, state.env)
    if mode == "graceful" and job is not None:
        _stop_agent(state, job, server, name, row.pane_pid, timeout_s)
    elif mode == "hard":
        server.kill(name, job_id=row.job_id)
        sessions.set_state(
            name, target, reason=f"session stop --mode {mode}", job_id=row.job_id, strict=True
        )
    return view(state, _row(state, name))


def resume(
    state: State, name: str, *, prompt: bytes | None, wait: bool, emit: Any
) -> tuple[Any, str]:
    """A new job in session `name` (stopped), continuing the agent's conversation where its
    profile can (`resume = [...]` with `{conversation_id}`), else afresh; returns the submit
    result and a sentence saying which."""
    row = _row(state, name)
    if row.state is not SessionState.STOPPED:
        raise SessionError(f"session {name} is {row.state.value}; only a stopped one resumes")
    if row.job_id is None:
        raise SessionError(f"session {name} never hosted a job")
    previous = state.registry.get(row.job_id)
    source, config = read_config(state.layout.home, state.env)
    known = profiles(config, source)
    agent, cmd = previous.agent, None
    if agent not in known:
        argv = list(previous.launch.get("argv") or [])
        if agent == "cmd" and len(argv) == 3:
            agent, cmd = None, argv[2]
        else:
            raise SessionError(f"session {name}: its agent profile {agent!r} is gone")
    profile = known.get(agent or "")
    conversation = previous.conversation_id
    if conversation and profile is not None and profile.resume:
        how = f"continues conversation {conversation}"
        prompt = prompt if prompt is not None else b"Continue where you left off.\n"
    else:
        conversation = None
        how = "started afresh: no conversation to continue"
        if previous.conversation_id:
            how = f"started afresh: the profile {agent!r} has no resume command"
        if prompt is None:
            raise UsageError(f"resume {how}; give --prompt or --prompt-file")
    # the whole spec of the job it follows (its budget, --no-mcp, group, ...), as a retry's
    spec = {
        **spec_of(state, previous),
        "agent": agent,
        "cmd": cmd,
        "workdir": Path(previous.workdir or "."),
        "session": name,
    }
    request = SubmitRequest(
        prompt=prompt,
        conversation_id=conversation,
        conversation_usage=carried_usage(previous, conversation),
        **spec,
    )
    return submit(state, request, wait=wait, emit=emit), how


def send(state: State, name: str, text: str, *, enter: bool = True, keys: bool = False) -> None:
    """Type `text` into the pane literally (tmux key names only with `keys`)."""
    row = _row(state, name)
    server = Tmux(row.socket, state.env)
    if keys:  # keys such as C-c reach the terminal's foreground group, whatever it reads
        server.send_key_names(name, text.split())
        return
    _check_reads_terminal(state, name, row)
    server.send_keys(name, text, enter=enter)


def _check_reads_terminal(state: State, name: str, row: Session) -> None:
    """Refuse, saying why, to type text that nothing would read: no job running in the
    session, or an agent whose stdin is its prompt (a pipe), not the pane's terminal."""
    if row.job_id is None:
        raise SessionError(f"session {name} hosts no job: nothing reads what is typed")
    job = state.registry.get(row.job_id)
    if job.status is not JobState.RUNNING:
        raise SessionError(
            f"session {name}: job {job.job_id} is {job.status.value}, so nothing reads what is"
            " typed"
        )
    if job.launch.get("prompt", "stdin") == "stdin":
        raise SessionError(
            f"session {name}: the agent of job {job.job_id} ({job.agent}) reads its prompt on"
            " stdin, not the terminal, so typed text would reach nothing (--keys still works)"
        )


def peek(state: State, name: str, *, lines: int = 20) -> list[str]:
    """The last `lines` non-blank lines the pane shows or holds in its history."""
    if lines < 1:
        raise UsageError("--lines must be a positive number")
    row = _row(state, name)
    text = Tmux(row.socket, state.env).capture(name, lines=None)
    # tmux's own "Pane is dead (status 0, ...)" note is not the agent's output
    kept = [
        line for line in text.splitlines() if line.strip() and not line.startswith("Pane is dead (")
    ]
    return kept[-lines:]


def attach_argv(state: State, name: str) -> list[str]:
    """The tmux command that attaches this terminal to session `name`."""
    row = _row(state, name)
    server = Tmux(row.socket, state.env)
    if not server.has_session(name):
        raise SessionError(f"session {name} is not in tmux any more ({row.state.value})")
    return ["tmux", "-S", server.socket_path, "attach-session", "-t", f"={name}"]
