"""The coordination commands (DESIGN 10): msg, lock, claim, heartbeat, agents, block, unblock,
deadlocks, board, bb, bus export. Each parses, calls one function of `delegate.coord`, prints.

Exit statuses beyond the common ones: 75 a lock or claim is held by another (or a blackboard
version is stale), 77 not the holder, 1 for `lock check` on a stale token, for `deadlocks` when
it found any, for `msg recv` when nothing came, and for `bb read --strict` / `bb delete` when
there is no such key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from typer.core import TyperGroup

from delegate.adapters.terminal import Column, print_listing
from delegate.adapters.terminal import print_json as _print_json
from delegate.cli.common import JsonOpt
from delegate.coord.blackboard import delete, entries, parse_value, read, render, write
from delegate.coord.board import Thresholds as BoardThresholds
from delegate.coord.board import load, open_board, post, resolve
from delegate.coord.deadlock import block as record
from delegate.coord.deadlock import deadlocks as cycles
from delegate.coord.deadlock import describe
from delegate.coord.deadlock import unblock as drop
from delegate.coord.export import bus_rows, export, message_rows
from delegate.coord.heartbeats import agents as heartbeat_agents
from delegate.coord.heartbeats import beat
from delegate.coord.leases import check, listing, release, renew
from delegate.coord.messages import ack, receive, send
from delegate.core.errors import UsageError
from delegate.core.timefmt import human_duration, local_time
from delegate.entry.coord import LOCK_TTL_S, acquire_lease, announce
from delegate.services.coord import (
    default_agent,
    finished_job_agents,
    heartbeat_thresholds,
    open_coord,
)
from delegate.services.state import State

if TYPE_CHECKING:
    from delegate.coord.heartbeats import Thresholds
    from delegate.coord.store import CoordStore

OwnerOpt = Annotated[
    str | None,
    typer.Option("--owner", help="Who holds it (default: $DELEGATE_AGENT_ID, else the job id)."),
]
BreakDeadOpt = Annotated[
    bool,
    typer.Option("--break-dead", help="Take it from a holder whose heartbeat is DEAD (audited)."),
]
WaitOpt = Annotated[float, typer.Option("--wait", help="Seconds to wait while another holds it.")]

msg_app = typer.Typer(
    help="Messages between agents: send, recv, ack, export.\n\n"
    "Example: delegate msg send --from planner --to coder --type task\n"
    "Example: delegate msg recv --agent coder --json",
    no_args_is_help=True,
)
lock_app = typer.Typer(
    help="Resource locks with expiry and fencing tokens.\n\n"
    "Example: delegate lock acquire src/app.py --owner coder --ttl 120\n"
    "Example: delegate lock list",
    no_args_is_help=True,
)
board_app = typer.Typer(
    help="Board deliberation: open, assess, discuss, vote, resolve, status.\n\n"
    "Example: delegate board open --voters arch,sec,qa --proposal-file plan.md\n"
    "Example: delegate board status",
    no_args_is_help=True,
)
bb_app = typer.Typer(
    help="The blackboard: a shared key/value board with TTL.\n\n"
    'Example: delegate bb write task:q4 \'{"status": "pending"}\' --ttl 3600\n'
    "Example: delegate bb list --prefix task:",
    no_args_is_help=True,
)
bus_app = typer.Typer(
    help="The job event bus.\n\nExample: delegate bus export --out events.jsonl",
    no_args_is_help=True,
)


def _store() -> CoordStore:
    return open_coord()


def _agent(given: str | None, option: str) -> str:
    agent = default_agent(given)
    if not agent:
        raise UsageError(f"{option} is needed (or run inside a job, or set DELEGATE_AGENT_ID)")
    return agent


def _thresholds() -> Thresholds:
    return heartbeat_thresholds()


def _parse_json(text: str | None, option: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{option} is not JSON: {exc}") from None


# --- messages -------------------------------------------------------------------------------


@msg_app.command("send")
def msg_send(
    sender: Annotated[str | None, typer.Option("--from", help="The sending agent.")] = None,
    to: Annotated[
        str | None, typer.Option("--to", help="The receiving agent (none: everyone).")
    ] = None,
    type_: Annotated[str, typer.Option("--type", help="What kind of message (free text).")] = "",
    correlation: Annotated[
        str | None, typer.Option("--correlation", help="An id tying messages together.")
    ] = None,
    reply_to: Annotated[
        str | None, typer.Option("--reply-to", help="The id of the message this answers.")
    ] = None,
    data: Annotated[str | None, typer.Option("--data", help="The payload, JSON.")] = None,
    message_id: Annotated[
        str | None, typer.Option("--id", help="Message id; sending one id twice stores it once.")
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Send a message to one agent, or to everyone. Prints its seq.

    Example: delegate msg send --from planner --to coder --type task --data '{"file": "a.py"}'
    """
    if not type_:
        raise UsageError("--type is needed")
    sent = send(
        _store(),
        sender=_agent(sender, "--from"),
        type_=type_,
        to=to,
        data=_parse_json(data, "--data"),
        correlation_id=correlation,
        reply_to=reply_to,
        message_id=message_id,
    )
    if as_json:
        _print_json(sent)
    else:
        print(sent["seq"])
    return 0


@msg_app.command("recv")
def msg_recv(
    agent: Annotated[str | None, typer.Option("--agent", help="The receiving agent.")] = None,
    wait: Annotated[
        float, typer.Option("--wait", help="Seconds to wait for a message when none is there.")
    ] = 0.0,
    limit: Annotated[int, typer.Option("--limit", help="At most this many messages.")] = 100,
    as_json: JsonOpt = False,
) -> int:
    """Messages not yet acknowledged by AGENT, oldest first (exit 1 when there are none).

    Receiving does not acknowledge: run `delegate msg ack` once they are handled.
    Example: delegate msg recv --agent coder --wait 30 --json
    """
    who = _agent(agent, "--agent")
    found = receive(_store(), who, wait_s=wait, limit=limit)
    print_listing(
        found,
        ["SEQ", "FROM", "TO", "TYPE", Column("DATA", free=True)],
        lambda m: [
            str(m["seq"]),
            m["from"],
            m["to"] or "*",
            m["type"],
            "-" if m["data"] is None else json.dumps(m["data"], ensure_ascii=False),
        ],
        as_json=as_json,
        empty=f"no messages for {who}",
    )
    return 0 if found else 1


@msg_app.command("ack")
def msg_ack(
    seq: Annotated[int, typer.Argument(help="Everything up to this seq is handled.")],
    agent: Annotated[str | None, typer.Option("--agent", help="The receiving agent.")] = None,
) -> int:
    """Acknowledge every message up to SEQ; they are not received again.

    Example: delegate msg ack --agent coder 42
    """
    print(ack(_store(), _agent(agent, "--agent"), seq))
    return 0


OutOpt = Annotated[
    Path | None, typer.Option("--out", help="Append to this file (default: stdout).")
]


def _exported(result: dict[str, Any]) -> None:
    if result["out"] != "-":
        print(
            f"{result['written']} new line(s) to {result['out']} (up to seq {result['last_seq']})"
        )


@msg_app.command("export")
def msg_export(out: OutOpt = None) -> int:
    """Append the messages sent since this export's last run, as JSON lines.

    Example: delegate msg export --out messages.jsonl
    """
    store = _store()
    _exported(export(store, "messages", message_rows(store), out))
    return 0


@bus_app.command("export")
def bus_export(out: OutOpt = None) -> int:
    """Append the job events published on the SQLite bus since this export's last run.

    Example: delegate bus export --out events.jsonl
    """
    state = State.open()
    url = state.default_bus_url()
    if not url.startswith("sqlite://"):
        raise UsageError(f"bus export reads a SQLite bus; this state dir's bus is {url}")
    with bus_rows(Path(url.split("://", 1)[1].split("?", 1)[0])) as fetch:
        _exported(export(_store(), f"bus:{url}", fetch, out))
    return 0


# --- locks and claims -----------------------------------------------------------------------


def _print_grant(grant: Any, as_json: bool) -> None:
    if as_json:
        _print_json(grant.to_dict())
    else:
        print(grant.token)


@lock_app.command("acquire")
def lock_acquire(
    resource: Annotated[str, typer.Argument(help="What to lock (a path, a name).")],
    owner: OwnerOpt = None,
    ttl: Annotated[
        float, typer.Option("--ttl", help="Seconds the lock lasts unless renewed.")
    ] = LOCK_TTL_S,
    wait: WaitOpt = 0.0,
    break_dead: BreakDeadOpt = False,
    as_json: JsonOpt = False,
) -> int:
    """Lock RESOURCE; prints its fencing token (exit 75 when another holds it).

    Example: delegate lock acquire src/app.py --owner coder --ttl 120 --json
    """
    owner = _agent(owner, "--owner")
    grant = acquire_lease(
        _store(), "lock", resource, owner, ttl_s=ttl, wait_s=wait, break_dead=break_dead
    )
    _print_grant(grant, as_json)
    return 0


@lock_app.command("renew")
def lock_renew(
    resource: Annotated[str, typer.Argument(help="The locked resource.")],
    owner: OwnerOpt = None,
    ttl: Annotated[float, typer.Option("--ttl", help="Seconds from now.")] = LOCK_TTL_S,
    as_json: JsonOpt = False,
) -> int:
    """Extend your live lock; an expired one must be acquired again.

    Example: delegate lock renew src/app.py --owner coder --ttl 120
    """
    _print_grant(renew(_store(), "lock", resource, _agent(owner, "--owner"), ttl_s=ttl), as_json)
    return 0


@lock_app.command("release")
def lock_release(
    resource: Annotated[str, typer.Argument(help="The locked resource.")],
    owner: OwnerOpt = None,
) -> int:
    """Release your lock (exit 77 when you do not hold it).

    Example: delegate lock release src/app.py --owner coder
    """
    event = release(_store(), "lock", resource, _agent(owner, "--owner"))
    announce([event])
    return 0


@lock_app.command("check")
def lock_check(
    resource: Annotated[str, typer.Argument(help="The locked resource.")],
    token: Annotated[int, typer.Option("--token", help="The fencing token to check.")],
) -> int:
    """Whether TOKEN is still the live lock on RESOURCE: exit 0 current, 1 stale.

    Example: delegate lock check src/app.py --token 7
    """
    current, why = check(_store(), "lock", resource, token)
    print(why)
    return 0 if current else 1


@lock_app.command("list")
def lock_list(as_json: JsonOpt = False) -> int:
    """Locks held now (and expired ones no one took yet, marked so).

    Example: delegate lock list --json
    """
    _list_leases("lock", as_json)
    return 0


def _list_leases(kind: str, as_json: bool) -> None:
    store = _store()
    now = store.now()

    def expires(ms: int) -> str:
        if ms <= now:
            return f"expired {human_duration((now - ms) / 1000)} ago"
        return f"in {human_duration((ms - now) / 1000)}"

    resource: Column | str = Column("RESOURCE" if kind == "lock" else "TASK", free=True)
    print_listing(
        listing(store, kind),
        [resource, "OWNER", "TOKEN", "HELD FOR", "EXPIRES"],
        lambda g: [
            g.name,
            g.owner,
            str(g.token),
            human_duration((now - g.acquired_ms) / 1000),
            expires(g.expires_ms),
        ],
        as_json=as_json,
        to_json=lambda g: g.to_dict(now),
        empty=f"no {kind}s held",
    )


class _ClaimGroup(TyperGroup):
    """`claim TASK` is `claim acquire TASK`: a first word that names no subcommand (nor asks
    for help) is the task of an acquire."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["acquire", *args]
        return super().parse_args(ctx, args)


claim_app = typer.Typer(
    cls=_ClaimGroup,
    help="Claim a task with a lease (first claim wins; exit 75 when another holds it).\n\n"
    "`delegate claim TASK` is `claim acquire TASK`; then `claim renew TASK`,"
    " `claim release TASK`, `claim list`.\n"
    "Example: delegate claim build-docs --owner writer --lease 60",
    no_args_is_help=True,
)
TaskArg = Annotated[str, typer.Argument(help="The task (any name).")]
LeaseOpt = Annotated[float, typer.Option("--lease", help="Seconds the claim lasts unless renewed.")]


@claim_app.command("acquire")
def claim_acquire(
    task: TaskArg,
    owner: OwnerOpt = None,
    lease: LeaseOpt = 60.0,
    wait: WaitOpt = 0.0,
    break_dead: BreakDeadOpt = False,
    as_json: JsonOpt = False,
) -> int:
    """Claim TASK with a lease; prints its fencing token (exit 75 when another holds it).

    Example: delegate claim acquire build-docs --owner writer --lease 60
    """
    grant = acquire_lease(
        _store(),
        "claim",
        task,
        _agent(owner, "--owner"),
        ttl_s=lease,
        wait_s=wait,
        break_dead=break_dead,
    )
    _print_grant(grant, as_json)
    return 0


@claim_app.command("renew")
def claim_renew(
    task: TaskArg, owner: OwnerOpt = None, lease: LeaseOpt = 60.0, as_json: JsonOpt = False
) -> int:
    """Extend your live claim by --lease seconds from now; an expired one must be claimed again.

    Example: delegate claim renew build-docs --owner writer --lease 60
    """
    _print_grant(renew(_store(), "claim", task, _agent(owner, "--owner"), ttl_s=lease), as_json)
    return 0


@claim_app.command("release")
def claim_release(task: TaskArg, owner: OwnerOpt = None) -> int:
    """Release your claim (exit 77 when you do not hold it).

    Example: delegate claim release build-docs --owner writer
    """
    announce([release(_store(), "claim", task, _agent(owner, "--owner"))])
    return 0


@claim_app.command("list")
def claim_list(as_json: JsonOpt = False) -> int:
    """Claims held now (and expired ones no one took yet, marked so).

    Example: delegate claim list --json
    """
    _list_leases("claim", as_json)
    return 0


# --- heartbeats and deadlocks ---------------------------------------------------------------


def heartbeat(
    agent: Annotated[str | None, typer.Option("--agent", help="The agent beating.")] = None,
    status: Annotated[str, typer.Option("--status", help="idle, working or blocked.")] = "working",
    task: Annotated[str | None, typer.Option("--task", help="What it works on.")] = None,
    progress: Annotated[
        float | None, typer.Option("--progress", help="Percent done, 0 to 100.")
    ] = None,
) -> int:
    """Say this agent is alive, and what it does.

    Example: delegate heartbeat --agent coder --status working --task build-docs --progress 40
    """
    beat(_store(), _agent(agent, "--agent"), status, task=task, progress=progress)
    return 0


def agents(
    show_all: Annotated[
        bool, typer.Option("--all", help="Also the agents of jobs that have ended.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Every agent's last heartbeat: OK, WARN (30 s), STALE (100 s) or DEAD (5 min).

    The agents of jobs that have ended (a job's wrapper beats as the job id) are left out
    unless --all. Thresholds: `[heartbeat] warn/stale/dead` (seconds) in delegate.toml.
    Example: delegate agents --json
    """
    found = heartbeat_agents(_store(), _thresholds())
    hidden = set() if show_all else finished_job_agents([r["agent"] for r in found])
    shown = [r for r in found if r["agent"] not in hidden]
    empty = "no agent has sent a heartbeat"
    if hidden:
        empty = f"no agents of open jobs ({len(hidden)} of ended jobs hidden; --all shows them)"
    print_listing(
        shown,
        ["AGENT", "LIVENESS", "LAST BEAT", "STATUS", "PROGRESS", Column("TASK", free=True)],
        lambda r: [
            r["agent"],
            r["liveness"],
            f"{human_duration(r['age_s'])} ago",
            r["status"],
            "-" if r["progress"] is None else f"{r['progress']:g}%",
            r["task"] or "-",
        ],
        as_json=as_json,
        empty=empty,
    )
    return 0


WaitingForOpt = Annotated[str | None, typer.Option("--waiting-for", help="The agent it waits for.")]
ResourceOpt = Annotated[
    str | None, typer.Option("--resource", help="The resource (lock or claim) it waits for.")
]


def block(
    agent: Annotated[str | None, typer.Option("--agent", help="The waiting agent.")] = None,
    waiting_for: WaitingForOpt = None,
    resource: ResourceOpt = None,
) -> int:
    """Record that an agent waits for another agent or for a resource.

    Example: delegate block --agent coder --resource src/app.py
    """
    record(_store(), _agent(agent, "--agent"), waiting_for=waiting_for, resource=resource)
    return 0


def unblock(
    agent: Annotated[
        str | None, typer.Option("--agent", help="The agent no longer waiting.")
    ] = None,
    waiting_for: WaitingForOpt = None,
    resource: ResourceOpt = None,
) -> int:
    """Drop an agent's wait (the one named, or all of them).

    Example: delegate unblock --agent coder
    """
    print(drop(_store(), _agent(agent, "--agent"), waiting_for=waiting_for, resource=resource))
    return 0


def deadlocks(as_json: JsonOpt = False) -> int:
    """Every cycle of the wait-for graph; exit 0 when there is none, 1 when there are.

    Example: delegate deadlocks --json
    """
    found = cycles(_store())
    listed: list[dict[str, Any]] = [
        {"cycle": cycle, "agents": [step["agent"] for step in cycle]} for cycle in found
    ]
    print_listing(
        listed,
        ["AGENTS", Column("CYCLE", free=True)],
        lambda c: [", ".join(c["agents"]), describe(c["cycle"])],
        as_json=as_json,
        empty="no deadlocks",
    )
    return 1 if found else 0


# --- the board ------------------------------------------------------------------------------

BoardOpt = Annotated[
    str | None, typer.Option("--board", help="Board id (default: the most recent open board).")
]
VoterOpt = Annotated[str | None, typer.Option("--voter", help="Who speaks.")]


@board_app.command("open")
def board_open(
    voters: Annotated[str, typer.Option("--voters", help="Comma-separated voters: A,B,C.")],
    rounds: Annotated[int, typer.Option("--rounds", help="Discussion rounds (0: none).")] = 1,
    approve: Annotated[float, typer.Option("--approve", help="Approve share to approve.")] = 0.8,
    review: Annotated[
        float, typer.Option("--review", help="Approve share to approve with review.")
    ] = 0.6,
    reject: Annotated[float, typer.Option("--reject", help="Reject share to reject.")] = 0.6,
    proposal_file: Annotated[
        Path | None, typer.Option("--proposal-file", help="What the board decides on.")
    ] = None,
) -> int:
    """Open a board; prints its id.

    Example: delegate board open --voters arch,sec,qa --rounds 1 --proposal-file plan.md
    """
    proposal = None
    if proposal_file is not None:
        try:
            proposal = proposal_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read {proposal_file}: {exc}") from None
    board_id, events = open_board(
        _store(),
        voters.split(","),
        rounds=rounds,
        thresholds=BoardThresholds(approve, review, reject),
        proposal=proposal,
        opened_by=default_agent(None) or "",
    )
    announce(events)
    print(board_id)
    return 0


def _post(step: str, voter: str | None, board: str | None, body: dict[str, Any]) -> None:
    after, events = post(_store(), step, _agent(voter, "--voter"), body, board)
    announce(events)
    print(f"board {after.id}: {after.describe_phase()}")


@board_app.command("assess")
def board_assess(
    verdict: Annotated[
        str | None, typer.Option("--verdict", help="Your leaning: approve or reject.")
    ] = None,
    score: Annotated[float | None, typer.Option("--score", help="A score of your own.")] = None,
    concern: Annotated[
        list[str] | None, typer.Option("--concern", help="A concern (repeat).")
    ] = None,
    recommendation: Annotated[
        list[str] | None, typer.Option("--recommendation", help="A recommendation (repeat).")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Free text.")] = None,
    voter: VoterOpt = None,
    board: BoardOpt = None,
) -> int:
    """Post your assessment (phase 1).

    Example: delegate board assess --voter sec --verdict approve --concern 'no rate limit'
    """
    _post(
        "assess",
        voter,
        board,
        {
            "verdict": verdict,
            "score": score,
            "concerns": concern or [],
            "recommendations": recommendation or [],
            "note": note,
        },
    )
    return 0


@board_app.command("discuss")
def board_discuss(
    message: Annotated[str, typer.Option("--message", help="What you say.")],
    to: Annotated[str | None, typer.Option("--to", help="The voter you answer.")] = None,
    kind: Annotated[
        str, typer.Option("--kind", help="challenge, agree, question or clarify.")
    ] = "clarify",
    changes_verdict: Annotated[
        bool, typer.Option("--changes-verdict", help="This changes your verdict.")
    ] = False,
    voter: VoterOpt = None,
    board: BoardOpt = None,
) -> int:
    """Post in the current discussion round (phase 2).

    Example: delegate board discuss --voter qa --to sec --kind question --message 'which endpoint?'
    """
    if kind not in ("challenge", "agree", "question", "clarify"):
        raise UsageError("--kind must be one of challenge, agree, question, clarify")
    _post(
        "discuss",
        voter,
        board,
        {"to": to, "kind": kind, "message": message, "changes_my_verdict": changes_verdict},
    )
    return 0


@board_app.command("vote")
def board_vote(
    verdict: Annotated[str, typer.Option("--verdict", help="approve or reject.")],
    confidence: Annotated[float | None, typer.Option("--confidence", help="0 to 1.")] = None,
    condition: Annotated[
        list[str] | None, typer.Option("--condition", help="A condition of your vote (repeat).")
    ] = None,
    voter: VoterOpt = None,
    board: BoardOpt = None,
) -> int:
    """Cast your final vote (phase 3).

    Example: delegate board vote --voter arch --verdict approve --condition 'add tests'
    """
    if confidence is not None and not 0 <= confidence <= 1:
        raise UsageError("--confidence is between 0 and 1")
    _post(
        "vote",
        voter,
        board,
        {"verdict": verdict, "confidence": confidence, "conditions": condition or []},
    )
    return 0


@board_app.command("resolve")
def board_resolve(board: BoardOpt = None, as_json: JsonOpt = False) -> int:
    """Resolve the board once everyone voted; asking again gives the same resolution.

    Example: delegate board resolve --json
    """
    resolution, events = resolve(_store(), board, actor=default_agent(None) or "")
    announce(events)
    if as_json:
        _print_json(resolution)
        return 0
    tally = resolution["tally"]
    print(
        f"board {resolution['board']}: {resolution['verdict']}"
        f" ({tally['approve']} approve, {tally['reject']} reject of {tally['voters']})"
    )
    for item in resolution["conditions"]:
        print(f"condition: {item['condition']} ({item['author']})")
    for item in resolution["dissent"]:
        print(f"dissent: {item['voter']} voted {item['verdict']}")
    return 0


@board_app.command("status")
def board_status(board: BoardOpt = None, as_json: JsonOpt = False) -> int:
    """Where a board stands: its phase and who it waits for.

    Example: delegate board status --json
    """
    found = load(_store(), board)
    if as_json:
        _print_json(found.status())
        return 0
    missing = found.missing()
    waiting = f"; waiting for {', '.join(missing)}" if missing else ""
    print(f"board {found.id}: {found.describe_phase()}{waiting}")
    return 0


# --- the blackboard -------------------------------------------------------------------------


@bb_app.command("write")
def bb_write(
    key: Annotated[str, typer.Argument(help="The key, e.g. task:q4 or cache:metrics.")],
    value: Annotated[str, typer.Argument(help="JSON, or any other text (stored as a string).")],
    ttl: Annotated[
        float | None, typer.Option("--ttl", help="Seconds until it expires (default: never).")
    ] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Who writes it.")] = None,
    if_version: Annotated[
        int | None,
        typer.Option(
            "--if-version", help="Write only if the entry is at this version (0: absent)."
        ),
    ] = None,
) -> int:
    """Write an entry; prints its new version (exit 75 when --if-version is stale).

    Example: delegate bb write task:q4 '{"status": "pending"}' --ttl 3600 --agent planner
    """
    entry = write(
        _store(),
        key,
        parse_value(value),
        ttl_s=ttl,
        agent=default_agent(agent),
        if_version=if_version,
    )
    print(entry["version"])
    return 0


@bb_app.command("read")
def bb_read(
    key: Annotated[str, typer.Argument(help="The key.")],
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when it is absent or expired.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Print an entry's value as JSON, or `null` when it is absent or expired.

    Example: delegate bb read cache:metrics
    """
    entry = read(_store(), key)
    if as_json:
        _print_json(entry)
    else:
        print(json.dumps(None if entry is None else entry["value"], ensure_ascii=False))
    return 1 if strict and entry is None else 0


@bb_app.command("delete")
def bb_delete(key: Annotated[str, typer.Argument(help="The key.")]) -> int:
    """Remove an entry (exit 1 when there was none).

    Example: delegate bb delete signal:coder
    """
    return 0 if delete(_store(), key) else 1


@bb_app.command("list")
def bb_list(
    prefix: Annotated[str, typer.Option("--prefix", help="Only keys starting so.")] = "",
    as_json: JsonOpt = False,
) -> int:
    """Live keys, grouped by prefix (task:, cache:, signal:, trace:, result:, lock:).

    Example: delegate bb list --prefix task:
    """
    print_listing(
        entries(_store(), prefix),
        [Column("KEY", free=True), "VERSION", "AGENT", "UPDATED", "EXPIRES"],
        lambda e: [
            e["key"],
            str(e["version"]),
            e["source_agent"] or "-",
            local_time(e["timestamp"]),
            local_time(e["expires_at"]) if e["expires_at"] else "never",
        ],
        as_json=as_json,
        to_json=lambda e: {k: e[k] for k in ("key", "version", "source_agent", "expires_at")},
        empty=f"no blackboard entries under {prefix!r}" if prefix else "no blackboard entries",
    )
    return 0


@bb_app.command("snapshot")
def bb_snapshot(as_json: JsonOpt = False) -> int:
    """Every live entry: JSON (one object by key) with --json, else indented JSON.

    Example: delegate bb snapshot --json
    """
    snapshot = {e["key"]: e for e in entries(_store())}
    if as_json:
        _print_json(snapshot)
    else:
        print(json.dumps(snapshot, indent=2, ensure_ascii=False))
    return 0


@bb_app.command("render")
def bb_render() -> int:
    """The board as Markdown: active tasks, knowledge cache, signals, execution history.

    Example: delegate bb render > swarm-blackboard.md
    """
    sys.stdout.write(render(_store()))
    return 0


# The root-level commands and groups this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


def register(app: typer.Typer) -> None:
    app.add_typer(msg_app, name="msg")
    app.add_typer(lock_app, name="lock")
    app.add_typer(board_app, name="board")
    app.add_typer(bb_app, name="bb")
    app.add_typer(bus_app, name="bus")
    app.add_typer(claim_app, name="claim")
    app.command("heartbeat")(heartbeat)
    app.command("agents")(agents)
    app.command("block")(block)
    app.command("unblock")(unblock)
    app.command("deadlocks")(deadlocks)


register(commands)
