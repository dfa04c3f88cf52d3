"""The agent wrapper: the process tmux runs in a pane (`python -m delegate.runtime.wrapper ID`).

It publishes `started` (seq 1) before the agent begins, hands the prompt over on stdin or as a
file (never through a shell string), copies the agent's output to the pane and to
`logs/<job_id>/agent.log`, and, when the agent ends without reporting `completed` or `error`,
reports one itself from the exit status as the profile says. So every job ends with a reason:
when the bus cannot take that report, the wrapper records the outcome in the registry itself
(it runs beside it) and audits why; a `started` the bus refused is recorded the same way, so the
job is not stranded pending.

The agent runs in its own process group. SIGHUP (tmux went away) or SIGTERM reaching the wrapper
is passed to that group; after a short grace the group is killed, and the job ends `error`
naming the signal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import zoneinfo
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path
from typing import IO, Any, NamedTuple

from delegate.adapters.fsio import path_with
from delegate.adapters.mcp_handover import socket_path as mcp_socket
from delegate.adapters.publish_socket import PublishServer, socket_path
from delegate.config import logsetup
from delegate.config.settings import (
    BUS_ENV,
    HOME_ENV,
    JOB_ENV,
    PATH_ENV,
    PUBLISH_SOCKET_ENV,
    process_env,
)
from delegate.coord.heartbeats import Beater
from delegate.core.approvals import (
    PERMISSION_REQUEST,
    PRE_TOOL_USE,
    call_shape,
    claude_settles,
    hook_answer,
    tool_name,
)
from delegate.core.channels import claude_usage, parser_for
from delegate.core.errors import BusError, DelegateError, PublishRefused, guarded, say
from delegate.core.model import PANE_GONE, EventType
from delegate.core.sandbox import Box, bwrap_argv
from delegate.core.timefmt import record_timestamp
from delegate.runtime.egress import EgressProxy, proxy_env
from delegate.runtime.limited import LimitedGroup
from delegate.runtime.mcp_warm import start_for_job
from delegate.runtime.spending import Spending, stop_ladder
from delegate.services.jobs import agent_env
from delegate.services.jobs.approvals import ask
from delegate.services.jobs.finish import AuditLine, end_by_event
from delegate.services.jobs.publish import answer_publish, publish_event, record_conversation
from delegate.services.state import State

log = logsetup.get_logger(__name__)
CHUNK = 65536
SIGNAL_GRACE_S = 3.0
PASSED_SIGNALS = (signal.SIGHUP, signal.SIGTERM)
RECORDED_WITHOUT_BUS = "recorded_without_bus"
LOCALTIME = "/etc/localtime"


def report(
    state: State, job_id: str, event: str, *, detail: str, data: dict[str, Any] | None = None
) -> None:
    """Publish `event`; when the bus cannot take it, record its transition in the registry
    directly and audit why, so the job never waits for a report that cannot travel."""
    try:
        publish_event(state, job_id, event, detail=detail, data=data)
    except BusError as exc:
        # the reason first: the audit trail is never behind the status it explains
        why = AuditLine(RECORDED_WITHOUT_BUS, {"event": event, "reason": f"bus unreachable: {exc}"})
        kind = EventType(event)
        if kind.terminal:  # the reason is written with the end, by finish, only if it lands
            end_by_event(state, job_id, kind, detail=detail, actor="wrapper", because=why)
        else:
            state.audit.append(job_id, why.kind, **why.fields)
            state.registry.apply_event(job_id, kind, detail=detail)
        log.warning(
            "job %s: the bus did not take %s (%s); recorded it directly", job_id, event, exc
        )


class AgentIdentity:
    """`run_as = "USER"`: the OS user an agent runs as, and a folder for the publish socket
    and, for file prompts, a copy of the prompt, both theirs.

    The folder stays root's (0711: the agent reaches the names in it, lists and creates
    nothing), never handed over: an agent's process, even one left from an earlier job, cannot
    plant a link where this process then writes or changes owners. What goes in it is made
    here, new (O_EXCL, O_NOFOLLOW), and given to the agent's user through its own open
    descriptor (fchown), never by path."""

    def __init__(self, entry: Any, job_id: str) -> None:
        self.entry = entry
        self.uid: int = entry.pw_uid
        self.gid: int = entry.pw_gid
        self.folder = Path(tempfile.mkdtemp(prefix=f"delegate-{job_id}-"))
        os.chmod(self.folder, 0o711)  # noqa: S103 - traversable, not listable (see above)

    @classmethod
    def of(cls, user: object, job_id: str) -> AgentIdentity | None:
        if not user:
            return None
        try:
            entry = pwd.getpwnam(str(user))
        except KeyError:
            raise DelegateError(f"run_as: no user {user!r} on this machine") from None
        return cls(entry, job_id)

    @property
    def owner(self) -> tuple[int, int]:
        return self.uid, self.gid

    def env(self) -> dict[str, str]:
        return {"HOME": self.entry.pw_dir, "USER": self.entry.pw_name}

    def hand_over_prompt(self, argv: list[str], prompt_path: Path) -> list[str]:
        """A copy of the prompt the agent's user may read, in place of the original path."""
        copy = self.folder / "prompt"
        folder = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open("prompt", flags, 0o600, dir_fd=folder)
        finally:
            os.close(folder)
        try:
            os.fchown(fd, self.uid, self.gid)
            os.write(fd, prompt_path.read_bytes())
        finally:
            os.close(fd)
        return [part.replace(str(prompt_path), str(copy)) for part in argv]

    def may_read(self, path: str, *, listing: bool = True) -> bool:
        """Whether this user may reach and read `path` (`listing=False`: only reach it), by
        its mode bits and every folder's above it."""
        groups = {self.gid}
        try:
            seen = os.stat(path)
            folder = stat.S_ISDIR(seen.st_mode)  # r-x to list a folder and go in, --x to go in
            itself = (0o5 if folder else 0o4) if listing else (0o1 if folder else 0o0)
            return _permits(seen, self.uid, groups, itself) and all(
                _permits(os.stat(folder), self.uid, groups, 0o1) for folder in Path(path).parents
            )
        except OSError:
            return False

    def clean_up(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def _permits(seen: os.stat_result, uid: int, groups: set[int], wanted: int) -> bool:
    """Whether the mode bits give `uid` (in `groups`) the `wanted` rwx bits (0o7 scale)."""
    if seen.st_uid == uid:
        bits = seen.st_mode >> 6
    elif seen.st_gid in groups:
        bits = seen.st_mode >> 3
    else:
        bits = seen.st_mode
    return (bits & wanted) == wanted


def agent_environment(state: State, job_id: str) -> dict[str, str]:
    """The agent's environment as submit built it (services/jobs/agent_env); for a job submitted
    before there was one, the old way: this process's environment plus the job's variables."""
    saved = agent_env.load(state, job_id)
    if saved is not None:
        return saved
    env = process_env()
    env[JOB_ENV] = job_id
    env[HOME_ENV] = str(state.layout.home)
    env[BUS_ENV] = state.bus_url_for(state.registry.get(job_id))
    env[PATH_ENV] = path_with(str(Path(sys.executable).parent), env.get(PATH_ENV))
    return env


def _feed(stdin: IO[bytes], prompt: bytes) -> None:
    try:
        stdin.write(prompt)
    except (BrokenPipeError, ValueError):
        pass  # the agent stopped reading; its exit status will tell the rest
    finally:
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.close()


def _copy_output(
    source: IO[bytes], log_path: Path, listener: ChannelListener | None = None
) -> None:
    """Copy the agent's output to agent.log and the pane; a channel's lines go to `listener`."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    out = sys.stdout.buffer
    pending = b""
    try:
        while chunk := source.read1(CHUNK):  # type: ignore[attr-defined]
            os.write(fd, chunk)
            try:
                out.write(chunk)
                out.flush()
            except OSError:
                pass  # the pane went away; keep logging
            if listener is not None:
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    listener.line(line)
        if listener is not None and pending:
            listener.line(pending)
    finally:
        os.close(fd)


class ChannelListener:
    """Turns the agent's own structured output (its profile's `channel`) into events, and
    counts the usage it reports against the job's budget (`spending`)."""

    def __init__(
        self,
        state: State,
        job_id: str,
        channel: str,
        spending: Spending | None = None,
        stop: Callable[[], None] | None = None,
        zone: tzinfo | None = None,
    ) -> None:
        self.state = state
        self.job_id = job_id
        job = state.registry.get(job_id)
        # a resumed conversation's running totals so far: its usage counts from there
        baseline = job.conversation_usage if job.conversation_id else None
        self.parser = parser_for(
            channel, time.time, baseline=baseline, thread=job.conversation_id, tz=zone
        )
        self.spending = spending
        self.stop = stop
        self.retrying = False  # the record shows the agent retrying its API (agent_retry)

    def line(self, raw: bytes) -> None:
        if self.parser is not None:
            self.apply(self.parser.feed(raw))

    def finish(self) -> None:
        if self.parser is not None:
            self.apply(self.parser.finish())
            if self.parser.malformed:
                self.state.audit.append(
                    self.job_id, "channel_malformed", lines=self.parser.malformed
                )

    def apply(self, events: list[Any]) -> None:
        for item in events:
            if item.conversation_id:
                record_conversation(self.state, self.job_id, item.conversation_id)
                continue
            self._note_retry(item)
            totals = item.data.get("thread_usage")
            if isinstance(totals, dict):  # what a resume of this conversation counts from
                self.state.registry.update(self.job_id, conversation_usage=totals)
            if item.usage is not None and self.spending is not None:
                self.spending.count(item.usage, item.model)
            if item.event is None:
                continue  # a fact (usage), not an event
            if item.event in ("completed", "error"):
                if self.spending is not None:
                    self.spending.reported(item.data.get("cost_usd"))
                # the tokens: the spending's running figures (the final word's missing
                # part counted just before), unless nothing counted them
                record_usage(self.state, self.job_id, item.data, tokens=self.spending is None)
                record_denials(self.state, self.job_id, item.data.get("denied_tools"))
            with contextlib.suppress(PublishRefused):
                report(self.state, self.job_id, item.event, detail=item.detail, data=item.data)
            if item.data.get("stop_agent") and self.stop is not None:
                self.stop()  # it would only retry what waiting cannot heal (a refused key)

    def _note_retry(self, item: Any) -> None:
        """Claude's `api_retry` lines (and codex's reconnects) are a waiting state the record
        shows until the agent is heard from otherwise."""
        retry = item.data.get("agent_retry") if item.event == "progress" else None
        if isinstance(retry, dict):
            self.retrying = True
            stamp = record_timestamp()
            self.state.registry.update(self.job_id, agent_retry={**retry, "at": stamp})
        elif self.retrying:
            self.retrying = False
            self.state.registry.update(self.job_id, agent_retry=None)


def agent_zone(name: str | None) -> tzinfo | None:
    """The agent's time zone, which the clock times it prints are in: its TZ, else the
    system's (/etc/localtime); not this process's, which is the tmux server's from when that
    started. None when neither can be read (then this process's zone is used)."""
    try:
        if name and not name.startswith((":", "/")):
            return zoneinfo.ZoneInfo(name)
        with open(name.lstrip(":") if name else LOCALTIME, "rb") as handle:
            return zoneinfo.ZoneInfo.from_file(handle)
    except (ValueError, OSError, zoneinfo.ZoneInfoNotFoundError):
        return None


def record_denials(state: State, job_id: str, denied: object) -> None:
    """The tool calls the agent's CLI denied (its final word's list), into the record and an
    audit line each, before the ending is published: a job that did nothing is seen as such."""
    if not isinstance(denied, list) or not denied:
        return
    names = [str(name) for name in denied]
    state.registry.update(job_id, denied_tools=names)
    for name in names:
        state.audit.append(job_id, "tool_denied", tool_name=name)


def record_usage(state: State, job_id: str, data: dict[str, Any], *, tokens: bool = True) -> None:
    """cost_usd (and with `tokens`, tokens_in and tokens_out) from a channel's final word, into
    the record."""
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    changes: dict[str, Any] = {}
    if isinstance(data.get("cost_usd"), int | float):
        changes["cost_usd"] = float(data["cost_usd"])
    for field, key in (("tokens_in", "input_tokens"), ("tokens_out", "output_tokens")):
        count = claude_usage({key: usage.get(key)}) if tokens else None  # bounded, 0 or more
        if count is not None and isinstance(usage.get(key), int):
            changes[field] = count[key]
    if changes:
        state.registry.update(job_id, **changes)


def serve_publishes(state: State, job_id: str, identity: AgentIdentity | None = None) -> Any:
    """Answer the pane's `delegate publish` calls for this job, and this job only (see
    publish_socket). For an agent running as another user the socket lives in a folder of
    theirs, since the job's log folder is closed to them."""

    remembered: list[str] = []  # call shapes `approve --remember` allowed for the rest of the job
    permission = state.registry.get(job_id).launch.get("permission") or {}

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "permission":  # a permission hook waiting for its decision
            return _permission(state, job_id, request, remembered, permission)
        if request.get("op") == "conversation":  # a hook naming the agent's conversation
            return _conversation(state, job_id, request)
        return _publish(state, job_id, request)

    if identity is not None:
        path: Path | None = identity.folder / "publish.sock"
    else:
        path = socket_path(state.audit.job_dir(job_id, create=True), job_id)
    if path is None:
        return None
    try:
        return PublishServer(path, handle, owner=identity.owner if identity else None)
    except OSError as exc:
        log.warning("not serving publishes over a socket: %s", exc)
        return None


def _conversation(state: State, job_id: str, request: dict[str, Any]) -> dict[str, Any]:
    """A hook naming the agent's conversation: recorded on the job."""
    conversation = request.get("conversation_id")
    if not isinstance(conversation, str) or not conversation:
        return {"ok": False, "message": "no conversation id", "exit_code": 64}
    record_conversation(state, job_id, conversation)
    return {"ok": True, "receipt": {"job_id": job_id, "conversation_id": conversation}}


def _publish(state: State, job_id: str, request: dict[str, Any]) -> dict[str, Any]:
    """A `delegate publish` of this job's agent, published for it."""
    asked = request.get("job")
    if asked not in (None, job_id):
        return {
            "ok": False,
            "message": f"this wrapper reports for job {job_id} only, not {asked!r}",
            "exit_code": 67,
        }
    return answer_publish(state, job_id, request)


def _permission(
    state: State,
    job_id: str,
    request: dict[str, Any],
    remembered: list[str],
    permission: dict[str, Any],
) -> dict[str, Any]:
    """Decide a permission request (a rule, a person, the timeout) and give the hook the
    answer it prints for its agent. A rule holds in every mode; a PreToolUse call no rule
    decides that Claude's own settings let run without asking (a read-only tool,
    `allowed_tools`, its permission mode) is left to Claude: the answer holds no hook output,
    and Claude goes on as it would without the hook."""
    tool = tool_name(request.get("tool_name"))  # the agent's word: bounded where it enters
    hook = PRE_TOOL_USE if request.get("hook") == PRE_TOOL_USE else PERMISSION_REQUEST
    allowed = permission.get("allowed_tools") or ()

    def settled() -> bool:
        return hook == PRE_TOOL_USE and claude_settles(tool, permission.get("mode"), allowed)

    try:
        decision = ask(
            state, job_id, tool, request.get("tool_input"), remembered=remembered, unless=settled
        )
    except DelegateError as exc:
        return {"ok": False, "message": str(exc), "exit_code": exc.exit_code}
    if decision is None:
        return {"ok": True, "hook_output": None}
    if decision.remember:  # the call's shape (`Bash git push`), never the whole tool
        shapes = call_shape(tool, request.get("tool_input")).splitlines()
        remembered.extend(shape for shape in shapes if shape not in remembered)
    return {"ok": True, "hook_output": hook_answer(decision, hook)}


def outcome_for(returncode: int, clean_exit: str) -> tuple[str, str]:
    """The event and detail the wrapper reports for an agent that ended without reporting."""
    if returncode == 0:
        return clean_exit, "agent exited with status 0 without reporting"
    if returncode < 0:
        return "error", f"agent killed by signal {-returncode}"
    return "error", f"agent exited with status {returncode}"


class SignalRelay:
    """Passes SIGHUP/SIGTERM on to the agent's process group, and kills what is left of the
    group after a grace. Installed before anything else, so a signal that arrives before the
    agent exists is kept and passed on the moment it starts."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.pgid: int | None = None
        self._killer: threading.Timer | None = None
        self._previous = {sig: signal.signal(sig, self._handle) for sig in PASSED_SIGNALS}

    def _handle(self, signum: int, frame: Any) -> None:
        if not self.received:
            self.received.append(signum)
        self._pass(signum)

    def _pass(self, signum: int) -> None:
        if self.pgid is None:
            return
        if self._killer is None:
            self._killer = threading.Timer(SIGNAL_GRACE_S, _kill_group, args=(self.pgid,))
            self._killer.daemon = True
            self._killer.start()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signum)

    def attach(self, pgid: int) -> None:
        self.pgid = pgid
        if self.received:
            self._pass(self.received[0])

    def reaped(self) -> None:
        """The agent was reaped: its group id may be reused once the group is empty."""
        if self.received and self.pgid is not None:
            _kill_group(self.pgid)  # what is left of the group
        if self._killer is not None:
            self._killer.cancel()
        self.pgid = None

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self.received[0]).name if self.received else None


def run(job_id: str, state: State | None = None) -> int:
    relay = SignalRelay()
    try:
        return _run(job_id, relay, state)
    except Exception as exc:
        # The pane's stderr is seen by no one: keep why the wrapper stopped in the job's log.
        with contextlib.suppress(Exception):
            (state or State.open()).audit.append(
                job_id, "wrapper_failed", error=f"{type(exc).__name__}: {exc}"
            )
        raise
    finally:
        relay.restore()


def _run(job_id: str, relay: SignalRelay, given: State | None) -> int:
    # The pane's own environment only says where the state is; the agent's environment, and
    # with it the broker login this wrapper reports with, is the one submit saved for the job.
    home = (given or State.open()).layout.home
    env = agent_environment(given or State.open(env={HOME_ENV: str(home)}), job_id)
    state = given or State.open(env={**env, HOME_ENV: str(home)})
    job = state.registry.get(job_id)
    launch = job.launch
    argv = list(launch.get("argv") or [])
    if not argv:
        raise DelegateError(f"job {job_id} has no launch command")
    try:
        report(state, job_id, "started", detail=f"{job.agent or 'agent'} starting")
    except PublishRefused as exc:
        say(f"not starting the agent: {exc.reason}")
        return 0
    if relay.signal_name is not None:  # stopped before the agent began: do not begin it
        with contextlib.suppress(PublishRefused):
            report(state, job_id, "error", detail=f"the wrapper got {relay.signal_name}")
        return 128 + relay.received[0]
    prompt_path = Path(str(launch.get("prompt_path", "")))
    mode = launch.get("prompt", "stdin")
    log_path = state.audit.job_dir(job_id, create=True) / "agent.log"
    workdir = Path(job.workdir or ".")
    # A prompt on stdin takes the agent's stdin; otherwise the agent reads the pane's terminal
    # (what `delegate send` types), as a program started in a terminal would.
    stdin_spec = subprocess.PIPE if mode == "stdin" else _terminal_or_devnull()
    identity = AgentIdentity.of(launch.get("run_as"), job_id)
    if identity is not None:
        env.update(identity.env())
        argv = identity.hand_over_prompt(argv, prompt_path) if mode == "file" else argv
    server = serve_publishes(state, job_id, identity)
    if server is not None:
        env[PUBLISH_SOCKET_ENV] = str(server.path)
    # a warm `delegate mcp` loads the MCP SDK while the agent starts (runtime/mcp_warm)
    warm = start_for_job(log_path.parent, launch, env, workdir, identity is not None)
    try:
        run = AgentRun(
            state, job_id, launch, argv, workdir, env, stdin_spec, prompt_path, log_path, relay
        )
        return _run_agent(run, identity)
    finally:
        if warm is not None:
            warm.stop()
        if server is not None:
            server.close()
        if identity is not None:
            identity.clean_up()


class AgentRun(NamedTuple):
    """What starting and following one job's agent takes, gathered once by `_run`."""

    state: State
    job_id: str
    launch: dict[str, Any]
    argv: list[str]
    workdir: Path
    env: dict[str, str]
    stdin_spec: int | None
    prompt_path: Path
    log_path: Path
    relay: SignalRelay


def _run_agent(run: AgentRun, identity: AgentIdentity | None = None) -> int:
    """The agent in its box (when it has one), as its user (`run_as`)."""
    as_user: dict[str, Any] = {}
    if identity is not None:
        as_user = {"user": identity.uid, "group": identity.gid, "extra_groups": []}
    proxy = None
    if run.launch.get("sandbox"):
        argv, proxy = boxed(run.state, run.job_id, run.argv, run.workdir, run.env, identity)
        run = run._replace(argv=argv)
    try:
        return _run_limited(run, as_user)
    finally:
        if proxy is not None:
            proxy.close()


def _run_limited(run: AgentRun, as_user: dict[str, Any]) -> int:
    """Start the agent in its cgroups (when it has limits), follow it, remove them."""
    state, job_id = run.state, run.job_id
    on_terminal = run.stdin_spec is None and _terminal_or_devnull() is None
    try:
        limited = LimitedGroup.make(
            state,
            job_id,
            run.launch,
            lambda detail, data: report(state, job_id, "error", detail=detail, data=data),
        )
    except OSError as exc:  # checked at submit: the machine changed since
        report(state, job_id, "error", detail=f"its limits could not be applied: {exc}")
        return 126
    try:
        agent = _start_agent(
            run.argv,
            on_terminal=on_terminal,
            cwd=run.workdir,
            env=run.env,
            stdin=run.stdin_spec,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,  # its own group: signals reach the agent and all it started
            **as_user,
            **limited.popen(),
        )
    except OSError as exc:
        limited.close()
        report(state, job_id, "error", detail=f"agent could not start: {exc.strerror}")
        return 127
    try:
        return _follow_agent(run, agent, limited, on_terminal)
    finally:
        limited.close()


def _follow_agent(
    run: AgentRun, agent: subprocess.Popen[bytes], limited: LimitedGroup, on_terminal: bool
) -> int:
    """Feed the agent its prompt, read its output and channel, wait for it, report its end."""
    state, job_id, launch, relay = run.state, run.job_id, run.launch, run.relay
    limited.started(stop=lambda: stop_ladder(agent.pid))
    relay.attach(agent.pid)
    if not on_terminal:  # (one that reads the terminal was given it before it began)
        _give_terminal(agent.pid)
    threads = []
    if agent.stdin is not None:
        prompt = run.prompt_path.read_bytes() if run.prompt_path.is_file() else b""
        threads.append(threading.Thread(target=_feed, args=(agent.stdin, prompt), daemon=True))
    assert agent.stdout is not None
    # A daemon: a background child of the agent may hold its stdout open long after it exits.
    spending = Spending(state, job_id, stop=lambda: stop_ladder(agent.pid))
    channel = str(launch.get("channel") or "none")
    listener = ChannelListener(
        state,
        job_id,
        channel,
        spending,
        stop=lambda: stop_ladder(agent.pid),
        zone=agent_zone(run.env.get("TZ")) if channel == "codex-json" else None,
    )
    threads.append(
        threading.Thread(
            target=_copy_output, args=(agent.stdout, run.log_path, listener), daemon=True
        )
    )
    for thread in threads:
        thread.start()
    # the agent's heartbeat (its id is the job id, the default owner of its locks and claims)
    beater = Beater(state.layout.coord_db, job_id, task=job_id).start()
    returncode = agent.wait()
    relay.reaped()
    beater.stop()
    limited.ended()  # the memory limit's ending, before any other: it is why the agent died
    for thread in threads:
        thread.join(timeout=0.2 if relay.received else 5)
    listener.finish()  # a codex stream that ended cleanly completes its job here
    _report_exit(state, job_id, str(launch.get("clean_exit", "completed")), relay, returncode)
    return returncode if returncode >= 0 else 128 - returncode


def boxed(
    state: State,
    job_id: str,
    argv: list[str],
    workdir: Path,
    env: dict[str, str],
    identity: AgentIdentity | None = None,
) -> tuple[list[str], EgressProxy | None]:
    """The agent's command inside its sandbox (core/sandbox): the box its submit recorded, and
    what this job's own run adds: its workdir (and a worktree's repository metadata) writable,
    its log folder (prompt, settings, publish socket) and the toolkit readable. With an
    allowlist, the egress proxy it reaches through (runtime/egress), serving from now.

    Run as another user (`identity`), bubblewrap runs as that user: the job's log folder,
    closed to them, gives way to the identity's folder (its publish socket, its prompt), and
    of the toolkit only what they may read is bound in."""
    job = state.registry.get(job_id)
    box = Box.from_dict(job.launch["sandbox"])
    write = [str(workdir)]
    if job.worktree:  # git in a worktree writes its repository's .git (its index, objects)
        write.append(str(Path(job.worktree["repo"]) / ".git"))
    logs = state.audit.job_dir(job_id)
    toolkit = Path(agent_env.toolkit_bin())
    package = Path(__file__).resolve().parents[2]  # the checkout or site-packages
    read = [str(logs), str(toolkit.parent), str(package), sys.prefix, sys.base_prefix]
    if identity is not None:
        read = [str(identity.folder), *read[1:]]
    socket = env.get(PUBLISH_SOCKET_ENV)
    if socket:
        read.append(socket)  # (connecting to it needs no write: it may lie in a private /tmp)
    warm_mcp = mcp_socket(str(state.layout.home), job_id)
    if warm_mcp is not None and not warm_mcp.startswith(f"{logs}/"):
        # a log folder too deep for a socket: the warm MCP server listens in the user's
        # private temp folder, which the box's own /tmp would hide (made later: its folder)
        read.append(os.path.dirname(warm_mcp))
    box = box._replace(read=(*read, *box.read), write=(*write, *box.write))
    if identity is not None:
        # what its user cannot reach they could not see anyway, and bubblewrap, run as them,
        # would fail on it: left out (their own folder stays: it is made for them)
        box = box._replace(
            hide=tuple(p for p in box.hide if identity.may_read(p, listing=False)),
            read=(read[0], *(p for p in box.read[1:] if identity.may_read(p))),
            write=tuple(p for p in box.write if identity.may_read(p)),
        )
    if box.network != "allowlist":
        return bwrap_argv(box, argv, workdir=str(workdir)), None
    path = logs / "egress.sock"
    proxy = EgressProxy(path, box.allow_hosts, lambda said: _egress_said(state, job_id, said))
    env.update(proxy_env())
    relay = [sys.executable, "-m", "delegate.runtime.egress_relay", str(path), "--", *argv]
    return bwrap_argv(box, relay, workdir=str(workdir)), proxy


def _egress_said(state: State, job_id: str, said: dict[str, Any]) -> None:
    """A connection through the job's egress proxy: on record; a refused one also where the
    person watching sees it (a progress line)."""
    state.audit.append(job_id, "egress", **said)
    if not said.get("allowed") and said.get("host") != "?" and not said.get("error"):
        with contextlib.suppress(DelegateError):
            report(
                state,
                job_id,
                "progress",
                detail=f"refused connection to {said['host']}:{said['port']}",
            )


def _report_exit(
    state: State, job_id: str, clean_exit: str, relay: SignalRelay, returncode: int
) -> None:
    """End a job the agent left open: error when the wrapper passed it a signal, else what
    its exit status means under the profile's `clean_exit`."""
    if state.registry.get(job_id).status.terminal:
        return
    if relay.signal_name == "SIGHUP":  # tmux closed the pane: the work was cut off
        event = "error"
        detail = f"{PANE_GONE}: its pane went away (the wrapper got SIGHUP)"
    elif relay.signal_name is not None:
        event = "error"
        detail = f"the wrapper got {relay.signal_name} and passed it to the agent"
    else:
        event, detail = outcome_for(returncode, clean_exit)
    # A PublishRefused here means the agent's own report, or a cancel, got there first.
    with contextlib.suppress(PublishRefused):
        report(state, job_id, event, detail=detail, data={"exit_status": returncode})


def _terminal_or_devnull() -> int | None:
    """None (inherit the pane's terminal) when the wrapper's stdin is one, else /dev/null."""
    try:
        return None if os.isatty(sys.stdin.fileno()) else subprocess.DEVNULL
    except (OSError, ValueError):
        return subprocess.DEVNULL


# An agent that reads the pane's terminal starts held (stopped) until its process group is the
# terminal's foreground group: a read before that fails at once (EIO) or stops it (SIGTTIN),
# and on a busy machine an agent may read before the wrapper has handed the terminal over.
HOLD_UNTIL_FOREGROUND = ("/bin/sh", "-c", 'kill -STOP "$$" && exec "$@"', "delegate-agent")


def _start_agent(argv: list[str], *, on_terminal: bool, **popen: Any) -> subprocess.Popen[bytes]:
    """Start the agent; one that reads the terminal gets it before its command begins (a shell
    that stops itself, is given the terminal and continued, then becomes the agent by exec).
    OSError when its command cannot be found, as a direct start would say."""
    if not on_terminal:
        return subprocess.Popen(argv, **popen)
    if shutil.which(argv[0], path=popen["env"].get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), argv[0])
    agent = subprocess.Popen([*HOLD_UNTIL_FOREGROUND, *argv], **popen)
    try:  # (WNOWAIT: an exit stays for agent.wait() to read)
        held = os.waitid(os.P_PID, agent.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    except ChildProcessError:
        return agent
    if held is not None and held.si_code == os.CLD_STOPPED:
        _give_terminal(agent.pid)  # and SIGCONT: it goes on, in the foreground
    return agent


def _give_terminal(pgid: int) -> None:
    """Make the agent's group the pane terminal's foreground group, so an agent that reads its
    terminal (what `delegate send` types) is not stopped by SIGTTIN, and keys like C-c reach
    it. The wrapper keeps writing to the terminal from the background (no TOSTOP).

    An agent that read its terminal before this (its own group, still in the background) was
    stopped by SIGTTIN: SIGCONT lets it read again, now in the foreground."""
    with contextlib.suppress(OSError, ValueError):
        fd = sys.stdin.fileno()
        if os.isatty(fd):
            os.tcsetpgrp(fd, pgid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGCONT)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logsetup.configure_lazily()
    if len(argv) != 1:
        print("usage: python -m delegate.runtime.wrapper JOB_ID", file=sys.stderr)
        return 64
    return guarded(lambda: run(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
