"""`delegate monitor`, `report`, `doctor`: keeping jobs true, reading their record, checking
the toolkit's own health."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import Column, print_json, print_table, wants_json
from delegate.cli.common import JsonOpt, open_state
from delegate.config.settings import warm_s
from delegate.core.policy import PolicySettings
from delegate.runtime.monitor import run_monitor
from delegate.services import warm_report
from delegate.services.doctor import healthy, run_checks
from delegate.services.report import run_report

# The root-level commands this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
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
    if keep_finished < 0:
        raise typer.BadParameter("--keep-finished must be zero or more seconds")

    def report(done: Any) -> None:
        if as_json:
            print_json(done.to_dict())
        else:
            print(done.sentence(), flush=True)

    settings = PolicySettings(keep_finished_s=keep_finished, reap_orphans=reap_orphans)
    return run_monitor(
        open_state(), once=once, interval_s=interval, settings=settings, report=report
    )


@commands.command()
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
        Path | None,
        typer.Option(
            "--out",
            help="Folder for json, parquet or html output (default: the state dir's reports).",
        ),
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
    stop: Annotated[
        bool,
        typer.Option("--stop", help="End the Spark kept up for the next report, now; no report."),
    ] = False,
) -> int:
    """Analyse the audit logs with Spark: failures by reason, per job, agent, session and day.

    Spark stays up for the next report, idle, for $DELEGATE_REPORT_WARM_S seconds (300);
    `--stop` ends it sooner.
    Example: delegate report --since 2026-11-01 --format html --out report/
    Example: delegate report --stop
    """
    state = open_state()
    if stop:
        ended = warm_report.stop(state.layout.home)
        print("the report's Spark ended" if ended else "no report's Spark was up", file=sys.stderr)
        return 0
    result = run_report(
        state,
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
    kept = warm_s(state.env)
    if kept > 0 and master is None and not verbose and sys.stderr.isatty():
        print(
            f"Spark stays up {kept:g} s for the next report (uses memory meanwhile);"
            " `delegate report --stop` ends it now",
            file=sys.stderr,
        )
    return 0


@commands.command()
def doctor(as_json: JsonOpt = False) -> int:
    """Check the state directory, the registry, tmux (socket folder, round trip) and the bus.

    Exit status 0 when everything is fine, 1 when something needs attention.
    Example: delegate doctor --json
    """
    checks = run_checks(open_state())
    if wants_json(as_json):  # one object: the verdict and its checks
        print_json({"healthy": healthy(checks), "checks": [c.to_dict() for c in checks]})
    else:
        print_table(
            ["CHECK", "STATUS", Column("DETAIL", free=True)],
            [[c.name, c.status, c.detail] for c in checks],
            empty="no checks ran",
        )
    return 0 if healthy(checks) else 1
