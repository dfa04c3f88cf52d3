"""The `delegate` command line (typer): parse, call one service, print, map errors to exit codes.

This module holds the root (`ROOT_COMMANDS`: every command and the module defining it) and the
job commands; each other group lives in a module of its own, imported only when it is called.

Results go to stdout (JSON lines where asked); logs and errors go to stderr, one line each.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from click.exceptions import Abort, ClickException, Exit

from delegate import version_line
from delegate.adapters.audit import parse_line
from delegate.adapters.terminal import (
    Column,
    print_json,
    print_listing,
    print_table,
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
    print_submitted,
    say_outcome,
)
from delegate.cli.lazy import LazyGroup, build_from, shell_of
from delegate.core.errors import DelegateError, say
from delegate.core.eventlines import audit_line
from delegate.core.model import Job
from delegate.core.timefmt import human_duration, human_timeout, local_time
from delegate.entry.ps import DEFAULT_LIMIT as PS_LIMIT
from delegate.entry.ps import print_ps_json
from delegate.entry.publish import main_hook, run_publish
from delegate.services.jobs.register import parse_status, pick_job, register_job
from delegate.services.logs import follow_log
from delegate.services.ps import dependency_graph, job_timing, rows
from delegate.services.state import State
from delegate.services.why import explain
from delegate.services.worktrees import chain as worktree_chain

app = typer.Typer(
    cls=LazyGroup,
    name="delegate",
    help="Hand work to AI coding agents and keep an exact, verifiable record of what they did.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(wanted: bool) -> None:
    if wanted:
        print(version_line())
        raise typer.Exit(0)


@app.callback()
def _top(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Hand work to AI coding agents and keep an exact, verifiable record of what they did."""


@app.command()
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


@app.command()
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


@app.command()
def hook() -> int:
    """Turn a Claude Code hook call (its JSON on stdin) into this job's events.

    Called by the hooks submit writes into the job's --settings file; exits 0 whatever happens,
    so a hook never blocks the agent.
    Example: echo '{"hook_event_name": "Stop"}' | delegate hook
    """
    return main_hook([])


@app.command()
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


@app.command()
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

    def cells(j: Any) -> list[str]:
        return [
            j.job_id,
            j.status.value,
            j.agent or "-",
            local_time(j.created_at),
            human_duration(job_timing(j, now)[0]),
            j.session or "-",
            j.error or "-",
        ]

    print_listing(
        found,
        ["JOB", "STATE", "AGENT", "CREATED", "TIME", "SESSION", Column("REASON", free=True)],
        cells,
        as_json=as_json,
        to_json=lambda j: j.public_dict(),
        empty=f"no {wanted.value} jobs" if wanted else "no jobs",
    )
    return 0


@app.command()
def show(job_id: JobIdArg, as_json: JsonOpt = False) -> int:
    """Show one job's record (never its token) and where its audit log is.

    Example: delegate show 1a2b3c4d --json
    """
    state = open_state()
    job = state.registry.get(job_id)
    record = job.public_dict()
    record["audit_log"] = str(state.audit.events_path(job_id))
    if job.follow_up_of or (job.worktree or {}).get("handed_to"):
        record["review_chain"] = worktree_chain(state, job_id)  # `delegate review`'s follow-ups
    story = explain(state, job_id)
    if wants_json(as_json):
        print_json({**record, "transitions": story["transitions"], "attempts": story["attempts"]})
        return 0

    def value(key: str, v: Any) -> str:
        if v is None:
            return "-"
        if key.endswith("_at"):
            return local_time(v)
        if key.endswith("_timeout_s"):
            return human_timeout(v)
        return json.dumps(v) if isinstance(v, dict | list) else str(v)

    rows = [[k, value(k, v)] for k, v in sorted(record.items())]
    print_table(
        ["FIELD", Column("VALUE", free=True)], rows, title=f"job {job_id}", empty="no record"
    )
    if len(story["attempts"]) > 1:
        print_table(
            ["ATTEMPT", "JOB", "STATE", Column("REASON", free=True)],
            [[a["label"], a["job_id"], a["status"], a["reason"] or "-"] for a in story["attempts"]],
            title="attempts",
            empty="none",
        )
    return 0


@app.command()
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


@app.command()
def retry(
    job_id: JobIdArg,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="New instructions (default: the attempt's own)."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", "-w", help="Follow the new attempt to its end.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Start a new attempt of an ended job with the same spec (a new job id, attempt n+1).

    Example: delegate retry 1a2b3c4d --prompt "try again, smaller steps"
    """
    # services.jobs.retry (profiles, the launcher, tmux): only `retry` loads it
    from delegate.services.jobs.retry import follow_attempts
    from delegate.services.jobs.retry import retry as retry_job  # as above
    from delegate.services.jobs.submit import follow_existing  # as above

    state = open_state()
    text = prompt.encode("utf-8", "surrogateescape") if prompt is not None else None
    result = retry_job(state, job_id, prompt=text)
    if wait:
        followed = follow_existing(
            state, result.job, wait=True, emit=event_printer(as_json), note=say
        )
        result = follow_attempts(state, followed, emit=event_printer(as_json), note=say)
    return print_submitted(result, as_json)


@app.command()
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


@app.command()
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


@app.command()
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


@app.command()
def submit(
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="Agent profile: shell, claude, codex or one of delegate.toml; several with"
            " --worktree: one job each (a fan-out).",
        ),
    ] = None,
    cmd: Annotated[
        str | None,
        typer.Option("--cmd", help="A one-off shell command; the prompt arrives on its stdin."),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="The instructions, or - to read them from stdin."),
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option("--prompt-file", "-f", help="Read the instructions from this file."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", "-C", help="Folder the agent works in (default: here)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="tmux session name (default: dlg-<job id>)."),
    ] = None,
    wall_timeout: WallTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    bus: Annotated[str | None, typer.Option("--bus", help="Bus URL for this job.")] = None,
    wait: Annotated[
        bool | None,
        typer.Option(
            "--wait/--no-wait",
            "-w",
            help="Stream events and exit with the outcome, or return at once"
            " (default: wait when stdout is a terminal).",
        ),
    ] = None,
    idempotency_key: IdempotencyOpt = None,
    max_running: Annotated[
        int | None,
        typer.Option(
            "--max-running", help="Start only while fewer than N jobs run; else wait queued."
        ),
    ] = None,
    on_event: Annotated[
        str | None,
        typer.Option(
            "--on-event",
            help="Run CMD (split into words, never by a shell) with the event JSON on stdin"
            " for permission_required, completed and error.",
        ),
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from-file", help="Read these settings from a TOML file (flags win)."),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Run it on this agent host (see `delegate host`)."),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", help="Start only after these jobs (ID[,ID...]) ended as the rule says."
        ),
    ] = None,
    after_rule: Annotated[
        str | None,
        typer.Option(
            "--after-rule",
            help="succeeded (default), finished (any ending) or failed; a rule that can no"
            " longer hold ends the job dependency_failed.",
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group", "-g", help="Queue group (see `delegate group`): its cap and pause."
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option("--max-cost", help="Stop it once it has spent more than USD dollars."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Stop it once its agent has used more than N tokens."),
    ] = None,
    no_mcp: Annotated[
        bool,
        typer.Option(
            "--no-mcp", help="Do not register `delegate mcp` with a claude or codex agent."
        ),
    ] = False,
    worktree: Annotated[
        bool | None,
        typer.Option(
            "--worktree/--no-worktree",
            help="Run it in its own git worktree of --workdir's repository, on a new branch"
            " (default: as delegate.toml's [worktree] says).",
        ),
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option("--branch", help="With --worktree: the new branch (default delegate/<job>)."),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option("--base", help="With --worktree: the commit or branch to start from (HEAD)."),
    ] = None,
    fan_out: Annotated[
        int | None,
        typer.Option(
            "--fan-out",
            help="With --worktree: N jobs on the same prompt, each in its own worktree from"
            " the same base (see `delegate compare`).",
        ),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option("--retries", help="Start up to N more attempts for --retry-on endings."),
    ] = None,
    retry_on: Annotated[
        str | None,
        typer.Option(
            "--retry-on",
            help="Endings that retry (default error): error, agent_exited, idle_timeout,"
            " wall_timeout, launch_failed, host_lost, lost, tmux_gone.",
        ),
    ] = None,
    backoff: Annotated[
        str | None,
        typer.Option("--backoff", help="MIN..MAX wait before a retry, doubled each time (1s..4s)."),
    ] = None,
    on_interrupt: Annotated[
        str | None,
        typer.Option(
            "--on-interrupt",
            help="requeue: a job whose pane, tmux or host vanished is queued again (resuming"
            " its conversation when recorded); fail (default).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Hand a task to an agent in a new tmux session and follow it.

    Exit status with --wait: 0 completed, 1 error, 2 timed out, 3 cancelled.
    Example: delegate submit --agent claude --prompt-file task.md --workdir ~/repo --wait
    """
    # services.jobs.{jobfile,submit} (profiles, the launcher, tmux): only `submit` loads them;
    from delegate.services.jobs.jobfile import merge_job_file  # every other command goes without
    from delegate.services.jobs.submit import SubmitRequest, read_prompt  # as jobfile
    from delegate.services.jobs.submit import submit as submit_job  # as jobfile

    agents = agent or []
    flags = dict(
        agent=agents[0] if len(agents) == 1 else None,
        cmd=cmd,
        prompt=prompt,
        prompt_file=prompt_file,
        workdir=workdir,
        session=session,
        wall_timeout=wall_timeout,
        idle_timeout=idle_timeout,
        bus=bus,
        wait=wait,
        idempotency_key=idempotency_key,
        max_running=max_running,
        on_event=on_event,
        host=host,
        after=after,
        after_rule=after_rule,
        group=group,
        worktree=worktree,
        branch=branch,
        base=base,
        max_cost=max_cost,
        max_tokens=max_tokens,
        retries=retries,
        retry_on=retry_on,
        backoff=backoff,
        on_interrupt=on_interrupt,
    )
    if from_file is not None and fan_out is None:
        # cli.plan: only a file declaring several jobs ([[jobs]]) goes there
        from delegate.cli.plan import submit_plan_file

        planned = submit_plan_file(from_file, flags, as_json=as_json, no_mcp=no_mcp)
        if planned is not None:
            return planned
    settings = merge_job_file(from_file, **flags)
    text = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=sys.stdin)
    request = SubmitRequest.from_settings(settings, text)._replace(no_mcp=no_mcp)
    # cron, scripts and pipes get the job id at once; a person at a terminal sees it through
    waiting = sys.stdout.isatty() if settings["wait"] is None else bool(settings["wait"])
    emit = event_printer(as_json)
    if fan_out is not None or len(agents) > 1:
        if settings["host"] or settings["wait"]:
            raise typer.BadParameter("a fan-out runs here and never waits: drop --host/--wait")
        return _submit_fan_out(request, agents, fan_out, as_json=as_json)
    if settings["host"]:
        from delegate.services.jobs.submit import submit_remote  # only for --host

        result = submit_remote(
            open_state(), request, settings["host"], wait=waiting, emit=emit, note=say
        )
    else:
        result = submit_job(open_state(), request, wait=waiting, emit=emit, note=say)
    if result.outcome is not None:  # a retried attempt: follow it to the final outcome
        from delegate.services.jobs.retry import follow_attempts  # as jobfile

        result = follow_attempts(open_state(), result, emit=emit, note=say)
    if result.queue_position is not None:
        print(
            f"job {result.job.job_id} queued at position {result.queue_position}:"
            f" {result.waiting_for or 'it starts when a slot frees'}",
            file=sys.stderr,
        )
    return print_submitted(result, as_json)


def _submit_fan_out(request: Any, agents: list[str], count: int | None, *, as_json: bool) -> int:
    """`submit --fan-out N` / several `--agent`s: start them all, print each job; never waits."""
    from delegate.services.jobs import fanout  # the launcher: only `submit` loads it

    results = fanout.submit_fan_out(
        open_state(), request, fanout.fan_out_agents(agents, count), note=say
    )
    for result in results:
        print_submitted(result, as_json)
    say(f"fan-out {results[0].job.job_id}: {len(results)} jobs; see `delegate compare`")
    return 0


@app.command()
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
    event = Column("LAST EVENT", free=True)
    reason = Column("REASON", free=True)
    columns: list[Column | str] = ["JOB", "STATE", "AGENT", "TIME", reason, "SESSION", "TMUX"]
    if wide:
        columns[4:4] = ["STARTED", "ENDED"]
        columns.insert(-1, "SESSION STATE")
    columns.append(event)

    def cells(r: Any) -> list[str]:
        said = f"{r.last_event}: {r.last_detail}" if r.last_detail else r.last_event
        times = [local_time(r.started_at), local_time(r.ended_at)] if wide else []
        status = f"{r.job_state} {r.attempt}" if r.attempt else r.job_state
        row = [r.job_id, status, r.agent, human_duration(r.duration_s), *times]
        row += [r.end_reason, r.session, *([r.session_state] if wide else [])]
        return [*row, r.tmux, said or "-"]

    print_listing(
        listing.rows,
        columns,
        cells,
        as_json=as_json,
        to_json=lambda r: r.to_dict(),
        empty="no open jobs" if limit == 0 and not show_all else "no jobs",
        fit=not wide,
    )
    return 0


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
        why = graph.waiting.get(job.job_id) or (job.error if job.status.terminal else None)
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


# Every command of `delegate`, in the order `--help` lists them, and the module defining it:
# this one (`app`), or a module whose `commands` app holds it, imported only when it is called.
_HERE = __name__
_SESSION = "delegate.cli.session"
_COORD = "delegate.cli.coord"
_UPKEEP = "delegate.cli.upkeep"
_CRON = "delegate.cli.cron"
_HOSTS = "delegate.cli.hosts"
_GROUP = "delegate.cli.group"
_DASHBOARD = "delegate.cli.dashboard"
_WORKTREE = "delegate.cli.worktree"
ROOT_COMMANDS: dict[str, str] = {
    **dict.fromkeys(
        ("register", "publish", "hook", "watch", "jobs", "show", "logs", "cancel", "pick"), _HERE
    ),
    **dict.fromkeys(("submit", "ps", "why", "retry"), _HERE),
    **dict.fromkeys(("diff", "merge", "review", "compare"), _WORKTREE),
    **dict.fromkeys(("attach", "send", "peek"), _SESSION),
    **dict.fromkeys(("heartbeat", "agents", "block", "unblock", "deadlocks"), _COORD),
    **dict.fromkeys(("monitor", "report", "doctor"), _UPKEEP),
    "session": _SESSION,
    "cron": _CRON,
    "group": _GROUP,
    **dict.fromkeys(("msg", "lock", "board", "bb", "bus", "claim"), _COORD),
    "host": _HOSTS,
    **dict.fromkeys(("approve", "approvals"), "delegate.cli.approvals"),
    "dashboard": _DASHBOARD,
    "top": "delegate.cli.top",
    "mcp": "delegate.cli.mcp",
    "worktree": _WORKTREE,
}


def _build(name: str) -> click.Command:
    module = ROOT_COMMANDS[name]
    holder = app if module == _HERE else importlib.import_module(module).commands
    return build_from(holder, name, settings=app)


def root_command() -> LazyGroup:
    """The `delegate` group; each command is built, and its module imported, when called."""
    root = typer.main.get_command(shell_of(app))
    assert isinstance(root, LazyGroup)
    return root.lazy(tuple(ROOT_COMMANDS), _build)


def full_command() -> LazyGroup:
    """The whole tree built at once (what `--help` and the tests walk)."""
    return root_command().load_all()


def run(argv: list[str]) -> int:
    """Run the typer app without letting it exit the process or print a traceback.

    Usage errors become one line on stderr and exit 64, so they never collide with watch's
    outcome codes (0-3).
    """
    if not argv:
        argv = ["--help"]
    command = root_command()
    try:
        result = command.main(args=argv, prog_name="delegate", standalone_mode=False)
    except Exit as exc:
        return int(exc.exit_code)
    except Abort:
        return 130
    except ClickException as exc:
        # click 8.2+ and typer both append "Did you mean ...?"; say it once, on one line.
        sentences = re.split(r"(?<=[.?!])\s+", exc.format_message().strip())
        message = " ".join(dict.fromkeys(s for s in sentences if s))
        say(message)
        return 64
    except DelegateError as exc:
        say(exc)
        return exc.exit_code
    return result if isinstance(result, int) else 0
