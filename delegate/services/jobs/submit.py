"""Submitting a job to an agent in tmux, supervising it, and cancelling it.

Order of a submit: register the job; write the prompt file; admit it under the cap (it may start
now, or waits queued); make sure the state dir's supervisor runs (services/supervisor: on a
broker, listening before the agent starts); start the wrapper in a tmux session. Whether the
job has ended is never decided here: its events, `cancel` and the reconcile policy (the
supervisor's) decide, and the exit status is read from the record.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import os
import pwd
import shlex
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.bus import keeps_history
from delegate.adapters.fsio import atomic_write, write_new
from delegate.adapters.groups import GroupBook
from delegate.adapters.tmux import Tmux, TmuxUnreachable, validate_session_name
from delegate.config.budget import budget_for
from delegate.config.profiles import ConfigFile, Profile, read_config, resolve
from delegate.config.settings import cgroup_root, mcp_warm_s
from delegate.core.caps import AFTER_RULES, Gate, broken_dependency
from delegate.core.errors import (
    DelegateError,
    IllegalTransition,
    StartFailed,
    UsageError,
    WaitInterrupted,
)
from delegate.core.limits import Limits, limits_from
from delegate.core.model import SESSION_PREFIX, Job, JobState, SessionState, validate_job_id
from delegate.core.retry import check_on_interrupt, retry_rule
from delegate.core.sandbox import Box
from delegate.services import worktrees
from delegate.services.jobs import agent_env, mcp_config
from delegate.services.jobs.box import inside_our_box, limits_for_job, sandbox_for
from delegate.services.jobs.finish import end_job, operator_cause
from delegate.services.jobs.launch import (
    caps,
    check_session_free,
    inventory,
    launch_in_tmux,
    start_policy,
    this_launcher,
    tmux_for,
)
from delegate.services.jobs.register import register_job
from delegate.services.ps import waiting_reasons
from delegate.services.state import State, strip_credentials
from delegate.services.supervisor import ensure_supervisor

TYPE_CHECKING = False  # the watcher's module: only what follows a job loads it (_watcher)
if TYPE_CHECKING:
    from delegate.services.jobs.watch import Watcher, WatchOutcome

SKILL_FILE = Path(__file__).resolve().parents[3] / "skills" / "delegate-job" / "SKILL.md"
__all__ = ["SESSION_PREFIX", "SubmitRequest", "SubmitResult", "cancel", "inventory", "submit"]


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
    max_running: int | None = None
    on_event: str | None = None
    # `--after`: job ids it waits for; `--after-rule`: what their endings must be; `--group`
    after: tuple[str, ...] = ()
    after_rule: str | None = None
    group: str | None = None
    # `session resume`: continue this conversation with the profile's `resume` command
    conversation_id: str | None = None
    # ...and the conversation's running token totals so far (codex counts a thread from its
    # start): the resumed run counts on from them
    conversation_usage: dict[str, Any] | None = None
    # `--retries/--retry-on/--backoff` (core/retry.RetryRule.to_dict), `--on-interrupt`; and
    # for a new attempt (services/jobs/retry): its number, the previous one, when it is due
    retry: dict[str, Any] | None = None
    on_interrupt: str | None = None
    attempt: int | None = None
    retry_of: str | None = None
    not_before: str | None = None
    # an agent host launching an assignment: the delegator's job id, the token from the host key
    job_id: str | None = None
    token_for: Callable[[str], str] | None = None
    # a sub-job: the job that submitted it (`delegate mcp`'s job_submit)
    parent: str | None = None
    # ...which it outlives (`job_submit`'s `detach`, where `[mcp] detach = true`)
    detached: bool = False
    # `--no-mcp`: the claude and codex profiles do not register `delegate mcp` for the job
    no_mcp: bool = False
    # `--max-cost USD`, `--max-tokens N`: None takes `[budget]` of delegate.toml
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    # `--max-memory 4G --max-cpus 1.5 --max-pids 512` (core/limits): over `[limits]`
    limits: Limits = Limits()
    # `--sandbox/--no-sandbox` (core/sandbox); None: the profile's, then `[sandbox] default`
    sandbox: bool | None = None
    # `--worktree [--branch NAME] [--base REF]` (services/worktrees); None: as delegate.toml says
    worktree: bool | None = None
    branch: str | None = None
    base: str | None = None
    # a fan-out: the worktree plan checked once for all its jobs (the same base commit)
    worktree_plan: worktrees.WorktreePlan | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], prompt: bytes) -> "SubmitRequest":
        """The request a merged job file and flags describe (services/jobs/jobfile)."""
        return cls(
            prompt=prompt,
            agent=settings["agent"],
            cmd=settings["cmd"],
            workdir=settings["workdir"],
            session=settings["session"],
            wall_timeout_s=settings["wall_timeout"],
            idle_timeout_s=settings["idle_timeout"],
            bus_url=settings["bus"],
            idempotency_key=settings["idempotency_key"],
            max_running=settings["max_running"],
            on_event=settings["on_event"],
            after=parse_after(settings.get("after")),
            after_rule=settings.get("after_rule"),
            group=settings.get("group"),
            max_cost_usd=settings.get("max_cost"),
            max_tokens=settings.get("max_tokens"),
            limits=limits_from(
                settings.get("max_memory"), settings.get("max_cpus"), settings.get("max_pids"), "--"
            ),
            worktree=settings.get("worktree"),
            sandbox=settings.get("sandbox"),
            branch=settings.get("branch"),
            base=settings.get("base"),
            retry=_retry_settings(settings),
            on_interrupt=check_on_interrupt(settings.get("on_interrupt")),
        )


class SubmitResult(NamedTuple):
    job: Job
    created: bool
    outcome: "WatchOutcome | None" = None
    queue_position: int | None = None
    waiting_for: str | None = None  # a queued job: why it has not started


def _retry_settings(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """`--retries N --retry-on REASONS --backoff MIN..MAX`, checked, as the record keeps it."""
    rule = retry_rule(settings.get("retries"), settings.get("retry_on"), settings.get("backoff"))
    return rule.to_dict() if rule is not None else None


def attempt_fields(request: SubmitRequest, profile_on_interrupt: str | None) -> dict[str, Any]:
    """The record's attempt fields a request sets (its rule, and for a new attempt its place)."""
    return {
        "retry": request.retry,
        "on_interrupt": request.on_interrupt or profile_on_interrupt,
        "attempt": request.attempt,
        "retry_of": request.retry_of,
        "not_before": request.not_before,
    }


def _check_max_running(request: SubmitRequest) -> None:
    if request.max_running is not None and request.max_running < 1:
        raise UsageError("--max-running must be a positive integer")


def parse_after(text: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """`--after A,B` (or a job file's list) as job ids, each checked, without repeats."""
    if not text:
        return ()
    items = text.split(",") if isinstance(text, str) else list(text)
    ids: list[str] = []
    for item in items:
        job_id = validate_job_id(str(item).strip())
        if job_id not in ids:
            ids.append(job_id)
    return tuple(ids)


def check_queue_rules(
    state: State, request: SubmitRequest, fresh: frozenset[str] = frozenset()
) -> None:
    """Refuse, before anything is recorded, a job that could never start: an unknown group or
    dependency, an unknown rule, or a dependency whose ending already breaks the rule. `fresh`:
    ids of jobs being made with it (a plan's), which exist once it is recorded."""
    if request.group is not None:
        GroupBook(state.layout.groups_book).get(request.group)
    if request.after_rule is not None and request.after_rule not in AFTER_RULES:
        raise UsageError(
            f"unknown --after-rule {request.after_rule!r}; expected one of {', '.join(AFTER_RULES)}"
        )
    if request.after_rule is not None and not request.after:
        raise UsageError("--after-rule needs --after")
    after = tuple(dep for dep in request.after if dep not in fresh)
    states = state.job_states(after)
    for dep in after:
        if dep not in states:
            raise UsageError(f"--after {dep}: no such job")
    broken = broken_dependency(after, request.after_rule, Gate(states))
    if broken is not None:
        raise UsageError(
            f"job {broken} ended {states[broken].value}: the job could never start"
            f" (--after-rule {request.after_rule or AFTER_RULES[0]})"
        )


def split_command(text: str | None, option: str) -> list[str] | None:
    """A command given as text (`--on-event`, `--check`): split into words as a shell would,
    never run by one; UsageError naming `option` when it cannot be split or is empty."""
    if text is None:
        return None
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{option} cannot be split into words: {exc}") from None
    if not argv:
        raise UsageError(f"{option} is empty")
    return argv


def parse_on_event(text: str | None) -> list[str] | None:
    """`--on-event CMD`: split into words as a shell would; it is never run by one."""
    argv = split_command(text, "--on-event")
    if argv is None:
        return None
    if shutil.which(argv[0]) is None:  # refused now, not found out in the audit later
        where = "is not an executable file" if "/" in argv[0] else "is not on PATH"
        raise UsageError(f"--on-event: {argv[0]} {where}")
    return argv


# PreToolUse gates each tool call: in print mode (`claude -p`) Claude Code shows no dialog and
# never calls PermissionRequest, which stays for a profile that runs it interactively. No
# SessionStart or Stop: the stream says both (its `init` line names the conversation, its
# `result` line ends the turn), and each hook call is a Python process started beside claude
# while it starts or ends.
HOOK_EVENTS = ("PreToolUse", "PermissionRequest", "Notification")
DECIDING_HOOKS = ("PreToolUse", "PermissionRequest")


def claude_settings(permission_wait_s: float) -> bytes:
    """This job's Claude Code settings (passed with --settings; the user's own are never
    edited): every hook we listen to calls this installation's `delegate hook`. The permission
    hooks wait for a decision up to `permission_wait_s` (`[approvals] timeout`), so Claude is
    told to wait a minute longer than that before it gives up on the hook."""
    import json  # json (its encoder and decoder): only a claude-stream job's settings need it

    hook = str(Path(agent_env.toolkit_bin()) / "delegate") + " hook"
    hooks = {}
    for name in HOOK_EVENTS:
        command: dict[str, Any] = {"type": "command", "command": hook}
        if name in DECIDING_HOOKS:
            command["timeout"] = int(permission_wait_s) + 60
        else:  # only reports: claude need not wait for them (~20-40 ms each, at start and end)
            command["async"] = True
        hooks[name] = [{"matcher": "", "hooks": [command]}]
    return json.dumps({"hooks": hooks}, indent=2).encode()


def in_repository(workdir: Path) -> bool:
    """Whether `workdir` is inside a git repository (codex refuses to start outside one unless
    told to): a `.git` in it or a folder above it."""
    return any((folder / ".git").exists() for folder in (workdir, *workdir.parents))


def check_run_as(user: str | None) -> None:
    """`run_as`: the user must exist, and only root may start a process as someone else."""
    if user is None:
        return
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise UsageError(f"run_as: no user {user!r} on this machine") from None
    if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
        raise UsageError(f"run_as {user!r} needs the wrapper to run as root")


def queue_position(state: State, job_id: str) -> int | None:
    """1 for the queued job that starts next, None when the job is not queued."""
    queued = [j for j in state.registry.open_jobs() if j.status is JobState.QUEUED]
    for position, job in enumerate(queued, 1):
        if job.job_id == job_id:
            return position
    return None


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


class Prepared(NamedTuple):
    """What a submit has decided and checked before anything is recorded."""

    request: SubmitRequest
    config: ConfigFile
    profile: Profile
    workdir: Path
    tree: worktrees.WorktreePlan | None
    notify: list[str] | None
    limits: Limits = Limits()
    box: Box | None = None  # its sandbox, less what the job's own paths add at launch


def prepare(
    state: State,
    request: SubmitRequest,
    tmux: Tmux,
    *,
    config_file: ConfigFile | None = None,
    fresh: frozenset[str] = frozenset(),
) -> Prepared:
    """Check a request as far as it can be without recording anything: its profile and
    command (on the agent's own PATH), workdir, worktree, limits, queue rules (`fresh`: ids of
    jobs made with it, a plan's, not looked for), hooks and the tmux socket folder."""
    config_file = config_file or read_config(state.layout.home, state.env)
    profile = resolve(
        agent=request.agent, cmd=request.cmd, config=config_file.tables, source=config_file.path
    )
    workdir = (request.workdir or Path.cwd()).expanduser().absolute()
    if not workdir.is_dir():
        raise UsageError(f"--workdir {workdir} is not a directory")
    tree = request.worktree_plan or worktrees.plan_for(
        request.worktree,
        branch=request.branch,
        base=request.base,
        config=config_file,
        profile=profile.name,
        workdir=workdir,
    )
    _check_max_running(request)
    check_budget(request)
    check_queue_rules(state, request, fresh)
    notify = parse_on_event(request.on_event)
    if request.session is not None:
        validate_session_name(request.session)
    tmux.prepare()  # an unusable socket folder is refused before any job exists
    check_run_as(profile.run_as)
    # Found now, on the agent's own PATH: a missing command is refused before any job exists.
    profile = profile._replace(
        command=tuple(agent_env.resolve_command(profile, agent_env.agent_path(profile, state.env)))
    )
    limits = limits_for_job(state, request.limits, profile, config_file, request.group)
    box = sandbox_for(state, request.sandbox, profile, config_file)
    if box is not None:
        profile = inside_our_box(profile)
    return Prepared(request, config_file, profile, workdir, tree, notify, limits, box)


def submit(
    state: State,
    request: SubmitRequest,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None] = lambda envelope: None,
    tmux: Tmux | None = None,
    note: Callable[[str], None] = lambda text: None,
) -> SubmitResult:
    tmux = tmux or Tmux.from_env(state.env)
    prepared = prepare(state, request, tmux)
    profile, workdir = prepared.profile, prepared.workdir
    known = request.idempotency_key and state.registry.find_by_key(request.idempotency_key)
    if request.session is not None and not known:
        # Checked before anything is recorded: a refused submit leaves no job behind. (A job
        # its idempotency key already names is followed, wherever it runs.)
        check_session_free(state, request.session)

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
        job_id=request.job_id,
        token_for=request.token_for,
        parent=request.parent,
    )
    if not created:  # the same idempotency key: never launch twice
        return follow_existing(state, job, wait=wait, emit=emit, note=note)
    session = request.session or f"{SESSION_PREFIX}{job.job_id}"
    try:
        if request.session is not None:
            check_session_free(state, session)
        if prepared.tree is not None:  # made at launch (launch_in_tmux), now or when a slot frees
            job = worktrees.record(state, job, prepared.tree)
            workdir = Path(job.workdir or workdir)
        launch, fields = launch_spec(state, job.job_id, prepared._replace(workdir=workdir), tmux)
        # one write of the record for all of it: each costs two fsyncs
        job = state.registry.admit(
            job.job_id, launch, start_policy(state, caps(state)), this_launcher(), fields
        )
    except BaseException as exc:
        end_unstarted(state, job.job_id, "launch_failed", exc)
        raise
    return _start(
        state,
        job,
        wait=wait,
        emit=emit,
        launch=lambda: launch_in_tmux(state, job, tmux),
        failure="launch_failed",
        note=note,
    )


def submit_remote(
    state: State,
    request: SubmitRequest,
    host: str,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None] = lambda envelope: None,
    note: Callable[[str], None] = lambda text: None,
) -> SubmitResult:
    """`submit --host NAME`: register here (the single source of truth) with the token derived
    from the host key, start following the job, then publish its signed assignment. The host
    resolves the profile and launches it in its own tmux."""
    from delegate.core import hostproto  # hmac, hashlib, json: a local job's path goes without

    # services.remote (uuid, platform, the MQTT wire): a local job's path goes without
    from delegate.services.remote import HostBook, assign, mqtt_settings, save_assignment

    if request.agent is None and request.cmd is None:
        raise UsageError("give --agent NAME or --cmd COMMAND")
    if (request.branch or request.base) and not request.worktree:
        raise UsageError("--branch and --base need --worktree")
    if len(request.prompt) > hostproto.MAX_ASSIGNMENT:
        raise UsageError(
            f"the prompt is {len(request.prompt)} bytes, over the {hostproto.MAX_ASSIGNMENT}"
            " bytes an assignment may carry"
        )
    _check_max_running(request)
    if request.after or request.group:
        raise UsageError("--after and --group are not yet supported with --host")
    notify = parse_on_event(request.on_event)  # run here, by whoever sees the event first
    if request.session is not None:
        validate_session_name(request.session)
    key = HostBook(state).key(host)
    mqtt_settings(state, request.bus_url)  # a broker is how the host is reached
    job, created = register_job(
        state,
        agent=request.agent,
        command=request.cmd,
        workdir=str(request.workdir) if request.workdir else None,
        session=None,
        wall_timeout_s=request.wall_timeout_s,
        idle_timeout_s=request.idle_timeout_s,
        idempotency_key=request.idempotency_key,
        bus_url=request.bus_url,
        token_for=lambda job_id: hostproto.job_token(key, job_id),
        host=host,
        launcher=this_launcher(),  # until the assignment is sent, a crash here is noticed
    )
    if not created:
        return follow_existing(state, job, wait=wait, emit=emit, note=note)
    job = state.registry.update(job.job_id, notify=notify, **attempt_fields(request, None))
    save_assignment(state, job, request.prompt, request)
    if request.not_before is not None:
        # a retry waits out its backoff queued here; whoever launches queued jobs (its own
        # supervisor, a monitor's pass) assigns it to its host once it is due
        job = state.registry.admit(job.job_id, {}, start_policy(state, caps(state)), job.launcher)
    return _start(
        state,
        job,
        wait=wait,
        emit=emit,
        launch=lambda: assign(state, job),
        failure="assign_failed",
        note=note,
    )


def _budget(config: ConfigFile, profile: str, request: SubmitRequest) -> dict[str, Any]:
    """The job's limits: its flags, else `[budget]` of delegate.toml (for its profile)."""
    default = budget_for(config.tables, config.path, profile)
    cost = request.max_cost_usd if request.max_cost_usd is not None else default.max_cost_usd
    tokens = request.max_tokens if request.max_tokens is not None else default.max_tokens
    return {"max_cost_usd": cost, "max_tokens": tokens}


def check_budget(request: SubmitRequest) -> None:
    if request.max_cost_usd is not None and not request.max_cost_usd > 0:
        raise UsageError("--max-cost must be a positive number of dollars")
    if request.max_tokens is not None and request.max_tokens < 1:
        raise UsageError("--max-tokens must be a positive integer")


def launch_spec(
    state: State,
    job_id: str,
    prepared: Prepared,
    tmux: Tmux,
    *,
    session: str | None = None,
    durable: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write the job's prompt, settings and environment beside its audit, and say how its
    wrapper launches it (the record's `launch`) and the record's other fields. `durable=False`:
    a plan's job, whose commit syncs everything at once."""
    request, profile, workdir = prepared.request, prepared.profile, prepared.workdir
    session = session or request.session or f"{SESSION_PREFIX}{job_id}"
    job_dir = state.audit.job_dir(job_id, create=True)
    write = atomic_write if durable else write_new
    prompt_path = job_dir / "prompt"
    write(prompt_path, build_prompt(profile, request.prompt))
    settings_path = None
    if profile.channel == "claude-stream":
        # approvals (hmac, the protocol): only a claude-stream job's hook settings need them
        from delegate.config.approvals import approval_settings

        settings_path = job_dir / "claude-settings.json"
        config = prepared.config
        wait_s = approval_settings(config.tables, config.path).timeout_s
        write(settings_path, claude_settings(wait_s))
    argv = profile.argv(
        prompt_file=prompt_path,
        workdir=workdir,
        job_id=job_id,
        settings_file=settings_path,
        conversation_id=request.conversation_id,
        in_repository=in_repository(workdir),
    )
    env = agent_env.build(
        state,
        profile,
        job_id=job_id,
        bus_url=strip_credentials(state.default_bus_url(request.bus_url)),  # as recorded
        tmux_socket=tmux.socket_path,
    )
    mcp = not request.no_mcp and mcp_config.registers(profile.name, argv)
    if mcp:
        argv = mcp_config.register(profile.name, argv, job_dir, env)
    launch: dict[str, Any] = {
        "argv": argv,
        "prompt": profile.prompt,
        "prompt_path": str(prompt_path),
        "clean_exit": profile.clean_exit,
        "run_as": profile.run_as,
        "channel": profile.channel,
        "mcp": mcp,  # its wrapper starts a warm `delegate mcp` (runtime/mcp_warm)
    }
    if prepared.box is not None:  # the wrapper starts the agent inside it (core/sandbox)
        launch["sandbox"] = prepared.box.to_dict()
    if prepared.limits:  # the wrapper puts the agent in cgroups with them (adapters/cgroups)
        launch["limits"] = prepared.limits.to_dict()
        launch["cgroup_root"] = cgroup_root(state.env)
    if mcp:  # the submitter's $DELEGATE_MCP_WARM_S: how long the state dir's nursery waits
        launch["mcp_warm_s"] = mcp_warm_s(state.env)
    if profile.channel == "claude-stream":  # what Claude settles itself; the rest is gated
        allowed = [*profile.allowed_tools, *([mcp_config.CLAUDE_TOOLS] if mcp else [])]
        launch["permission"] = {"mode": profile.permission_mode, "allowed_tools": allowed}
    fields = {
        "session": session,
        "tmux_socket": tmux.socket_path,
        "max_running": request.max_running,
        "notify": prepared.notify,
        "conversation_id": request.conversation_id,
        "conversation_usage": request.conversation_usage if request.conversation_id else None,
        "after": list(request.after) or None,
        "after_rule": request.after_rule if request.after else None,
        "group": request.group,
        "detached": request.detached or None,
        **_budget(prepared.config, profile.name, request),
        **attempt_fields(request, profile.on_interrupt),
    }
    agent_env.save(state, job_id, env, durable=durable)
    return launch, fields


def _start(
    state: State,
    job: Job,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None],
    launch: Callable[[], object],
    failure: str,
    note: Callable[[str], None],
) -> SubmitResult:
    """Follow the admitted job and `launch` it (in tmux here, or assigned to its host), unless
    it waits queued: then its supervisor, or a monitor, launches it when its turn comes."""
    position: list[int | None] = [None]
    waiting: list[str | None] = [None]

    def start() -> None:
        if job.status is JobState.QUEUED:  # a slot frees later: its supervisor launches it
            position[0] = queue_position(state, job.job_id)
            waiting[0] = waiting_reasons(state, [job]).get(job.job_id)
        else:
            launch()

    result = _follow_and_start(
        state, job, wait=wait, emit=emit, start=start, failure=failure, note=note
    )
    return result._replace(queue_position=position[0], waiting_for=waiting[0])


def end_unstarted(
    state: State, job_id: str, failure: str, exc: BaseException, *, raise_again: bool = True
) -> None:
    """End a job that could not be started with `failure` and the cause's message; a
    DelegateError cause is raised again as a StartFailed that says the job has ended (unless
    `raise_again` is False: the caller goes on with other jobs)."""
    reason = f"{failure}: {exc}" if isinstance(exc, DelegateError) else failure
    cause = {"source": "launcher", "observed": True, "error": str(exc)}
    end_job(state, job_id, JobState.ERROR, reason=reason, actor="submit", cause=cause)
    if not raise_again:
        return
    if isinstance(exc, DelegateError) and not isinstance(exc, StartFailed):
        raise StartFailed(job_id, failure, exc) from exc


def _follow_and_start(
    state: State,
    job: Job,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None],
    start: Callable[[], object],
    failure: str,
    note: Callable[[str], None],
) -> SubmitResult:
    """Start following the job, then `start` it: launch it here, or assign it to its host. A
    start that fails ends the job `failure`.

    The state dir's supervisor follows it (started here when none runs: services/supervisor),
    and a follower too when it is waited for. Both listen before the agent can say anything,
    except a follower on a bus that keeps every event for a late subscriber (SQLite): that one
    is made once the job is launched, while its wrapper starts up."""
    late = wait and keeps_history(state.bus_url_for(job))
    watcher: Watcher | None = None
    try:
        ensure_supervisor(state)
        _probe_own_broker(state, job)
        if wait and not late:
            watcher = _watcher(state, job.job_id, emit=emit, note=note)
        start()
    except BaseException as exc:
        if watcher is not None:
            watcher.close()
        end_unstarted(state, job.job_id, failure, exc)
        raise
    if late:
        watcher = _watcher(state, job.job_id, emit=emit, note=note)  # (the supervisor has it)
    if watcher is None:
        return SubmitResult(state.registry.get(job.job_id), True, None)
    return SubmitResult(state.registry.get(job.job_id), True, _wait_for(state, watcher))


def _probe_own_broker(state: State, job: Job) -> None:
    """A job on a broker of its own (`--bus`), which the supervisor starts listening to at its
    next pass: reached once now, so a broker that is not there fails the launch in its own
    words before the agent starts, not the agent's first publish."""
    url = state.bus_url_for(job)
    if keeps_history(url) or url == state.default_bus_url():
        return
    bus = state.open_bus_for(job)
    try:
        bus.probe()
    finally:
        bus.close()


def _watcher(
    state: State,
    job_id: str,
    *,
    emit: Callable[[dict[str, Any]], None],
    note: Callable[[str], None] = lambda text: None,
) -> "Watcher":
    """A follower of the job, subscribed from now: it reads the job's events and its record,
    and changes nothing (the state dir's supervisor owns the job)."""
    # services.jobs.watch brings the reconciler and its policy (~15 ms of dataclasses to build):
    # only what follows a job loads it
    from delegate.services.jobs.watch import Watcher

    return Watcher(state, job_id, emit=emit, note=note)


def _wait_for(state: State, watcher: "Watcher") -> "WatchOutcome":
    """Follow the job to its end. Ctrl-C stops the waiting, not the job: the supervisor has
    it all along (one is started if it has died meanwhile), and WaitInterrupted says how to
    follow or stop it."""
    try:
        return watcher.run()
    except KeyboardInterrupt:
        if not state.registry.get(watcher.job_id).status.terminal:
            ensure_supervisor(state)
        raise WaitInterrupted(watcher.job_id) from None


def follow_existing(
    state: State,
    job: Job,
    *,
    wait: bool,
    emit: Callable[[dict[str, Any]], None],
    note: Callable[[str], None],
) -> SubmitResult:
    outcome = None
    if not job.status.terminal:
        ensure_supervisor(state)
    if wait:
        watcher = _watcher(state, job.job_id, emit=emit, note=note)
        outcome = _wait_for(state, watcher)
    return SubmitResult(state.registry.get(job.job_id), False, outcome)


class CancelResult(NamedTuple):
    job: Job
    session_note: str | None = None  # set when the session could not be confirmed killed


def cancel(state: State, job_id: str, *, tmux: Tmux | None = None) -> CancelResult:
    """Cancel a job; if it runs in a session, kill the agent and its whole process tree.

    The session lives on the job's recorded tmux server. When tmux cannot be reached there, the
    job is still cancelled, but the session is not claimed terminated: the note says so.
    """
    ending = end_job(
        state, job_id, JobState.CANCELLED, actor="cancel", cause=operator_cause("cancel")
    )
    job = ending.job
    if not ending.changed:  # it had ended: a cancel cannot undo how
        raise IllegalTransition(job_id, job.status.value, JobState.CANCELLED.value)
    if job.host:  # on an agent host: that host kills the agent and its process tree
        from delegate.services.remote import cancel_remote  # only for a job on an agent host

        try:
            cancel_remote(state, job)
        except DelegateError as exc:
            return CancelResult(job, f"host {job.host} was not told: {exc}")
        return CancelResult(job)
    if not job.session:
        return CancelResult(job)
    sessions = inventory(state)
    row = sessions.get(job.session)
    if row is None or row.job_id != job_id:
        return CancelResult(job)
    server = tmux or tmux_for(state, job)
    try:
        if server.view().status == "unreachable":
            raise TmuxUnreachable(server.socket_path, server.view().reason)
        server.kill(job.session, job_id=job_id)
    except DelegateError as exc:
        return CancelResult(job, f"session {job.session} was not confirmed terminated: {exc}")
    sessions.set_state(
        job.session, SessionState.TERMINATED, reason=f"job {job_id} cancelled", job_id=job_id
    )
    return CancelResult(job)


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
