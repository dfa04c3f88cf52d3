"""The fast path of `delegate ps` when it prints JSON (`--json`, or piped): without typer.

Scripts poll `ps --json`; this answers with the typer command's options and the very output of
its JSON branch (`print_ps_json`, which the typer command calls too; a test compares the two).
What it does not handle goes to typer: tables (at a terminal, without --json), `--host` (it asks
the broker), `--tree`, `--watch` (the live view), `--help`, and any argument it does not take or
cannot read (typer says why).
"""

from __future__ import annotations

import sys

from delegate.core import fastjson
from delegate.core.errors import DelegateError, say
from delegate.entry.argv import parse_options
from delegate.services.ps import rows
from delegate.services.state import State

PS_OPTIONS = {
    "--all": False,
    "--limit": True,
    "--host": True,
    "--wide": False,
    "--group": True,
    "--tree": False,
    "--watch": False,
    "--json": False,
}
DEFAULT_LIMIT = 10  # `ps --limit` when not given (the typer command uses it too)


def parse_ps_args(argv: list[str]) -> tuple[bool, int, str | None] | None:
    """(--all, --limit, --group) of a `ps` this path answers, or None when typer should."""
    try:
        positional, values = parse_options("ps", PS_OPTIONS, argv)
    except DelegateError:
        return None
    limit = str(values.get("--limit", DEFAULT_LIMIT))
    to_typer = {"--host", "--tree", "--watch"} & values.keys()
    if positional or to_typer or not limit.isdigit():
        return None
    as_json = bool(values.get("--json"))
    if not (as_json or not sys.stdout.isatty()):
        return None  # a table: rich, through typer
    group = values.get("--group")
    return bool(values.get("--all")), int(limit), str(group) if group is not None else None


def print_ps_json(state: State, *, show_all: bool, limit: int, group: str | None = None) -> None:
    """`ps` as JSON lines (one per job), its tmux note and its empty note on stderr."""
    listing = rows(state, show_all=show_all, limit=limit, group=group)
    if listing.tmux_note:
        say(listing.tmux_note)
    if not listing.rows:
        say("no open jobs" if limit == 0 and not show_all else "no jobs")
        return
    out = sys.stdout
    for row in listing.rows:  # as adapters/terminal.print_json writes them
        out.write(fastjson.dumps(row.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    out.flush()


def main_ps(argv: list[str]) -> int | None:
    """Run `ps ARGV` here and return its exit status, or None to leave it to typer."""
    options = parse_ps_args(argv)
    if options is None:
        return None
    show_all, limit, group = options
    print_ps_json(State.open(), show_all=show_all, limit=limit, group=group)
    return 0
