"""Plain data of the toolkit: job and session states, events, the job record. No I/O here.

The legal job transitions live in one table (`JOB_TRANSITIONS`); everything that changes a job's
state asks `check_transition` first, so an illegal move raises instead of being applied.
"""

from __future__ import annotations

from enum import StrEnum

from delegate.core.errors import IllegalTransition, InvalidJobId
from delegate.core.ids import is_job_id

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms; core.records builds the same tuples
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from delegate.core.records import NamedTuple

SESSION_PREFIX = "dlg-"  # the tmux session of job ID is dlg-ID unless its submit named one

RECORD_SCHEMA_VERSION = 1


def validate_job_id(job_id: object) -> str:
    """Return `job_id` if it is exactly 8 lowercase hex characters, else raise InvalidJobId.

    Called before any path is built from an id, so `../x` never reaches the file system.
    """
    if not is_job_id(job_id):
        raise InvalidJobId(job_id)
    return job_id


class JobState(StrEnum):
    # queued: a pending job with its launch spec that waits for a free slot under the cap
    QUEUED = "queued"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    ERROR = "error"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_JOB_STATES


TERMINAL_JOB_STATES = frozenset({JobState.COMPLETED, JobState.ERROR, JobState.CANCELLED})
OPEN_JOB_STATES = frozenset({JobState.QUEUED, JobState.PENDING, JobState.RUNNING})

JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.PENDING, JobState.ERROR, JobState.CANCELLED}),
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.ERROR, JobState.CANCELLED}),
    JobState.RUNNING: frozenset({JobState.COMPLETED, JobState.ERROR, JobState.CANCELLED}),
    JobState.COMPLETED: frozenset(),
    JobState.ERROR: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def is_legal_transition(current: JobState, target: JobState) -> bool:
    return target in JOB_TRANSITIONS[current]


def check_transition(job_id: str, current: JobState, target: JobState) -> None:
    if not is_legal_transition(current, target):
        raise IllegalTransition(job_id, current.value, target.value)


class SessionState(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"
    TERMINATED = "terminated"
    ARCHIVED = "archived"


# Which session changes make sense. terminated closes the record for good; archived (tmux left
# alive for a person to look at) may still be killed.
SESSION_TRANSITIONS: dict[SessionState, frozenset[SessionState]] = {
    SessionState.RUNNING: frozenset(
        {SessionState.STOPPED, SessionState.TERMINATED, SessionState.ARCHIVED}
    ),
    SessionState.STOPPED: frozenset(
        {SessionState.RUNNING, SessionState.TERMINATED, SessionState.ARCHIVED}
    ),
    SessionState.ARCHIVED: frozenset({SessionState.TERMINATED}),
    SessionState.TERMINATED: frozenset(),
}


class EventType(StrEnum):
    STARTED = "started"
    PROGRESS = "progress"
    PERMISSION_REQUIRED = "permission_required"
    COMPLETED = "completed"
    ERROR = "error"

    @property
    def terminal(self) -> bool:
        return self in (EventType.COMPLETED, EventType.ERROR)


EVENT_NAMES = frozenset(e.value for e in EventType)

# End reasons the wrapper reports as the job's own `error` (what it saw on the agent's channel):
# the job ends with them as they are, not as `agent_error: ...`.
BUDGET_EXCEEDED = "budget_exceeded"
RATE_LIMITED = "rate_limited"
# Its pane went away under it (SIGHUP: the tmux session or server was killed): an interruption
# (`on_interrupt = "requeue"` picks it up), not the agent failing.
PANE_GONE = "tmux_gone"
# The kernel stopped it at its memory limit (core/limits, read from its cgroup's counters).
MEMORY_EXCEEDED = "memory_exceeded"
WRAPPER_REASONS = (BUDGET_EXCEEDED, RATE_LIMITED, PANE_GONE, MEMORY_EXCEEDED)

# The job state an accepted event moves its job to; events missing here change nothing.
EVENT_TARGET_STATE: dict[EventType, JobState] = {
    EventType.STARTED: JobState.RUNNING,
    EventType.COMPLETED: JobState.COMPLETED,
    EventType.ERROR: JobState.ERROR,
}


class Job(NamedTuple):
    """One job record as stored in `jobs/<job_id>.json`; immutable, changed with `_replace`."""

    job_id: str
    status: JobState
    created_at: str
    updated_at: str
    auth_token: str
    agent: str | None = None
    command: str | None = None
    workdir: str | None = None
    session: str | None = None
    picked_by: str | None = None
    last_seq: int = 0
    wall_timeout_s: float | None = None
    idle_timeout_s: float | None = None
    bus: dict[str, Any] = {}  # noqa: RUF012 - never mutated; replaced as a whole
    idempotency_key: str | None = None
    error: str | None = None
    schema_version: int = RECORD_SCHEMA_VERSION
    # How the wrapper starts the agent: argv, prompt ("stdin"/"file"), prompt_path, clean_exit.
    launch: dict[str, Any] = {}  # noqa: RUF012 - never mutated; replaced as a whole
    # Reconciliation facts: when the job started and last spoke (record times), and the tmux
    # server its session lives on (a socket path), so every caller computes the same deadlines
    # and asks the right server.
    started_at: str | None = None
    last_event_at: str | None = None
    tmux_socket: str | None = None
    # Its own concurrency cap (`submit --max-running N`): it starts only while fewer than N run.
    max_running: int | None = None
    # A notifier argv (`submit --on-event CMD`) run with each notified event's JSON on stdin.
    notify: list[str] | None = None
    # Who is launching it (pid and process start time), so a crash between register and launch
    # can be told from a launch still under way.
    launcher: dict[str, Any] | None = None
    # The agent's own conversation, when its channel names one; `session resume` continues it.
    conversation_id: str | None = None
    # The conversation's running token totals as its agent last reported them (codex counts a
    # thread's usage from its start): a resumed attempt counts only what came after.
    conversation_usage: dict[str, Any] | None = None
    # What the agent's channel reported at its end (claude-stream result, codex usage).
    cost_usd: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    # The agent host it was assigned to (`submit --host NAME`); None: this machine's tmux.
    host: str | None = None
    # `submit --after`: the jobs it waits for, and what their endings must be (core/caps).
    after: list[str] | None = None
    after_rule: str | None = None
    # `submit --group`: the queue group whose caps and pause it follows.
    group: str | None = None
    # The job that submitted it (a sub-job an agent started through `delegate mcp`).
    parent: str | None = None
    # What it may spend (`submit --max-cost/--max-tokens`, `[budget]`): crossing either stops it.
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    # What its sub-jobs (and theirs) spent so far: the one counter a job and every job below
    # it draw on, checked against this job's budget (runtime/spending).
    sub_jobs_tokens: int | None = None
    sub_jobs_cost_usd: float | None = None
    # A sub-job submitted with `detach` (`[mcp] detach = true`): it outlives its parent's end,
    # still inside its parent's budget, folder and deadline.
    detached: bool | None = None
    # Its own git worktree (`submit --worktree`): repo (the person's checkout), base (commit),
    # base_ref (the branch it was made from, if any), branch, path, and once made `created`;
    # once `worktree clean` removed it, `removed_at`. None: the job shares its workdir.
    worktree: dict[str, Any] | None = None
    # `delegate merge`: where its branch went: commit, into (the branch), mode, at (a time).
    merged: dict[str, Any] | None = None
    # `submit --fan-out N` (or several --agent): the first job of the fan-out, shared by all N
    # (`delegate compare` takes it). Not `group`, which names a queue group.
    fan_out: str | None = None
    # `delegate review` of an ended job: the job this one follows up, in its worktree.
    follow_up_of: str | None = None
    # Attempts (core/retry): which attempt this is (None: the first), the one before and after
    # it, the earliest time a retry waiting its backoff may start, the `--retries` rule and
    # what an interruption does (`requeue` or `fail`).
    attempt: int | None = None
    retry_of: str | None = None
    retried_by: str | None = None
    not_before: str | None = None
    retry: dict[str, Any] | None = None
    on_interrupt: str | None = None
    # What the agent CLI refused to run: one tool name per denied call, in order (Claude Code's
    # `permission_denials`), set by the wrapper before the job's ending is published. A job that
    # completed with denials did not do all it was asked: every view says so.
    denied_tools: list[str] | None = None
    # While the agent CLI itself retries its model API (a 429, an overload, codex reconnecting):
    # attempt, max_retries, retry_delay_ms, error_status, error, and `at` (the record time the
    # retry was seen); None once it makes progress again or ends.
    agent_retry: dict[str, Any] | None = None
    # A limited job's figures, from its cgroup's counters at its end: the most memory it held
    # at once (bytes) and the CPU time of its whole process tree (seconds)
    peak_memory_bytes: int | None = None
    cpu_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = self._asdict()
        data["status"] = self.status.value
        data["bus"] = dict(self.bus)
        data["launch"] = dict(self.launch)
        if self.notify is not None:
            data["notify"] = list(self.notify)
        if self.after is not None:
            data["after"] = list(self.after)
        if self.worktree is not None:
            data["worktree"] = dict(self.worktree)
        if self.merged is not None:
            data["merged"] = dict(self.merged)
        if self.denied_tools is not None:
            data["denied_tools"] = list(self.denied_tools)
        if self.agent_retry is not None:
            data["agent_retry"] = dict(self.agent_retry)
        return data

    def public_dict(self) -> dict[str, Any]:
        """The record without its secret, for printing."""
        data = self.to_dict()
        data.pop("auth_token", None)
        return data

    @classmethod
    def from_dict(cls, data: object) -> Job:
        """Build a Job from parsed JSON; raise ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("record is not a JSON object")
        known = set(cls._fields)
        missing = {"job_id", "status", "created_at", "updated_at", "auth_token"} - data.keys()
        if missing:
            raise ValueError(f"missing fields: {', '.join(sorted(missing))}")
        values = {k: v for k, v in data.items() if k in known}
        try:
            validate_job_id(values["job_id"])
        except InvalidJobId as exc:
            raise ValueError(str(exc)) from None
        try:
            values["status"] = JobState(values["status"])
        except ValueError:
            raise ValueError(f"unknown status {values['status']!r}") from None
        if not isinstance(values.get("last_seq", 0), int) or values.get("last_seq", 0) < 0:
            raise ValueError("last_seq is not a non-negative integer")
        if not isinstance(values["auth_token"], str) or not values["auth_token"]:
            raise ValueError("auth_token is missing")
        if values.get("worktree") is not None and not isinstance(values["worktree"], dict):
            raise ValueError("worktree is not a JSON object")
        if values.get("merged") is not None and not isinstance(values["merged"], dict):
            raise ValueError("merged is not a JSON object")
        _check_denied_tools(values.get("denied_tools"))
        _check_agent_retry(values.get("agent_retry"))
        if values.get("schema_version", RECORD_SCHEMA_VERSION) != RECORD_SCHEMA_VERSION:
            raise ValueError(f"unsupported record schema_version {values['schema_version']!r}")
        return cls(**values)


# agent_retry's fields and the types a record may give them (a field may also be null or left
# out; other fields are kept as they are, for a newer wrapper's additions).
_RETRY_NUMBERS = ("attempt", "max_retries", "retry_delay_ms", "error_status")
_RETRY_TEXTS = ("error", "at")


def _check_denied_tools(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise ValueError("denied_tools is not a list of tool names")


def _check_agent_retry(value: object) -> None:
    """ValueError unless `value` is None or agent_retry as the wrapper writes it. Numbers must be
    finite and not negative: views compute a countdown from them."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise ValueError("agent_retry is not a JSON object")
    for key in _RETRY_NUMBERS:
        number = value.get(key)
        if number is None:
            continue
        # bool is an int to Python, never a count; NaN fails `>= 0`, infinity the bound
        if isinstance(number, bool) or not isinstance(number, int | float):
            raise ValueError(f"agent_retry.{key} is not a number")
        if not 0 <= number < 1e15:
            raise ValueError(f"agent_retry.{key} is out of range")
    for key in _RETRY_TEXTS:
        if value.get(key) is not None and not isinstance(value[key], str):
            raise ValueError(f"agent_retry.{key} is not text")


def publish_refusal(job: Job, event: EventType) -> str | None:
    """Why `event` may not be published for `job` now, or None when it may.

    `started` opens a job and is seq 1; other events need a started job, except `error`, which
    may also end a job that never started (pending -> error is legal).
    """
    if job.status.terminal:
        return f"the job is already {job.status.value}"
    if job.status is JobState.QUEUED:
        return "the job is queued and has not been launched"
    if event is EventType.STARTED:
        return None if job.last_seq == 0 else "the job has already started"
    if job.status is JobState.PENDING and event is not EventType.ERROR:
        return "the job has not started; publish 'started' first"
    return None


# --- what one look at the world sees: tmux panes and the session inventory's rows ----------


class Pane(NamedTuple):
    """One pane of a tmux server, as `list-panes -a` reports it."""

    session: str
    pane_id: str
    pid: int
    dead: bool
    exit_status: int | None
    job_id: str
    exit_signal: int | None = None


class TmuxView(NamedTuple):
    """What one query of one server saw: its panes, that no server runs there ("gone"), or
    that tmux could not be asked at all ("unreachable", with the reason)."""

    socket: str
    status: str  # "ok", "gone" or "unreachable"
    panes: tuple[Pane, ...] = ()
    reason: str = ""


class Session(NamedTuple):
    """One row of the session inventory (sessions.db)."""

    name: str
    state: SessionState
    job_id: str | None
    agent: str | None
    workdir: str | None
    pane_pid: int | None
    created_at: str
    updated_at: str
    socket: str | None = None
