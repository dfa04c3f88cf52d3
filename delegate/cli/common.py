"""What the command modules of `delegate` share: the options and arguments several commands
take (the printing of events, outcomes and submitted jobs is entry/output's, which the
typeless fast paths share)."""

from __future__ import annotations

from typing import Annotated

import typer

from delegate.entry.output import event_printer, print_job, print_submitted, say_outcome
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


__all__ = ["event_printer", "open_state", "print_job", "print_submitted", "say_outcome"]
