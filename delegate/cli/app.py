"""The `delegate` command line (typer): parse, call one service, print, map errors to exit codes.

Results go to stdout (JSON lines where asked); logs and errors go to stderr, one line each.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
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
    terminal_width,
    wants_json,
)
from delegate.cli.lazy import LazyGroup, build_from, shell_of
from delegate.core.errors import DelegateError, say
from delegate.core.eventlines import audit_line, event_line, outcome_line
from delegate.core.timefmt import human_duration, human_timeout, local_time
from delegate.entry.ps import DEFAULT_LIMIT as PS_LIMIT
from delegate.entry.ps import print_ps_json
from delegate.entry.publish import main_hook, run_publish
from delegate.services.jobs.register import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_WALL_TIMEOUT_S,
    parse_status,
    pick_job,
    register_job,
)
from delegate.services.logs import follow_log
from delegate.services.ps import job_timing, rows
from delegate.services.state import State

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


JobIdArg = Annotated[str, typer.Argument(help="The job id (8 lowercase hex characters).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
# Options register and submit share.
SessionOpt = Annotated[
    str | None, typer.Option("--session", help="tmux session name (default: dlg-<job id>).")
]


def _span(seconds: float) -> str:
    """3600 -> `1h`, 600 -> `10m`: how a default reads in help."""
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


WallTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--wall-timeout",
        help="Wall-clock budget in seconds from the start (0: none;"
        f" default {DEFAULT_WALL_TIMEOUT_S:g} s ({_span(DEFAULT_WALL_TIMEOUT_S)})).",
        show_default=False,
    ),
]
IdleTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--idle-timeout",
        help="Idle limit: seconds without an event from the job (0: none;"
        f" default {DEFAULT_IDLE_TIMEOUT_S:g} s ({_span(DEFAULT_IDLE_TIMEOUT_S)})).",
        show_default=False,
    ),
]
IdempotencyOpt = Annotated[
    str | None,
    typer.Option("--idempotency-key", help="Same key, same job: a second call creates nothing."),
]


def _state() -> State:
    return State.open()


def _event_printer(as_json: bool) -> Any:
    """What `submit --wait`, `watch` and `session resume --wait` print per event: a readable
    line at a terminal, the signed envelope as one JSON line otherwise."""
    if wants_json(as_json):
        return print_json
    width = terminal_width()

    def emit_line(envelope: dict[str, Any]) -> None:
        print(event_line(envelope, width=width), flush=True)

    return emit_line


def _say_outcome(state: State, job_id: str) -> None:
    """How the job ended, in words, on stderr (`job 1a2b3c4d timed out: no activity for 10m`)."""
    print(outcome_line(state.registry.get(job_id).public_dict()), file=sys.stderr)


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
        _state(),
        command=cmd,
        session=session,
        wall_timeout_s=wall_timeout,
        idle_timeout_s=idle_timeout,
        idempotency_key=idempotency_key,
    )
    if as_json:
        print_json(job.public_dict())
    else:
        print(job.job_id)
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

    state = _state()
    outcome = watch_job(
        state,
        job_id,
        wall_timeout_s=wall_timeout,
        idle_timeout_s=idle_timeout,
        emit=_event_printer(as_json),
        ready_file=ready_file,
        note=say,
    )
    if state.registry.get(job_id).status.terminal:
        _say_outcome(state, job_id)
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
    found = _state().registry.list(wanted)
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
    state = _state()
    job = state.registry.get(job_id)
    record = job.public_dict()
    record["audit_log"] = str(state.audit.events_path(job_id))
    if wants_json(as_json):
        print_json(record)
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
    return 0


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
        else:
            sys.stdout.buffer.write(line)
        sys.stdout.flush()

    follow_log(_state(), job_id, emit, follow=follow, raw=raw)
    return 0


@app.command()
def cancel(job_id: JobIdArg, as_json: JsonOpt = False) -> int:
    """Cancel a pending or running job; stop its agent and every process it started.

    Example: delegate cancel 1a2b3c4d
    """
    # services.jobs.submit (the launcher, tmux): only the commands that submit or cancel
    from delegate.services.jobs.submit import cancel as cancel_job

    result = cancel_job(_state(), job_id)
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
    job = pick_job(_state(), agent_session)
    if job is None:
        say("no pending job")
        return 1
    if as_json:
        print_json(job.public_dict())
    else:
        print(job.job_id)
    return 0


@app.command()
def submit(
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent", "-a", help="Agent profile: shell, claude, codex or one of delegate.toml."
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

    settings = merge_job_file(
        from_file,
        agent=agent,
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
    )
    text = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=sys.stdin)
    request = SubmitRequest.from_settings(settings, text)
    # cron, scripts and pipes get the job id at once; a person at a terminal sees it through
    waiting = sys.stdout.isatty() if settings["wait"] is None else bool(settings["wait"])
    emit = _event_printer(as_json)
    if settings["host"]:
        from delegate.services.jobs.submit import submit_remote  # only for --host

        result = submit_remote(
            _state(), request, settings["host"], wait=waiting, emit=emit, note=say
        )
        return _submitted(result, as_json)
    result = submit_job(_state(), request, wait=waiting, emit=emit, note=say)
    if result.queue_position is not None:
        print(
            f"job {result.job.job_id} queued at position {result.queue_position}:"
            " it starts when a slot under max_running frees",
            file=sys.stderr,
        )
    return _submitted(result, as_json)


def _submitted(result: Any, as_json: bool) -> int:
    """What submit and session resume print: the outcome's code when waited for, else the job."""
    if result.outcome is not None:
        state = _state()
        _say_outcome(state, result.job.job_id)
        print(f"audit log: {state.audit.events_path(result.job.job_id)}", file=sys.stderr)
        return int(result.outcome.exit_code)
    if as_json:
        print_json(result.job.public_dict())
    else:
        print(result.job.job_id)
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
    as_json: JsonOpt = False,
) -> int:
    """Open jobs (queued, pending, running) and the most recently finished, with their sessions.

    TIME is how long a job has run (finished: start to end; queued or pending: its wait so far).
    Example: delegate ps --limit 20 --json
    """
    if host is not None:  # what that agent host says of its open jobs (its presence)
        from delegate.services.remote import host_jobs  # services.remote: only `ps --host`

        print_listing(
            [{**reported, "host": host} for reported in host_jobs(_state(), host)],
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
    if wants_json(as_json):  # what entry/ps.py answers without typer, said the same way
        print_ps_json(_state(), show_all=show_all, limit=limit)
        return 0
    listing = rows(_state(), show_all=show_all, limit=limit)
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
        row = [r.job_id, r.job_state, r.agent, human_duration(r.duration_s), *times]
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


session_app = typer.Typer(
    help="List, stop and resume the tmux sessions agents run in.", no_args_is_help=True
)
app.add_typer(session_app, name="session")
SessionArg = Annotated[str, typer.Argument(help="The session name (dlg-<job id>, or --session).")]


def _print_session(view: Any, as_json: bool) -> None:
    if as_json:
        print_json(view.to_dict())
    else:
        print(f"{view.name} {view.state} (job {view.job_id or '-'})")


@session_app.command("list")
def session_list(
    show_all: Annotated[
        bool, typer.Option("--all", help="Also terminated and archived sessions.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Running and stopped sessions with the jobs each hosted.

    Example: delegate session list --all --json
    """
    # services.session (the launcher, tmux): only the session commands
    from delegate.services.session import list_sessions

    print_listing(
        list_sessions(_state(), show_all=show_all),
        ["SESSION", "STATE", "JOB", "JOBS", "AGENT", "CREATED", Column("WORKDIR", free=True)],
        lambda v: [
            v.name,
            v.state,
            v.job_id or "-",
            str(len(v.jobs)),
            v.agent or "-",
            local_time(v.created_at),
            v.workdir or "-",
        ],
        as_json=as_json,
        to_json=lambda v: v.to_dict(),
        empty="no sessions" if show_all else "no running or stopped sessions",
    )
    return 0


@session_app.command("stop")
def session_stop(
    name: SessionArg,
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            help="graceful (signal the agent, keep the session), soft (archive, leave it"
            " running) or hard (kill it all).",
        ),
    ] = "graceful",
    timeout: Annotated[
        float, typer.Option("--timeout", help="graceful: seconds before SIGTERM.")
    ] = 30.0,
    as_json: JsonOpt = False,
) -> int:
    """Stop the session's agent; its job ends cancelled with the mode in its reason.

    Example: delegate session stop dlg-1a2b3c4d --mode graceful --timeout 10
    """
    # services.session (the launcher, tmux): only the session commands
    from delegate.services.session import stop

    _print_session(stop(_state(), name, mode=mode, timeout_s=timeout), as_json)
    return 0


@session_app.command("resume")
def session_resume(
    name: SessionArg,
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="The instructions, or - to read stdin.")
    ] = None,
    prompt_file: Annotated[
        Path | None, typer.Option("--prompt-file", help="Read the instructions from this file.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Follow the new job to its end.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Start a new job in a stopped session, in the same folder.

    Example: delegate session resume nightly --prompt 'carry on with the tests'
    """
    # services.session (the launcher, tmux): only the session commands (resume submits)
    from delegate.services.jobs.submit import read_prompt
    from delegate.services.session import resume  # as services.jobs.submit

    text = None
    if prompt is not None or prompt_file is not None:
        text = read_prompt(text=prompt, file=prompt_file, stdin=sys.stdin)
    result, how = resume(_state(), name, prompt=text, wait=wait, emit=_event_printer(as_json))
    print(f"delegate: session {name}: {how}", file=sys.stderr)
    return _submitted(result, as_json)


@app.command()
def attach(name: SessionArg) -> int:
    """Attach this terminal to a session's tmux (detach with the tmux prefix, then d).

    Example: delegate attach dlg-1a2b3c4d
    """
    # services.session (the launcher, tmux): only the session commands
    from delegate.services.session import attach_argv

    return subprocess.run(attach_argv(_state(), name), check=False).returncode


@app.command()
def send(
    name: SessionArg,
    text: Annotated[str, typer.Argument(help="Text typed into the pane, literally.")],
    no_enter: Annotated[bool, typer.Option("--no-enter", help="Do not press Enter.")] = False,
    keys: Annotated[
        bool, typer.Option("--keys", help="TEXT is tmux key names (C-c, Enter, Up).")
    ] = False,
) -> int:
    """Type text into a session's pane, what an agent reading its terminal receives.

    Example: delegate send dlg-1a2b3c4d 'yes, go ahead'
    """
    # services.session (the launcher, tmux): only the session commands
    from delegate.services.session import send as send_text

    send_text(_state(), name, text, enter=not no_enter, keys=keys)
    return 0


@app.command()
def peek(
    name: SessionArg,
    lines: Annotated[int, typer.Option("--lines", help="How many lines.")] = 20,
    as_json: JsonOpt = False,
) -> int:
    """The last non-blank lines a session's pane shows or holds in its history.

    Example: delegate peek dlg-1a2b3c4d --lines 40
    """
    # services.session (the launcher, tmux): only the session commands
    from delegate.services.session import peek as peek_pane

    found = peek_pane(_state(), name, lines=lines)
    if as_json:
        print_json({"session": name, "lines": found})
    else:
        for line in found:
            print(line)
    return 0


cron_app = typer.Typer(
    help="Submit a job file on a schedule, one job per scheduled window.", no_args_is_help=True
)
app.add_typer(cron_app, name="cron")
CrontabUserOpt = Annotated[
    str | None, typer.Option("--user", help="Edit this user's crontab (as root, like -u).")
]
CrontabFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--file",
        help="Edit this crontab file instead; in /etc/cron.d or with --user its lines name the"
        " user they run as.",
    ),
]


@cron_app.command("add")
def cron_add(
    schedule: Annotated[str, typer.Argument(help="Five cron fields, e.g. '0 2 * * *'.")],
    job_file: Annotated[Path, typer.Argument(help="The job file (TOML, as for --from-file).")],
    name: Annotated[
        str | None, typer.Option("--name", help="Entry name (default: the file's stem).")
    ] = None,
    catch_up: Annotated[
        str,
        typer.Option("--catch-up", help="skip (default) or once: one job for missed windows."),
    ] = "skip",
    user: CrontabUserOpt = None,
    file: CrontabFileOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Add (or replace) a crontab line that runs `delegate cron run NAME`.

    Example: delegate cron add '0 2 * * *' nightly.toml --catch-up once
    """
    from delegate.services.cron import Crontab, add  # services.cron: only the cron commands

    entry = add(
        _state(), schedule, job_file, name=name, catch_up=catch_up, crontab=Crontab(user, file)
    )
    if as_json:
        print_json(entry)
    else:
        print(f"{entry['name']}: {entry['schedule']} {entry['job_file']}")
    return 0


@cron_app.command("list")
def cron_list(as_json: JsonOpt = False) -> int:
    """The cron entries, their schedule in words, next run, last job and its state.

    Example: delegate cron list --json
    """
    from delegate.services.cron import listing  # services.cron: only the cron commands

    print_listing(
        listing(_state()),
        ["NAME", "SCHEDULE", Column("WHEN", free=True), "NEXT RUN", "LAST JOB", "STATE"],
        lambda r: [
            r["name"],
            r["schedule"],
            r["description"],
            local_time(r["next_run"]),
            r["last_job_id"] or "-",
            r["last_state"] or "-",
        ],
        as_json=as_json,
        empty="no cron entries (add one with `delegate cron add`)",
    )
    return 0


@cron_app.command("remove")
def cron_remove(
    name: Annotated[str, typer.Argument(help="The entry's name.")],
    user: CrontabUserOpt = None,
    file: CrontabFileOpt = None,
) -> int:
    """Remove an entry and its crontab line; nothing else in the crontab changes.

    Example: delegate cron remove nightly
    """
    from delegate.services.cron import Crontab, remove  # services.cron: only the cron commands

    crontab = Crontab(user, file) if (user or file) else None
    entry = remove(_state(), name, crontab=crontab)
    print(f"{entry['name']}: removed")
    return 0


@cron_app.command("run")
def cron_run(name: Annotated[str, typer.Argument(help="The entry's name.")]) -> int:
    """Submit the entry's job for the current window, once (what the crontab line calls).

    One line of output; exit 0 when the window's job was submitted or already existed.
    Example: delegate cron run nightly
    """
    from delegate.services.cron import run as run_entry  # services.cron: only the cron commands

    print(run_entry(_state(), name).line())
    return 0


@app.command()
def monitor(
    once: Annotated[bool, typer.Option("--once", help="Make one pass and exit.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between passes (sooner when due).")
    ] = 5.0,
    reap_orphans: Annotated[
        bool,
        typer.Option("--reap-orphans", help="Kill toolkit sessions no record knows."),
    ] = False,
    keep_finished: Annotated[
        float,
        typer.Option("--keep-finished", help="Seconds a finished session is kept for a look."),
    ] = 600.0,
    as_json: JsonOpt = False,
) -> int:
    """Keep jobs and sessions true: apply events, end dead or late jobs, launch queued ones.

    It applies every job's events, fails jobs whose agent, wrapper or tmux died or whose
    deadline passed, launches queued jobs, and cleans up finished sessions.

    One line per action on stdout (JSON with --json). SIGTERM stops it with exit 0.
    Example: delegate monitor --interval 5 --json
    """
    # the reconcile policy and the monitor loop: only `monitor` loads them
    from delegate.core.policy import PolicySettings
    from delegate.runtime.monitor import run_monitor  # as core.policy

    if keep_finished < 0:
        raise typer.BadParameter("--keep-finished must be zero or more seconds")

    def report(done: Any) -> None:
        if as_json:
            print_json(done.to_dict())
        else:
            print(done.sentence(), flush=True)

    settings = PolicySettings(keep_finished_s=keep_finished, reap_orphans=reap_orphans)
    return run_monitor(_state(), once=once, interval_s=interval, settings=settings, report=report)


@app.command()
def report(
    logs: Annotated[
        str | None,
        typer.Option("--logs", help="Audit logs folder or any URI Spark reads (default: ours)."),
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default: local[*]).")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only jobs submitted on or after this day.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Folder for json, parquet or html output.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json, parquet or html.")] = "table",
    compact: Annotated[
        bool,
        typer.Option("--compact", help="First turn new NDJSON into day-partitioned Parquet."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", help="Let Spark's JVM and its warnings write to stderr."),
    ] = False,
) -> int:
    """Analyse the audit logs with Spark: failures by reason, per job, agent, session and day.

    Example: delegate report --since 2026-11-01 --format html --out report/
    """
    from delegate.services.report import run_report  # only `report` loads it

    result = run_report(
        _state(),
        logs=logs,
        master=master,
        since=since,
        out=out,
        fmt=fmt,
        compact=compact,
        verbose=verbose,
    )
    # delegate.report.text (pyspark behind it): only once the report ran
    from delegate.report.text import print_report

    if result.compacted is not None:
        print(
            f"compacted {result.compacted['lines']} new line(s)"
            f" ({result.compacted['malformed']} malformed)",
            file=sys.stderr,
        )
    if fmt == "table":
        print_report(result.report, generated_at=result.generated_at)
    for path in result.written:
        print(path)
    return 0


@app.command()
def doctor(as_json: JsonOpt = False) -> int:
    """Check the state directory, the registry, tmux (socket folder, round trip) and the bus.

    Exit status 0 when everything is fine, 1 when something needs attention.
    Example: delegate doctor --json
    """
    from delegate.services.doctor import healthy, run_checks  # only `doctor` loads it

    checks = run_checks(_state())
    if wants_json(as_json):  # one object: the verdict and its checks
        print_json({"healthy": healthy(checks), "checks": [c.to_dict() for c in checks]})
    else:
        print_table(
            ["CHECK", "STATUS", Column("DETAIL", free=True)],
            [[c.name, c.status, c.detail] for c in checks],
            empty="no checks ran",
        )
    return 0 if healthy(checks) else 1


# Every command of `delegate`, in the order `--help` lists them, and the module defining it:
# this one (`app`), or a module whose `commands` app holds it, imported only when it is called.
_HERE = __name__
_COORD = "delegate.cli.coord"
_HOSTS = "delegate.cli.hosts"
ROOT_COMMANDS: dict[str, str] = {
    **dict.fromkeys(
        ("register", "publish", "hook", "watch", "jobs", "show", "logs", "cancel", "pick"), _HERE
    ),
    **dict.fromkeys(("submit", "ps", "attach", "send", "peek"), _HERE),
    **dict.fromkeys(("heartbeat", "agents", "block", "unblock", "deadlocks"), _COORD),
    **dict.fromkeys(("monitor", "report", "doctor", "session", "cron"), _HERE),
    **dict.fromkeys(("msg", "lock", "board", "bb", "bus", "claim"), _COORD),
    "host": _HOSTS,
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
