"""Submitting a job to an agent in tmux, supervising it, and cancelling it.

Order of a submit: register the job; write the prompt file; start the subscriber and wait until
it is subscribed (a ready file, no sleeping and hoping); start the wrapper in a tmux session;
record the session. The supervisor is the subscriber plus what follows an ending: a timed-out
job's session is killed with every process in it, a finished job's session is marked stopped.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import DelegateError, UsageError
from ..fsio import atomic_write, path_with
from ..model import Job, JobState, SessionState
from ..profiles import Profile, config_path, load_config, resolve
from ..sessions import SessionInventory
from ..tmux import Tmux, validate_session_name
from .jobs import register_job
from .state import State
from .watch import EXIT_CANCELLED, EXIT_TIMEOUT, Watcher, WatchOutcome

SKILL_FILE = Path(__file__).resolve().parents[2] / "skills" / "delegate-job" / "SKILL.md"
READY_TIMEOUT_S = 15.0
SESSION_PREFIX = "dlg-"


class SubmitRequest(NamedTuple):
    prompt: bytes
    agent: str | None = None
    cmd: str | None = None
    workdir: Path | None = None
    session: str | None = None
    wall_timeout_s: float | None = None
    idle_timeout_s: float | None = None
    bus_url: str | None = None
    idempotency_key: str | None = None


class SubmitResult(NamedTuple):
    job: Job
    created: bool
    outcome: WatchOutcome | None = None


def preamble() -> str:
    """The reporting instructions for AI agents: the skill file without its front matter."""
    try:
        text = SKILL_FILE.read_text(encoding="utf-8")
    except OSError:
        return "Report with `delegate publish --event progress|completed|error --detail TEXT`.\n"
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4 :]
    return text.strip() + "\n"


def build_prompt(profile: Profile, prompt: bytes) -> bytes:
    if not profile.preamble:
        return prompt
    return preamble().encode("utf-8") + b"\n---\n\n" + prompt


def inventory(state: State) -> SessionInventory:
    return SessionInventory(state.layout.sessions_db)


def _tmux(state: State, tmux: Tmux | None) -> Tmux:
    return tmux or Tmux.from_env(state.env)


def submit(
    state: State,
    request: SubmitRequest,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None] = lambda envelope: None,
    tmux: Tmux | None = None,
) -> SubmitResult:
    config_file = config_path(state.layout.home, state.env)
    profile = resolve(
        agent=request.agent, cmd=request.cmd, config=load_config(config_file), source=config_file
    )
    workdir = (request.workdir or Path.cwd()).expanduser().absolute()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    if request.session is not None:
        validate_session_name(request.session)

    job, created = register_job(
        state,
        agent=profile.name,
        command=" ".join(profile.command),
        workdir=str(workdir),
        session=request.session,
        wall_timeout_s=request.wall_timeout_s,
        idle_timeout_s=request.idle_timeout_s,
        idempotency_key=request.idempotency_key,
        bus_url=request.bus_url,
    )
    if not created:  # the same idempotency key: never launch twice
        outcome = Watcher(state, job.job_id, emit=emit).run() if wait else None
        return SubmitResult(job, False, outcome)

    job_dir = state.audit.job_dir(job.job_id, create=True)
    prompt_path = job_dir / "prompt"
    atomic_write(prompt_path, build_prompt(profile, request.prompt))
    session = request.session or f"{SESSION_PREFIX}{job.job_id}"
    launch = {
        "argv": profile.argv(prompt_file=prompt_path, workdir=workdir, job_id=job.job_id),
        "prompt": profile.prompt,
        "prompt_path": str(prompt_path),
        "clean_exit": profile.clean_exit,
    }
    job = state.registry.update(job.job_id, session=session, launch=launch)

    watcher: Watcher | None = None
    try:
        if wait:
            watcher = Watcher(state, job.job_id, emit=emit)  # subscribed on construction
        else:
            start_detached_supervisor(state, job.job_id)
        launch_in_tmux(state, job, _tmux(state, tmux))
    except BaseException as exc:
        if watcher is not None:
            watcher.close()
        reason = f"launch_failed: {exc}" if isinstance(exc, DelegateError) else "launch_failed"
        state.registry.finish_if_open(job.job_id, JobState.ERROR, reason=reason)
        raise
    if watcher is None:
        return SubmitResult(state.registry.get(job.job_id), True)
    try:
        ended = watcher.run()
    except KeyboardInterrupt:
        # The person stopped waiting, not the job: hand it to a detached supervisor so its
        # timeouts and session still get looked after.
        start_detached_supervisor(state, job.job_id)
        raise
    outcome = follow_up(state, job.job_id, ended, tmux=tmux)
    return SubmitResult(state.registry.get(job.job_id), True, outcome)


def launch_in_tmux(state: State, job: Job, tmux: Tmux) -> None:
    assert job.session is not None
    env = {
        "DELEGATE_JOB_ID": job.job_id,
        "DELEGATE_HOME": str(state.layout.home),
        "DELEGATE_BUS": state.bus_url_for(job),
        "PATH": path_with(str(Path(sys.executable).parent), state.env.get("PATH")),
    }
    if tmux.socket_name:
        env["DELEGATE_TMUX_SOCKET"] = tmux.socket_name
    # Recorded before tmux starts: a fast job may end, and its supervisor look the session up,
    # before tmux.start() even returns.
    sessions = inventory(state)
    sessions.record_start(
        job.session, job_id=job.job_id, agent=job.agent, workdir=job.workdir, pane_pid=None
    )
    try:
        pane_pid = tmux.start(
            job.session,
            [sys.executable, "-m", "delegate.wrapper", job.job_id],
            workdir=Path(job.workdir or "."),
            env=env,
            job_id=job.job_id,
        )
    except BaseException:
        sessions.set_state(job.session, SessionState.TERMINATED, reason="launch failed")
        raise
    sessions.set_pane_pid(job.session, pane_pid)


def start_detached_supervisor(state: State, job_id: str) -> subprocess.Popen[bytes]:
    """Start `python -m delegate.supervisor` detached, and return once it is subscribed."""
    job_dir = state.audit.job_dir(job_id, create=True)
    ready = job_dir / "subscriber.ready"
    ready.unlink(missing_ok=True)
    out = os.open(job_dir / "subscriber.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    err = os.open(job_dir / "subscriber.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    env = {**state.env, "DELEGATE_HOME": str(state.layout.home)}
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "delegate.supervisor", job_id, "--ready-file", str(ready)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env=env,
            start_new_session=True,  # outlives the terminal that submitted
            close_fds=True,
        )
    finally:
        os.close(out)
        os.close(err)
    deadline = time.monotonic() + READY_TIMEOUT_S
    pause = 0.001
    while not ready.exists():
        if process.poll() is not None:
            raise DelegateError(f"the subscriber for job {job_id} exited before it was ready")
        if time.monotonic() > deadline:
            process.kill()
            raise DelegateError(f"the subscriber for job {job_id} was not ready in time")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.01)
    return process


def follow_up(
    state: State, job_id: str, outcome: WatchOutcome, *, tmux: Tmux | None = None
) -> WatchOutcome:
    """After a job ends: kill the session of a timed-out or cancelled job; mark others stopped."""
    job = state.registry.get(job_id)
    if not job.session:
        return outcome
    sessions = inventory(state)
    if sessions.get(job.session) is None:
        return outcome
    if outcome.exit_code in (EXIT_TIMEOUT, EXIT_CANCELLED):
        _tmux(state, tmux).kill(job.session)
        reason = outcome.reason if outcome.exit_code == EXIT_TIMEOUT else "cancelled"
        sessions.set_state(job.session, SessionState.TERMINATED, reason=f"job {job_id} {reason}")
    else:
        sessions.set_state(job.session, SessionState.STOPPED, reason=f"job {job_id} {job.status}")
    return outcome


def supervise(
    state: State,
    job_id: str,
    *,
    emit: Callable[[dict[str, Any]], None],
    on_ready: Callable[[], None] = lambda: None,
) -> WatchOutcome:
    watcher = Watcher(state, job_id, emit=emit)
    try:
        on_ready()
    except BaseException:
        watcher.close()
        raise
    return follow_up(state, job_id, watcher.run())


def cancel(state: State, job_id: str, *, tmux: Tmux | None = None) -> Job:
    """Cancel a job; if it runs in a session, kill the agent and its whole process tree."""
    job = state.registry.cancel(job_id)
    if job.session:
        sessions = inventory(state)
        if sessions.get(job.session) is not None:
            _tmux(state, tmux).kill(job.session)
            sessions.set_state(
                job.session, SessionState.TERMINATED, reason=f"job {job_id} cancelled"
            )
    return job


def read_prompt(
    *, text: str | None, file: Path | None, stdin: Any, env: Mapping[str, str] | None = None
) -> bytes:
    """`--prompt TEXT`, `--prompt -` (stdin) or `--prompt-file PATH`, as exact bytes."""
    if text is not None and file is not None:
        raise UsageError("give --prompt or --prompt-file, not both")
    if file is not None:
        try:
            return file.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read --prompt-file {file}: {exc.strerror}") from None
    if text == "-":
        data: bytes = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read()
        return data
    if text is None:
        raise UsageError("give --prompt TEXT, --prompt - (stdin) or --prompt-file PATH")
    return text.encode("utf-8", "surrogateescape")
