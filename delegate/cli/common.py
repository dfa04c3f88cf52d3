"""What the command modules of `delegate` share: the options and arguments several commands
take, and how a job's events, its outcome and a submitted job are printed."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import print_json, terminal_width, wants_json
from delegate.core.eventlines import event_line, outcome_line
from delegate.core.model import Job
from delegate.services.jobs.register import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_WALL_TIMEOUT_S
from delegate.services.state import State

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


def open_state() -> State:
    """The state directory this command works on (DELEGATE_HOME or the default)."""
    return State.open()


def event_printer(as_json: bool) -> Any:
    """What `submit --wait`, `watch` and `session resume --wait` print per event: a readable
    line at a terminal, the signed envelope as one JSON line otherwise."""
    if wants_json(as_json):
        return print_json
    width = terminal_width()

    def emit_line(envelope: dict[str, Any]) -> None:
        print(event_line(envelope, width=width), flush=True)

    return emit_line


def say_outcome(state: State, job_id: str) -> None:
    """How the job ended, in words, on stderr (`job 1a2b3c4d timed out: no activity for 10m`)."""
    print(outcome_line(state.registry.get(job_id).public_dict()), file=sys.stderr)


def print_submitted(result: Any, as_json: bool) -> int:
    """What submit and session resume print: the outcome's code when waited for, else the job."""
    if result.outcome is not None:
        state = open_state()
        say_outcome(state, result.job.job_id)
        print(f"audit log: {state.audit.events_path(result.job.job_id)}", file=sys.stderr)
        return int(result.outcome.exit_code)
    if as_json:
        print_json(result.job.public_dict())
    else:
        print(result.job.job_id)
    return 0


def print_job(job: Job, as_json: bool) -> None:
    """A job just registered or picked: its public record as JSON, else its id alone."""
    if as_json:
        print_json(job.public_dict())
    else:
        print(job.job_id)
