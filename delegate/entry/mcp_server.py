"""`delegate mcp`: the coordination store and sub-jobs as MCP tools, over stdio, for one job.

The agent of a job starts it (its profile registers it: a `--mcp-config` file for Claude, `-c
mcp_servers.delegate...` overrides for Codex) and calls tools instead of shelling out to our
CLI. Each tool calls the same function its CLI command calls (`delegate.coord`, `entry.coord`'s
`acquire_lease` and `announce`, `services.jobs`), so the rules, exit reasons and audit are the
CLI's; a `DelegateError` becomes a tool error of one line that ends with the CLI's exit status.

Identity comes from the job's environment, never from a tool argument: DELEGATE_JOB_ID names
the job, and the agent is DELEGATE_AGENT_ID, else the job (as for the CLI). `identify` checks
it before serving (see there). No tool takes an owner, voter or sender: a lock, claim or vote is
always this agent's, so releasing another job's lock is refused as the CLI refuses it (not the
holder, exit 77).

It lives in `entry/` beside `entry.coord`, whose lock path it shares. Tools are coroutines:
the SDK runs plain functions on worker threads, and the coordination store keeps one SQLite
connection, opened on the event loop's thread.

This is the one module of the toolkit that imports the MCP SDK (an import-linter contract).
"""

from __future__ import annotations

import functools
import inspect
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, NamedTuple

import anyio
from mcp.server.mcpserver import MCPServer  # mcp 2 (the extra pins it): 1.x named it FastMCP
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from delegate.config.settings import AGENT_ENV, JOB_ENV, settings
from delegate.coord import blackboard, board, heartbeats, leases, messages
from delegate.coord.store import CoordStore
from delegate.core import fastjson as json
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import validate_job_id
from delegate.entry.coord import LOCK_TTL_S, acquire_lease, announce
from delegate.services.coord import open_coord
from delegate.services.jobs import agent_env
from delegate.services.jobs.publish import publish_own
from delegate.services.jobs.subjob import MAX_DEPTH, submit_subjob
from delegate.services.jobs.submit import SubmitRequest
from delegate.services.state import State

SERVER_NAME = "delegate"
JOB_WAIT_MAX_S = 3600.0
JOB_POLL_S = 0.2
WAIT_POLL_S = 0.05  # a waiting msg_inbox or acquire looks again this often
INSTRUCTIONS = (
    "Coordination with the other agents of this delegate installation, as the job this server"
    " serves: messages, locks and claims with fencing tokens, heartbeats, the blackboard, the"
    " board, sub-jobs and progress reports. Locks, claims and votes are always your own."
)


class Identity(NamedTuple):
    job_id: str
    agent: str


def identify(state: State) -> Identity:
    """The job this process serves, from its environment, checked against what submit wrote.

    The proof: the job's record (`jobs/<id>.json`, 0600 in the 0700 state dir, holding the job's
    auth token) must be readable here, so only the delegator's user gets this far; and when the
    job has its `logs/<id>/agent.env` (0600, the environment submit gave the agent), that file
    must be private and name the same job and agent. A job that has ended is not served.
    """
    env = settings()
    if not env.job_id:
        raise UsageError(f"delegate mcp serves one job: run it inside a job ({JOB_ENV} is unset)")
    job = state.registry.get(validate_job_id(env.job_id))
    agent = env.agent_id or job.job_id
    saved_path = state.audit.job_dir(job.job_id) / agent_env.ENV_FILE
    saved = agent_env.load(state, job.job_id)
    if saved is not None:
        if stat.S_IMODE(saved_path.stat().st_mode) & 0o077:
            raise UsageError(f"{saved_path} is readable by others; it must be mode 0600")
        if saved.get(JOB_ENV) != job.job_id or (saved.get(AGENT_ENV) or job.job_id) != agent:
            raise UsageError(f"this environment does not match job {job.job_id}'s own")
    if job.status.terminal:
        raise UsageError(f"job {job.job_id} has ended ({job.status.value})")
    return Identity(job.job_id, agent)


class Tools:
    """What each tool does, as the CLI command of the same name does it, for one agent."""

    def __init__(self, state: State, store: CoordStore, me: Identity) -> None:
        self.bind(state, store, me)

    @classmethod
    def unbound(cls) -> Tools:
        """Tools whose job is not known yet: a warm server (entry/mcp_zygote) builds its
        MCPServer around them before it forks, and each child binds them (`bind`) to what it
        opens itself (an SQLite connection must not cross a fork)."""
        return cls.__new__(cls)

    def bind(self, state: State, store: CoordStore, me: Identity) -> None:
        self.state = state
        self.store = store
        self.me = me

    # --- messages ---------------------------------------------------------------------------

    def msg_send(
        self,
        type: str,
        to: str | None,
        data: Any,
        correlation: str | None,
        reply_to: str | None,
        message_id: str | None,
    ) -> dict[str, Any]:
        return messages.send(
            self.store,
            sender=self.me.agent,
            type_=type,
            to=to,
            data=data,
            correlation_id=correlation,
            reply_to=reply_to,
            message_id=message_id,
        )

    async def msg_inbox(self, wait: float, limit: int) -> dict[str, Any]:
        """Polled without blocking: a wait here must not stall the agent's other tool calls
        (the store's connection lives on the event loop's thread, so no worker thread)."""
        deadline = anyio.current_time() + max(wait, 0.0)
        while True:
            found = messages.receive(self.store, self.me.agent, limit=limit)
            if found or anyio.current_time() >= deadline:
                return {"agent": self.me.agent, "messages": found}
            await _pause_until(deadline)

    def msg_ack(self, seq: int) -> dict[str, Any]:
        return {"agent": self.me.agent, "acked": messages.ack(self.store, self.me.agent, seq)}

    # --- locks and claims -------------------------------------------------------------------

    async def acquire(
        self, kind: str, name: str, ttl: float, wait: float, break_dead: bool
    ) -> dict[str, Any]:
        """Tried again while another holds it, until `wait` runs out (as msg_inbox waits)."""
        if wait < 0:
            raise UsageError("wait is a number of seconds, 0 or more")
        deadline = anyio.current_time() + wait
        while True:
            try:
                grant = acquire_lease(
                    self.store, kind, name, self.me.agent, ttl_s=ttl, break_dead=break_dead
                )
                return grant.to_dict()
            except leases.Held:
                if anyio.current_time() >= deadline:
                    raise
            await _pause_until(deadline)

    def renew(self, kind: str, name: str, ttl: float) -> dict[str, Any]:
        return leases.renew(self.store, kind, name, self.me.agent, ttl_s=ttl).to_dict()

    def release(self, kind: str, name: str) -> dict[str, Any]:
        announce([leases.release(self.store, kind, name, self.me.agent)])
        return {"released": name, "kind": kind}

    def lock_check(self, resource: str, token: int) -> dict[str, Any]:
        current, why = leases.check(self.store, "lock", resource, token)
        return {"current": current, "why": why}

    def heartbeat(self, status: str, task: str | None, progress: float | None) -> dict[str, Any]:
        return heartbeats.beat(self.store, self.me.agent, status, task=task, progress=progress)

    # --- blackboard -------------------------------------------------------------------------

    def bb_get(self, key: str) -> dict[str, Any]:
        return {"key": key, "entry": blackboard.read(self.store, key)}

    def bb_put(
        self, key: str, value: Any, ttl: float | None, if_version: int | None
    ) -> dict[str, Any]:
        return blackboard.write(
            self.store, key, value, ttl_s=ttl, agent=self.me.agent, if_version=if_version
        )

    def bb_list(self, prefix: str) -> dict[str, Any]:
        keys = ("key", "version", "source_agent", "expires_at")
        listed = [{k: e[k] for k in keys} for e in blackboard.entries(self.store, prefix)]
        return {"entries": listed}

    def bb_snapshot(self) -> dict[str, Any]:
        return {"snapshot": {e["key"]: e for e in blackboard.entries(self.store)}}

    # --- the board --------------------------------------------------------------------------

    def board_propose(
        self,
        voters: list[str],
        proposal: str,
        rounds: int,
        approve: float,
        review: float,
        reject: float,
    ) -> dict[str, Any]:
        board_id, events = board.open_board(
            self.store,
            voters,
            rounds=rounds,
            thresholds=board.Thresholds(approve, review, reject),
            proposal=proposal,
            opened_by=self.me.agent,
        )
        announce(events)
        return board.load(self.store, board_id).status()

    def board_post(self, step: str, body: dict[str, Any], board_id: str | None) -> dict[str, Any]:
        after, events = board.post(self.store, step, self.me.agent, body, board_id)
        announce(events)
        return after.status()

    def board_status(self, board_id: str | None) -> dict[str, Any]:
        return board.load(self.store, board_id).status()

    # --- jobs -------------------------------------------------------------------------------

    def job_submit(self, request: SubmitRequest) -> dict[str, Any]:
        result = submit_subjob(self.state, self.me.job_id, request)
        return {
            "job_id": result.job.job_id,
            "status": result.job.status.value,
            "parent": self.me.job_id,
        }

    def job_status(self, job_id: str) -> dict[str, Any]:
        return self.state.registry.get(validate_job_id(job_id)).public_dict()

    async def job_wait(self, job_id: str, timeout: float) -> dict[str, Any]:
        """Poll the record until the job has ended or `timeout` passes (the loop stays free)."""
        deadline = anyio.current_time() + min(max(timeout, 0.0), JOB_WAIT_MAX_S)
        while True:
            record = self.job_status(job_id)
            ended = record["status"] in ("completed", "error", "cancelled")
            if ended or anyio.current_time() >= deadline:
                return {"ended": ended, "job": record}
            await anyio.sleep(JOB_POLL_S)

    def progress(self, detail: str, percent: float | None) -> dict[str, Any]:
        if percent is not None and not 0 <= percent <= 100:
            raise UsageError("percent is between 0 and 100")
        data = {} if percent is None else {"percent": percent}
        publish_own("progress", detail, json.dumps(data))
        return {"job_id": self.me.job_id, "event": "progress", "detail": detail}


async def _pause_until(deadline: float) -> None:
    """One poll interval of a waiting tool, never past its deadline; the loop stays free."""
    await anyio.sleep(max(0.0, min(WAIT_POLL_S, deadline - anyio.current_time())))


def one_line(exc: DelegateError) -> str:
    text = " ".join(str(exc).split())
    return f"{text} (exit {exc.exit_code})"


Handler = Callable[..., Awaitable[dict[str, Any]]]


def add_tool(server: MCPServer, fn: Handler) -> None:
    """Register `fn` (its name, its docstring as the description, its annotated parameters as
    the schema); a DelegateError it raises becomes a tool error of one line."""

    @functools.wraps(fn)
    async def tool(*args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return await fn(*args, **kwargs)
        except DelegateError as exc:
            raise ToolError(one_line(exc)) from None

    server.add_tool(tool, name=fn.__name__, description=inspect.getdoc(fn))


Key = Annotated[str, Field(description="The blackboard key, e.g. task:q4 or cache:metrics.")]
Resource = Annotated[str, Field(description="What to lock: a path, a name.")]
Task = Annotated[str, Field(description="The task to claim (any name).")]
Ttl = Annotated[float, Field(description="Seconds it lasts unless renewed.")]
Lease = Annotated[float, Field(description="Seconds the claim lasts unless renewed.")]
Wait = Annotated[float, Field(description="Seconds to wait while another holds it.")]
BreakDead = Annotated[
    bool, Field(description="Take it from a holder whose heartbeat is DEAD (audited).")
]
BoardId = Annotated[
    str | None, Field(description="Board id (default: the most recent open board).")
]
JobId = Annotated[str, Field(description="A job id (8 hex characters).")]


def message_tools(server: MCPServer, tools: Tools) -> None:
    async def msg_send(
        type: Annotated[str, Field(description="What kind of message (free text).")],
        to: Annotated[
            str | None, Field(description="The receiving agent (none: everyone).")
        ] = None,
        data: Annotated[Any, Field(description="The payload, any JSON value.")] = None,
        correlation: Annotated[
            str | None, Field(description="An id tying messages together.")
        ] = None,
        reply_to: Annotated[
            str | None, Field(description="The id of the message this answers.")
        ] = None,
        message_id: Annotated[
            str | None, Field(description="Sending one id twice stores it once.")
        ] = None,
    ) -> dict[str, Any]:
        """Send a message from this agent to one agent, or to everyone (`delegate msg send`)."""
        return tools.msg_send(type, to, data, correlation, reply_to, message_id)

    async def msg_inbox(
        wait: Annotated[float, Field(description="Seconds to wait when none is there.")] = 0.0,
        limit: Annotated[int, Field(description="At most this many messages.")] = 100,
    ) -> dict[str, Any]:
        """Messages to this agent not yet acknowledged, oldest first (`delegate msg recv`).
        Receiving does not acknowledge: call msg_ack once they are handled."""
        return await tools.msg_inbox(wait, limit)

    async def msg_ack(
        seq: Annotated[int, Field(description="Everything up to this seq is handled.")],
    ) -> dict[str, Any]:
        """Acknowledge this agent's messages up to SEQ; they are not received again."""
        return tools.msg_ack(seq)

    for fn in (msg_send, msg_inbox, msg_ack):
        add_tool(server, fn)


def lease_tools(server: MCPServer, tools: Tools) -> None:
    async def lock_acquire(
        resource: Resource, ttl: Ttl = LOCK_TTL_S, wait: Wait = 0.0, break_dead: BreakDead = False
    ) -> dict[str, Any]:
        """Lock RESOURCE for this agent; returns its fencing token (refused, exit 75, while
        another holds it). Pass the token to whatever checks it (lock_check)."""
        return await tools.acquire("lock", resource, ttl, wait, break_dead)

    async def lock_renew(resource: Resource, ttl: Ttl = LOCK_TTL_S) -> dict[str, Any]:
        """Extend this agent's live lock by TTL seconds from now (an expired one must be
        acquired again; another's is refused, exit 77)."""
        return tools.renew("lock", resource, ttl)

    async def lock_release(resource: Resource) -> dict[str, Any]:
        """Release this agent's lock (refused, exit 77, when it does not hold it)."""
        return tools.release("lock", resource)

    async def lock_check(
        resource: Resource,
        token: Annotated[int, Field(description="The fencing token to check.")],
    ) -> dict[str, Any]:
        """Whether TOKEN is still the live lock on RESOURCE."""
        return tools.lock_check(resource, token)

    async def claim_acquire(
        task: Task, lease: Lease = 60.0, wait: Wait = 0.0, break_dead: BreakDead = False
    ) -> dict[str, Any]:
        """Claim TASK for this agent with a lease (first claim wins; exit 75 while another
        holds it); returns its fencing token."""
        return await tools.acquire("claim", task, lease, wait, break_dead)

    async def claim_renew(task: Task, lease: Lease = 60.0) -> dict[str, Any]:
        """Extend this agent's live claim by LEASE seconds from now."""
        return tools.renew("claim", task, lease)

    async def claim_release(task: Task) -> dict[str, Any]:
        """Release this agent's claim (refused, exit 77, when it does not hold it)."""
        return tools.release("claim", task)

    async def heartbeat(
        status: Annotated[str, Field(description="idle, working or blocked.")] = "working",
        task: Annotated[str | None, Field(description="What it works on.")] = None,
        progress: Annotated[float | None, Field(description="Percent done, 0 to 100.")] = None,
    ) -> dict[str, Any]:
        """Say this agent is alive, and what it does (`delegate heartbeat`)."""
        return tools.heartbeat(status, task, progress)

    for fn in (
        lock_acquire, lock_renew, lock_release, lock_check,
        claim_acquire, claim_renew, claim_release, heartbeat,
    ):  # fmt: skip
        add_tool(server, fn)


def blackboard_tools(server: MCPServer, tools: Tools) -> None:
    async def bb_get(key: Key) -> dict[str, Any]:
        """A blackboard entry (value, version, writer), or null when absent or expired."""
        return tools.bb_get(key)

    async def bb_put(
        key: Key,
        value: Annotated[Any, Field(description="Any JSON value.")],
        ttl: Annotated[float | None, Field(description="Seconds until it expires.")] = None,
        if_version: Annotated[
            int | None, Field(description="Write only if the entry is at this version (0: absent).")
        ] = None,
    ) -> dict[str, Any]:
        """Write a blackboard entry as this agent; returns it with its new version (refused,
        exit 75, when IF_VERSION is stale)."""
        return tools.bb_put(key, value, ttl, if_version)

    async def bb_list(
        prefix: Annotated[str, Field(description="Only keys starting so.")] = "",
    ) -> dict[str, Any]:
        """Live blackboard keys with their versions and writers."""
        return tools.bb_list(prefix)

    async def bb_snapshot() -> dict[str, Any]:
        """Every live blackboard entry, by key."""
        return tools.bb_snapshot()

    for fn in (bb_get, bb_put, bb_list, bb_snapshot):
        add_tool(server, fn)


def board_tools(server: MCPServer, tools: Tools) -> None:
    async def board_propose(
        voters: Annotated[list[str], Field(description="The agents who vote.")],
        proposal: Annotated[str, Field(description="What the board decides on.")],
        rounds: Annotated[int, Field(description="Discussion rounds (0: none).")] = 1,
        approve: Annotated[float, Field(description="Approve share to approve.")] = 0.8,
        review: Annotated[float, Field(description="Approve share to approve with review.")] = 0.6,
        reject: Annotated[float, Field(description="Reject share to reject.")] = 0.6,
    ) -> dict[str, Any]:
        """Open a board on PROPOSAL (`delegate board open`); returns its status and id."""
        return tools.board_propose(voters, proposal, rounds, approve, review, reject)

    async def board_assess(
        verdict: Annotated[
            str | None, Field(description="Your leaning: approve or reject.")
        ] = None,
        concerns: Annotated[list[str] | None, Field(description="Concerns.")] = None,
        note: Annotated[str | None, Field(description="Free text.")] = None,
        board: BoardId = None,
    ) -> dict[str, Any]:
        """Post this agent's assessment (phase 1), as `delegate board assess`."""
        body = {"verdict": verdict, "score": None, "concerns": concerns or [],
                "recommendations": [], "note": note}  # fmt: skip
        return tools.board_post("assess", body, board)

    async def board_vote(
        verdict: Annotated[str, Field(description="approve or reject.")],
        confidence: Annotated[float | None, Field(description="0 to 1.")] = None,
        conditions: Annotated[
            list[str] | None, Field(description="Conditions of the vote.")
        ] = None,
        board: BoardId = None,
    ) -> dict[str, Any]:
        """Cast this agent's final vote (phase 3), as `delegate board vote`."""
        if confidence is not None and not 0 <= confidence <= 1:
            raise UsageError("confidence is between 0 and 1")
        body = {"verdict": verdict, "confidence": confidence, "conditions": conditions or []}
        return tools.board_post("vote", body, board)

    async def board_status(board: BoardId = None) -> dict[str, Any]:
        """Where a board stands: its phase and who it waits for."""
        return tools.board_status(board)

    for fn in (board_propose, board_assess, board_vote, board_status):
        add_tool(server, fn)


def job_tools(server: MCPServer, tools: Tools) -> None:
    async def job_submit(
        prompt: Annotated[str, Field(description="What the sub-job's agent is asked to do.")],
        agent: Annotated[
            str | None, Field(description="The agent profile (default: this job's own).")
        ] = None,
        cmd: Annotated[
            str | None, Field(description="A shell command instead of a profile.")
        ] = None,
        workdir: Annotated[
            str | None, Field(description="Where it runs (default: this job's).")
        ] = None,
        wall_timeout: Annotated[float | None, Field(description="Seconds it may run.")] = None,
        idempotency_key: Annotated[
            str | None, Field(description="Submitting one key twice starts one job.")
        ] = None,
        max_cost: Annotated[
            float | None, Field(description="USD it may spend (within this job's budget).")
        ] = None,
        max_tokens: Annotated[
            int | None, Field(description="Tokens it may use (within this job's budget).")
        ] = None,
        detach: Annotated[
            bool, Field(description="Keep it running when this job ends, where allowed.")
        ] = False,
    ) -> dict[str, Any]:
        """Submit a sub-job of this job (recorded as its parent; sub-jobs stop at depth
        MAX_DEPTH). Returns at once with its id: follow it with job_wait or job_status."""
        request = SubmitRequest(
            prompt=prompt.encode("utf-8"),
            agent=agent,
            cmd=cmd,
            workdir=Path(workdir) if workdir else None,
            wall_timeout_s=wall_timeout,
            idempotency_key=idempotency_key,
            max_cost_usd=max_cost,
            max_tokens=max_tokens,
            detached=detach,
        )
        return tools.job_submit(request)

    async def job_status(job_id: JobId) -> dict[str, Any]:
        """A job's record (never its token), as `delegate show`."""
        return tools.job_status(job_id)

    async def job_wait(
        job_id: JobId,
        timeout: Annotated[float, Field(description="Seconds to wait at most.")] = 600.0,
    ) -> dict[str, Any]:
        """Wait until a job has ended, or TIMEOUT passed; returns whether it ended, and its
        record."""
        return await tools.job_wait(job_id, timeout)

    async def progress(
        detail: Annotated[str, Field(description="What this job is doing now.")],
        percent: Annotated[float | None, Field(description="Percent done, 0 to 100.")] = None,
    ) -> dict[str, Any]:
        """Report this job's progress: a `progress` event on its bus (`delegate publish`)."""
        return tools.progress(detail, percent)

    job_submit.__doc__ = (job_submit.__doc__ or "").replace("MAX_DEPTH", str(MAX_DEPTH))
    for fn in (job_submit, job_status, job_wait, progress):
        add_tool(server, fn)


def build_server(tools: Tools) -> MCPServer:
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS)
    for group in (message_tools, lease_tools, blackboard_tools, board_tools, job_tools):
        group(server, tools)
    return server


class Warm(NamedTuple):
    """A server built before its job's state was opened (`prepare`), for `serve` to bind."""

    server: MCPServer
    tools: Tools


def prepare() -> Warm:
    """What can be built before serving: the server and its 23 tools' schemas (a few hundred
    ms), and the modules serving imports late. Opens no file and starts no thread or loop, so
    a process may fork after it (entry/mcp_zygote)."""
    import anyio._backends._asyncio  # noqa: F401  # what anyio.run loads: warmed up on purpose
    import mcp.server.stdio  # noqa: F401  # what run("stdio") loads: warmed up on purpose

    tools = Tools.unbound()
    return Warm(build_server(tools), tools)


def serve(warm: Warm | None = None) -> int:
    """`delegate mcp`: check who this is, then answer over stdin/stdout until stdin closes.
    `warm`: the server `prepare` built in a warm process, bound here to this job."""
    state = State.open()
    me = identify(state)
    if warm is None:
        build_server(Tools(state, open_coord(), me)).run("stdio")
    else:
        warm.tools.bind(state, open_coord(), me)
        warm.server.run("stdio")
    return 0
