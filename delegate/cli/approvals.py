"""`delegate approve JOB` and `delegate approvals`: answer an agent's permission request from
any shell (services/jobs/approvals)."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import time
from typing import Annotated

import typer

from delegate.adapters.terminal import Column, print_json, print_listing
from delegate.cli.common import JobIdArg, JsonOpt, open_state
from delegate.core.errors import say
from delegate.core.timefmt import human_duration
from delegate.services.jobs.approvals import WaitingRequest, unanswerable
from delegate.services.jobs.host_approvals import approve as answer_request
from delegate.services.jobs.host_approvals import waiting_everywhere

# The root-level commands this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
def approve(
    job_id: JobIdArg,
    deny: Annotated[bool, typer.Option("--deny", help="Refuse instead of allowing.")] = False,
    reason: Annotated[
        str | None, typer.Option("--reason", help="Why; the agent is told (with --deny).")
    ] = None,
    remember: Annotated[
        bool,
        typer.Option("--remember", help="Allow this tool without asking for the rest of the job."),
    ] = False,
    request_id: Annotated[
        str | None,
        typer.Option("--request", help="Which waiting request (default: the job's oldest)."),
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Answer a job's permission request: allow it, or --deny it. For a job on an agent host
    the decision travels over the broker, and the host confirms it.

    Example: delegate approve 1a2b3c4d --deny --reason 'not on main'
    """
    answered = answer_request(
        open_state(), job_id, deny=deny, reason=reason, remember=remember, request_id=request_id
    )
    verdict = "denied" if deny else "allowed"
    where = f", confirmed by host {answered.host}" if answered.host else ""
    if as_json:
        print_json({**answered._asdict(), "behavior": "deny" if deny else "allow"})
    else:
        print(f"{verdict}: {answered.tool} {answered.summary} (job {job_id}{where})")
    return 0


def columns(on_hosts: bool) -> list[Column]:
    """HOST only when a waiting job runs on an agent host: at 80 columns ASKS needs the room.
    ASKS is the whole call, never cut: folded onto more lines."""
    host = [Column("HOST", free=True)] if on_hosts else []
    asks = Column("ASKS", free=True, wrap=True)
    return [
        Column("JOB"),
        *host,
        Column("REQUEST"),
        Column("TOOL", free=True),
        asks,
        Column("LEFT"),
    ]


def cells(r: WaitingRequest, on_hosts: bool, now: float) -> list[str]:
    host = [r.host or "-"] if on_hosts else []
    left = human_duration(r.deadline - now)
    return [r.job_id, *host, r.request_id, r.tool, r.call or r.summary, left]


@commands.command()
def approvals(as_json: JsonOpt = False) -> int:
    """Permission requests waiting for a decision, oldest first.

    Example: delegate approvals
    """
    state = open_state()
    now = time.time()
    waiting = waiting_everywhere(state)
    on_hosts = any(r.host for r in waiting)
    print_listing(
        waiting,
        columns(on_hosts),
        lambda r: cells(r, on_hosts, now),
        as_json=as_json,
        to_json=lambda r: r._asdict(),
        empty="no permission request is waiting",
    )
    for job in unanswerable(state):
        say(
            f"job {job.job_id} asks for permission ({job.detail or 'no detail'}) but its agent"
            f" cannot wait for a decision: answer in its pane (delegate attach {job.job_id})"
        )
    return 0
