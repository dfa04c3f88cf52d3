"""`delegate top`: the jobs, live, full screen (`ps --watch` under its own name)."""

from __future__ import annotations

from typing import Annotated

import typer

from delegate.cli.jobs import ps
from delegate.entry.ps import DEFAULT_LIMIT

# The root-level command this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
def top(
    limit: Annotated[
        int, typer.Option("--limit", help="How many recently finished jobs to show.")
    ] = DEFAULT_LIMIT,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="Only this queue group's jobs.")
    ] = None,
) -> int:
    """The jobs, live, full screen: state, agent, group, time, cost, last event, queue.

    Keys: Enter pane and events, c cancel, a/d approve/deny a permission request, s send
    a line, l logs, / filter, q quit.
    Not at a terminal: one snapshot, as `ps` prints it.
    Example: delegate top --group nightly
    """
    return ps(
        show_all=False,
        limit=limit,
        host=None,
        wide=False,
        group=group,
        tree=False,
        watch=True,
        as_json=False,
    )
