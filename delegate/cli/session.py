"""`delegate session list|stop|resume`, `attach`, `send`, `peek`: the tmux sessions agents run
in, listed, stopped, resumed, typed into and read."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import Column, print_json, print_listing
from delegate.cli.common import JsonOpt, event_printer, open_state, print_submitted
from delegate.core.timefmt import local_time
from delegate.services.jobs.submit import read_prompt
from delegate.services.session import attach_argv, list_sessions, resume, stop
from delegate.services.session import peek as peek_pane
from delegate.services.session import send as send_text

# The root-level commands and groups this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()
session_app = typer.Typer(
    help="List, stop and resume the tmux sessions agents run in.\n\n"
    "Example: delegate session list --all\n"
    "Example: delegate session stop dlg-1a2b3c4d --mode graceful",
    no_args_is_help=True,
)
commands.add_typer(session_app, name="session")
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
    print_listing(
        list_sessions(open_state(), show_all=show_all),
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
    _print_session(stop(open_state(), name, mode=mode, timeout_s=timeout), as_json)
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
    text = None
    if prompt is not None or prompt_file is not None:
        text = read_prompt(text=prompt, file=prompt_file, stdin=sys.stdin)
    result, how = resume(open_state(), name, prompt=text, wait=wait, emit=event_printer(as_json))
    print(f"delegate: session {name}: {how}", file=sys.stderr)
    return print_submitted(result, as_json)


@commands.command()
def attach(name: SessionArg) -> int:
    """Attach this terminal to a session's tmux (detach with the tmux prefix, then d).

    Example: delegate attach dlg-1a2b3c4d
    """
    return subprocess.run(attach_argv(open_state(), name), check=False).returncode


@commands.command()
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
    send_text(open_state(), name, text, enter=not no_enter, keys=keys)
    return 0


@commands.command()
def peek(
    name: SessionArg,
    lines: Annotated[int, typer.Option("--lines", help="How many lines.")] = 20,
    as_json: JsonOpt = False,
) -> int:
    """The last non-blank lines a session's pane shows or holds in its history.

    Example: delegate peek dlg-1a2b3c4d --lines 40
    """
    found = peek_pane(open_state(), name, lines=lines)
    if as_json:
        print_json({"session": name, "lines": found})
    else:
        for line in found:
            print(line)
    return 0
