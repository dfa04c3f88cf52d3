"""`delegate group add|set|pause|resume|list`: queue groups, each with its own cap and a pause.

A job joins one with `submit --group NAME`. Caps are honoured together: the global and
per-profile `max_running` of delegate.toml, the group's, and the job's own `--max-running`.
"""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

from typing import Annotated, Any, NamedTuple

import typer

from delegate.adapters.groups import GroupBook
from delegate.adapters.terminal import Column, print_json, print_listing
from delegate.cli.common import JsonOpt, open_state
from delegate.core.caps import GroupRule, occupies_slot
from delegate.core.errors import UsageError
from delegate.core.model import JobState

# The root-level group this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()
group_app = typer.Typer(
    help="Queue groups: their own max_running, paused or not.\n\n"
    "Example: delegate group add nightly --max-running 2\n"
    "Example: delegate group list",
    no_args_is_help=True,
)
commands.add_typer(group_app, name="group")
NameArg = Annotated[str, typer.Argument(help="The group's name.")]
DailyCostOpt = Annotated[
    float | None,
    typer.Option(
        "--daily-cost",
        help="Start none of its jobs once those that ended today (UTC) cost this many dollars.",
    ),
]
MaxRunningOpt = Annotated[
    int | None,
    typer.Option("--max-running", help="At most N of its jobs run at once (default: no cap)."),
]


def _book() -> GroupBook:
    return GroupBook(open_state().layout.groups_book)


def _said(name: str, rule: GroupRule, as_json: bool) -> None:
    if as_json:
        print_json({"group": name, **rule._asdict()})
        return
    cap = f"max_running {rule.max_running}" if rule.max_running else "no cap of its own"
    budget = f", ${rule.daily_cost_usd:.2f} a day" if rule.daily_cost_usd is not None else ""
    print(f"group {name}: {cap}{budget}{', paused' if rule.paused else ''}")


@group_app.command("add")
def group_add(
    name: NameArg,
    max_running: MaxRunningOpt = None,
    daily_cost: DailyCostOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """Create a group.

    Example: delegate group add nightly --max-running 2 --daily-cost 20
    """
    _said(name, _book().add(name, max_running, daily_cost), as_json)
    return 0


@group_app.command("set")
def group_set(
    name: NameArg,
    max_running: MaxRunningOpt = None,
    no_cap: Annotated[bool, typer.Option("--no-cap", help="Remove its own cap.")] = False,
    daily_cost: DailyCostOpt = None,
    no_daily_cost: Annotated[
        bool, typer.Option("--no-daily-cost", help="Remove its daily budget.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Change a group's cap or daily budget; queued jobs start as soon as they allow.

    Example: delegate group set nightly --max-running 4
    """
    changes: dict[str, Any] = {}
    for value, off, key, flag in (
        (max_running, no_cap, "max_running", "--max-running N or --no-cap"),
        (daily_cost, no_daily_cost, "daily_cost_usd", "--daily-cost USD or --no-daily-cost"),
    ):
        if value is not None and off:
            raise UsageError(f"give {flag}, not both")
        if value is not None or off:
            changes[key] = value
    if not changes:
        raise UsageError("give --max-running N, --no-cap, --daily-cost USD or --no-daily-cost")
    _said(name, _book().change(name, **changes), as_json)
    return 0


@group_app.command("pause")
def group_pause(name: NameArg, as_json: JsonOpt = False) -> int:
    """Start none of its jobs until resumed; running ones go on.

    Example: delegate group pause nightly
    """
    _said(name, _book().change(name, paused=True), as_json)
    return 0


@group_app.command("resume")
def group_resume(name: NameArg, as_json: JsonOpt = False) -> int:
    """Let its queued jobs start again.

    Example: delegate group resume nightly
    """
    _said(name, _book().change(name, paused=False), as_json)
    return 0


class GroupRow(NamedTuple):
    group: str
    max_running: int | None
    paused: bool
    running: int
    queued: int
    daily_cost_usd: float | None
    spent_today_usd: float


# `group list`: the group's name is free text (shortened first), TODAY folds last.
LIST_COLUMNS = [
    Column("GROUP", free=True),
    Column("MAX", align="right"),
    Column("PAUSED"),
    Column("RUNNING", align="right"),
    Column("QUEUED", align="right"),
    Column("TODAY", align="right", wrap=True),
]


def list_cells(r: GroupRow) -> list[str]:
    today = f"${r.spent_today_usd:.2f}"
    if r.daily_cost_usd is not None:
        today += f" of ${r.daily_cost_usd:.2f}"
    paused = "yes" if r.paused else "no"
    return [r.group, str(r.max_running or "-"), paused, str(r.running), str(r.queued), today]


@group_app.command("list")
def group_list(as_json: JsonOpt = False) -> int:
    """Every group: its cap, whether it is paused, its jobs running and queued.

    Example: delegate group list
    """
    state = open_state()
    rules = GroupBook(state.layout.groups_book).rules()
    jobs = state.registry.open_jobs()
    rows = []
    for name, rule in sorted(rules.items()):
        mine = [j for j in jobs if j.group == name]
        running = sum(1 for j in mine if occupies_slot(j))
        queued = sum(1 for j in mine if j.status is JobState.QUEUED)
        rows.append(
            GroupRow(
                name,
                rule.max_running,
                rule.paused,
                running,
                queued,
                rule.daily_cost_usd,
                rule.spent_today_usd,
            )
        )
    print_listing(
        rows,
        LIST_COLUMNS,
        list_cells,
        as_json=as_json,
        to_json=lambda r: r._asdict(),
        empty="no groups (create one with `delegate group add NAME`)",
    )
    return 0
