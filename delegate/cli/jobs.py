"""The job commands: register, publish, hook, watch, jobs, why, logs, cancel, pick and ps.

Each is built, and this module imported, only when one of them is called (cli/app.py's table).
"""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.adapters.audit import parse_line
from delegate.adapters.terminal import (
    Column,
    print_json,
    print_listing,
    print_tree,
    terminal_width,
    wants_json,
)
from delegate.cli.common import (
    IdempotencyOpt,
    IdleTimeoutOpt,
    JobIdArg,
    JsonOpt,
    SessionOpt,
    WallTimeoutOpt,
    event_printer,
    open_state,
    print_job,
    say_outcome,
)
from delegate.core.errors import say
from delegate.core.eventlines import audit_line
from delegate.core.model import Job
from delegate.core.outcome import status_note
from delegate.core.timefmt import human_duration, local_time
from delegate.entry.ps import DEFAULT_LIMIT as PS_LIMIT
from delegate.entry.ps import print_ps_json
from delegate.entry.publish import main_hook, run_publish
from delegate.services.jobs.register import parse_status, pick_job, register_job
from delegate.services.logs import follow_log
from delegate.services.ps import Row as PsRow
from delegate.services.ps import dependency_graph, job_timing, rows
from delegate.services.state import State
from delegate.services.why import explain

# The root-level commands this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
def register(
    cmd: Annotated[str | None, typer.Option("--cmd", help="Command the job will run.")] = None,
    session: SessionOpt = None,
    wall_timeout: WallTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    idempotency_key: IdempotencyOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Create a pending job without starting anything; print its id.

    Example: delegate register --cmd 'make test' --idempotency-key nightly-2026-11-22
    """
    job, _created = register_job(
        open_state(),
        command=cmd,
        session=session,
        wall_timeout_s=wall_timeout,
        idle_timeout_s=idle_timeout,
        idempotency_key=idempotency_key,
    )
    print_job(job, as_json)
    return 0


@commands.command()
def publish(
    event: Annotated[
        str,
        typer.Option("--event", help="started, progress, permission_required, completed or error."),
    ],
    job: Annotated[
        str | None, typer.Option("--job", help="Job id; defaults to $DELEGATE_JOB_ID.")
    ] = None,
    detail: Annotated[
        str, typer.Option("--detail", help="Short text; redacted before sending.")
    ] = "",
    data: Annotated[str | None, typer.Option("--data", help="A JSON object of extra data.")] = None,
) -> int:
    """Publish one signed event for a job.

    Example: delegate publish --event progress --detail 'tests pass' --data '{"done": 3}'
    """
    return run_publish(job=job, event=event, detail=detail, data=data)


@commands.command()
def hook() -> int:
    """Turn a Claude Code hook call (its JSON on stdin) into this job's events.

    Called by the hooks submit writes into the job's --settings file; exits 0 whatever happens,
    so a hook never blocks the agent.
    Example: echo '{"hook_event_name": "Stop"}' | delegate hook
    """
    return main_hook([])


@commands.command()
def watch(
    job_id: JobIdArg,
    wall_timeout: Annotated[
        float | None,
        typer.Option("--wall-timeout", help="Stop watching after S seconds (the job goes on)."),
    ] = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option(
            "--idle-timeout", help="Stop watching after S silent seconds (the job goes on)."
        ),
    ] = None,
    ready_file: Annotated[
        Path | None,
        typer.Option("--ready-file", help="Create this file once subscribed (for launchers)."),
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Follow a job's events: one line per accepted event (JSON lines when piped or --json).

    Exit status from the job's final state: 0 completed, 1 error, 2 timed out, 3 cancelled;
    also 2 when this watch gave up (--wall-timeout/--idle-timeout) before the job ended.
    Example: delegate watch 1a2b3c4d --idle-timeout 300
    """
    from delegate.services.jobs.watch import watch_job  # the launcher: only `watch` loads it

    state = open_state()
    outcome = watch_job(
        state,
        job_id,
        wall_timeout_s=wall_timeout,
        idle_timeout_s=idle_timeout,
        emit=event_printer(as_json),
        ready_file=ready_file,
        note=say,
    )
    if state.registry.get(job_id).status.terminal:
        say_outcome(state, job_id)
    return outcome.exit_code


@commands.command()
def jobs(
    status: Annotated[str | None, typer.Option("--status", help="Only jobs in this state.")] = None,
    as_json: JsonOpt = False,
) -> int:
    """List jobs, oldest first.

    Example: delegate jobs --status running --json
    """
    wanted = parse_status(status)
    found = open_state().registry.list(wanted)
    now = datetime.now(UTC)
    print_listing(
        found,
        JOBS_COLUMNS,
        lambda j: jobs_cells(j, now),
        as_json=as_json,
        to_json=lambda j: j.public_dict(),
        empty=f"no {wanted.value} jobs" if wanted else "no jobs",
    )
    return 0


# `jobs`: free text (agent, session, reason) is shortened first, states and times fold last.
JOBS_COLUMNS = [
    Column("JOB"),
    Column("STATE", wrap=True),
    Column("AGENT", free=True),
    Column("CREATED", wrap=True),
    Column("TIME", wrap=True),
    Column("SESSION", free=True),
    Column("REASON", free=True),
]


def jobs_cells(j: Job, now: datetime) -> list[str]:
    return [
        j.job_id,
        j.status.value,
        j.agent or "-",
        local_time(j.created_at),
        human_duration(job_timing(j, now)[0]),
        j.session or "-",
        job_note(j, now) or j.error or "-",
    ]


def job_note(job: Job, now: datetime) -> str:
    """What core/outcome says beside the job's state (its wait, its API retry, its denials)."""
    return status_note(
        job.status.value,
        denied_tools=job.denied_tools,
        agent_retry=job.agent_retry,
        not_before=job.not_before,
        now=now,
    )


@commands.command()
def why(job_id: JobIdArg, as_json: JsonOpt = False) -> int:
    """Say why a job has the state it has: each change, its source, observed or inferred.

    Example: delegate why 1a2b3c4d
    """
    story = explain(open_state(), job_id)
    if wants_json(as_json):
        print_json(story)
        return 0
    for attempt in story["attempts"] if len(story["attempts"]) > 1 else []:
        print(f"attempt {attempt['label']} ({attempt['job_id']}): {attempt['why']}")
    if len(story["attempts"]) <= 1:
        print(story["why"])
    return 0


@commands.command()
def logs(
    job_id: JobIdArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="Every line as written, an event's published and received lines both."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Print a job's audit trail (events.ndjson), one line per entry, each event once.

    Readable lines at a terminal; the JSON lines as written when piped or with --json.
    An event's publisher and its subscribers each log it (`published`, `received`): the first
    of those lines is printed, the others only with --raw.
    Example: delegate logs 1a2b3c4d --follow
    """
    readable = not wants_json(as_json)
    width = terminal_width()

    def emit(line: bytes) -> None:
        if readable:
            entry = parse_line(line)
            text = audit_line(entry, width=width) if entry else line.decode("utf-8", "replace")
            sys.stdout.write(text.rstrip("\n") + "\n")
        elif hasattr(sys.stdout, "buffer"):
            sys.stdout.buffer.write(line)  # the audit log's own bytes, as they are on disk
        else:  # a text-only stdout (an embedding program's): the same bytes, decoded
            sys.stdout.write(line.decode("utf-8", "replace"))
        sys.stdout.flush()

    follow_log(open_state(), job_id, emit, follow=follow, raw=raw)
    return 0


@commands.command()
def cancel(job_id: JobIdArg, as_json: JsonOpt = False) -> int:
    """Cancel a pending or running job; stop its agent and every process it started.

    Example: delegate cancel 1a2b3c4d
    """
    # services.jobs.submit (the launcher, tmux): only the commands that submit or cancel
    from delegate.services.jobs.submit import cancel as cancel_job

    result = cancel_job(open_state(), job_id)
    if result.session_note is not None:
        say(result.session_note)
    if as_json:
        print_json({**result.job.public_dict(), "session_note": result.session_note})
    else:
        print(f"{result.job.job_id} cancelled")
    return 0


@commands.command()
def pick(
    agent_session: Annotated[
        str, typer.Option("--agent-session", help="Label of the session taking the job.")
    ],
    as_json: JsonOpt = False,
) -> int:
    """Claim the oldest pending job for a session; exit 1 when none is pending.

    Example: delegate pick --agent-session worker-1 --json
    """
    job = pick_job(open_state(), agent_session)
    if job is None:
        say("no pending job")
        return 1
    print_job(job, as_json)
    return 0


@commands.command()
def ps(
    show_all: Annotated[bool, typer.Option("--all", help="Every job in the history.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", help="How many recently finished jobs to show.")
    ] = PS_LIMIT,
    host: Annotated[
        str | None, typer.Option("--host", help="The open jobs this agent host reports.")
    ] = None,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide", help="Also start and end times and the session's state; cut nothing."
        ),
    ] = False,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Only this queue group's jobs.")
    ] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Draw the open jobs as the graph of their --after.")
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="The live full-screen view (`delegate top`); piped: one snapshot."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Open jobs (queued, pending, running) and the most recently finished, with their sessions.

    TIME is how long a job has run (finished: start to end; queued or pending: its wait so far).
    Example: delegate ps --limit 20 --json
    """
    shown = live_view(limit, group, others=(host, tree, show_all, as_json)) if watch else None
    if shown is not None:  # the live view ran (at a terminal); else one snapshot, as ps prints
        return shown
    if host is not None:  # what that agent host says of its open jobs (its presence)
        from delegate.services.remote import host_jobs  # services.remote: only `ps --host`

        print_listing(
            [{**reported, "host": host} for reported in host_jobs(open_state(), host)],
            ["JOB", "STATE", "AGENT", "SESSION", "HOST"],
            lambda r: [
                r["job_id"],
                r.get("status") or "-",
                r.get("agent") or "-",
                r.get("session") or "-",
                host,
            ],
            as_json=as_json,
            empty=f"host {host} reports no open jobs",
        )
        return 0
    if limit < 0:
        raise typer.BadParameter("--limit must be zero or more")
    if tree:
        print_dependency_tree(open_state(), group=group)
        return 0
    if wants_json(as_json):  # what entry/ps.py answers without typer, said the same way
        print_ps_json(open_state(), show_all=show_all, limit=limit, group=group)
        return 0
    listing = rows(open_state(), show_all=show_all, limit=limit, group=group)
    if listing.tmux_note:
        say(listing.tmux_note)
    print_listing(
        listing.rows,
        ps_columns(wide),
        lambda r: ps_cells(r, wide),
        as_json=as_json,
        to_json=lambda r: r.to_dict(),
        empty="no open jobs" if limit == 0 and not show_all else "no jobs",
        fit=not wide,
    )
    return 0


def ps_columns(wide: bool) -> list[Column]:
    """`ps`'s columns: with --wide, the start, the end and the session's state too."""
    columns = [Column("JOB"), Column("STATE", wrap=True), Column("AGENT", free=True)]
    columns += [Column("TIME", wrap=True), Column("REASON", free=True)]
    columns += [Column("SESSION", free=True), Column("TMUX", wrap=True)]
    if wide:
        columns[4:4] = [Column("STARTED"), Column("ENDED")]
        columns.insert(-1, Column("SESSION STATE"))
    return [*columns, Column("LAST EVENT", free=True)]


def ps_cells(r: PsRow, wide: bool) -> list[str]:
    said = f"{r.last_event}: {r.last_detail}" if r.last_detail else r.last_event
    times = [local_time(r.started_at), local_time(r.ended_at)] if wide else []
    status = f"{r.job_state} {r.attempt}" if r.attempt else r.job_state
    row = [r.job_id, status, r.agent, human_duration(r.duration_s), *times]
    row += [r.end_reason, r.session, *([r.session_state] if wide else [])]
    return [*row, r.tmux, said or "-"]


def live_view(limit: int, group: str | None, *, others: tuple[Any, ...]) -> int | None:
    """`ps --watch`: the live view at a terminal, and its exit status; None when not at a
    terminal (then `ps` prints one snapshot)."""
    if any(others):
        raise typer.BadParameter(
            "--watch takes --limit and --group, not --all, --host, --tree or --json"
        )
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    # textual: only for the live view
    from delegate.runtime.top.app import run_top

    return run_top(open_state(), recent=max(0, limit), group=group)


def print_dependency_tree(state: State, *, group: str | None) -> None:
    """`ps --tree`: each open job under the jobs it waits for, with its state and why it
    waits (or how it ended)."""
    graph = dependency_graph(state, group=group)

    def label(job: Job) -> str:
        why = (
            job_note(job, datetime.now(UTC))
            or graph.waiting.get(job.job_id)
            or (job.error if job.status.terminal else None)
        )
        rule = f" after {job.after_rule}" if job.after and job.after_rule else ""
        return f"{job.job_id}  {job.status.value}  {job.agent or '-'}{rule}" + (
            f"  ({why})" if why else ""
        )

    print_tree(
        graph.roots,
        label,
        lambda job: graph.dependents.get(job.job_id, []),
        empty="no open jobs",
    )
