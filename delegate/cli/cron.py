"""`delegate cron add|list|remove|run`: a job file submitted on a schedule (its crontab lines)."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import Column, print_json, print_listing
from delegate.cli.common import JsonOpt, open_state
from delegate.core.timefmt import local_time
from delegate.services.cron import Crontab, add, listing, remove
from delegate.services.cron import run as run_entry

# The root-level group this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()
cron_app = typer.Typer(
    help="Submit a job file on a schedule, one job per scheduled window.\n\n"
    "Example: delegate cron add '0 2 * * *' nightly.toml\n"
    "Example: delegate cron list",
    no_args_is_help=True,
)
commands.add_typer(cron_app, name="cron")
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
    entry = add(
        open_state(), schedule, job_file, name=name, catch_up=catch_up, crontab=Crontab(user, file)
    )
    if as_json:
        print_json(entry)
    else:
        print(f"{entry['name']}: {entry['schedule']} {entry['job_file']}")
    return 0


# `cron list`: the name and the schedule in words are shortened first; the schedule, next run and
# state fold last; the last job's id never.
LIST_COLUMNS = [
    Column("NAME", free=True),
    Column("SCHEDULE", wrap=True),
    Column("WHEN", free=True),
    Column("NEXT RUN", wrap=True),
    Column("LAST JOB"),
    Column("STATE", wrap=True),
]


def list_cells(r: dict[str, Any]) -> list[str]:
    return [
        r["name"],
        r["schedule"],
        r["description"],
        local_time(r["next_run"]),
        r["last_job_id"] or "-",
        r["last_state"] or "-",
    ]


@cron_app.command("list")
def cron_list(as_json: JsonOpt = False) -> int:
    """The cron entries, their schedule in words, next run, last job and its state.

    Example: delegate cron list --json
    """
    print_listing(
        listing(open_state()),
        LIST_COLUMNS,
        list_cells,
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
    crontab = Crontab(user, file) if (user or file) else None
    entry = remove(open_state(), name, crontab=crontab)
    print(f"{entry['name']}: removed")
    return 0


@cron_app.command("run")
def cron_run(name: Annotated[str, typer.Argument(help="The entry's name.")]) -> int:
    """Submit the entry's job for the current window, once (what the crontab line calls).

    One line of output; exit 0 when the window's job was submitted or already existed.
    Example: delegate cron run nightly
    """
    print(run_entry(open_state(), name).line())
    return 0
