"""The report in the terminal: a summary, then tables fitted to the width (`delegate report`)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any

from delegate.adapters.terminal import Column, terminal_width
from delegate.adapters.terminal import print_table as print_rows
from delegate.core.outcome import denied_count
from delegate.core.timefmt import human_duration, local_time
from delegate.report.common import (
    Report,
    as_bytes,
    as_cost,
    as_count,
    as_cpu,
    as_host,
    as_outcome,
    as_rate,
    as_reasons,
    as_text,
    coverage,
    denials_line,
    retried_agents,
    retries_line,
    sessions_shared,
    summary,
    top_lists,
    usage_line,
)

PIPED_WIDTH = 240  # a table written to a file or a pipe keeps its natural width up to this
JOBS_AT_TERMINAL = 20

When = Callable[[Any], str]  # an ISO time as the tables show it

GROUP_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("JOBS", align="right"), lambda r: as_count(r.get("jobs"))),
    (Column("DONE", align="right"), lambda r: as_count(r.get("completed"))),
    (Column("FAILED", align="right"), lambda r: as_count(r.get("error"))),
    (Column("CANCELLED", align="right"), lambda r: as_count(r.get("cancelled"))),
    (Column("SUCCESS", align="right"), lambda r: as_rate(r.get("success_rate"))),
    (Column("P50", align="right"), lambda r: human_duration(r.get("p50_duration_s"))),
    (Column("P95", align="right"), lambda r: human_duration(r.get("p95_duration_s"))),
    (Column("COST", align="right"), lambda r: as_cost(r.get("cost_usd"))),
]


JobCell = Callable[[dict[str, Any]], str]
WIDE_JOBS = 130  # below this many columns the jobs table keeps what matters most


def _job_cells(
    width: int, when: When = local_time
) -> tuple[list[tuple[Column, JobCell]], set[str]]:
    """The jobs table's columns, and the headers of those shown at `width`."""
    columns: list[tuple[Column, JobCell]] = [
        (Column("JOB"), lambda j: str(j["job_id"])),
        (Column("STATUS"), lambda j: str(j["status"])),
        (Column("AGENT"), lambda j: as_text(j.get("agent"))),
        (Column("STARTED"), lambda j: when(j.get("registered_at"))),
        (Column("ENDED"), lambda j: when(j.get("ended_at"))),
        (Column("DURATION", align="right"), lambda j: human_duration(j.get("duration_s"))),
        (
            Column("1ST EVENT", align="right"),
            lambda j: human_duration(j.get("time_to_first_event_s")),
        ),
        (Column("EVENTS", align="right"), lambda j: as_count(j.get("events"))),
        (Column("SILENCE", align="right"), lambda j: human_duration(j.get("longest_silence_s"))),
        (Column("PERMS", align="right"), lambda j: as_count(j.get("permission_requests"))),
        (Column("REJECTED", free=True), lambda j: as_reasons(j.get("rejected_by_reason"))),
        # a completion with denied tool calls says so where a failure says why
        (
            Column("ERROR", free=True),
            lambda j: (
                as_text(j.get("error"))
                if j.get("error")
                else as_text(denied_count(j.get("denied_tools")))
            ),
        ),
        (Column("COST", align="right"), lambda j: as_cost(j.get("cost_usd"))),
    ]
    shown = {c.header for c, _ in columns}
    if width < WIDE_JOBS:
        shown = {"JOB", "STATUS", "AGENT", "STARTED", "ENDED", "DURATION", "ERROR"}
    return columns, shown


def print_report(
    report: Report,
    *,
    width: int | None = None,
    generated_at: datetime | None = None,
    jobs_limit: int = JOBS_AT_TERMINAL,
    tz: tzinfo | None = None,
) -> None:
    """The report as tables fitted to `width`: the terminal's when stdout is one, else up to
    PIPED_WIDTH (a file keeps whole lines)."""
    if width is None:
        width = terminal_width(sys.stdout) if sys.stdout.isatty() else PIPED_WIDTH
    now = generated_at or datetime.now(UTC)

    def when(text: Any) -> str:
        return local_time(text, now=now, tz=tz)

    _print_heading(report, width, now, when)
    _print_failures(report, width)
    _print_retries(report, width)
    _print_denials(report, width)
    _print_groups(report, width)
    _print_days(report, width)
    _print_usage(report, width)
    _print_latest_jobs(report, width, when, jobs_limit)
    _print_resources(report, width)


def _print_heading(report: Report, width: int, now: datetime, when: When) -> None:
    """The summary, and the time range covered with when the report was made."""
    span = coverage(report)
    print(textwrap.fill(summary(report), width=width, break_on_hyphens=False))
    covered = (
        f"from {when(span.start)} to {when(span.end)} ({human_duration(span.span_s)})"
        if span.start
        else "no jobs"
    )
    print(textwrap.fill(f"{covered}; generated {when(now.isoformat())}", width=width))


def _print_failures(report: Report, width: int) -> None:
    print()
    print_rows(
        [Column("REASON"), Column("JOBS", align="right"), Column("EXAMPLES", free=True)],
        [
            [f["reason"], as_count(f["jobs"]), " ".join(f["examples"] or [])]
            for f in report.failures
        ],
        empty="no failed jobs in this report",
        title="failures by reason",
        width=width,
    )


RETRY_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("ATTEMPTS", align="right"), lambda r: as_count(r.get("attempts"))),
    (Column("RETRIED", align="right"), lambda r: as_count(r.get("retried"))),
    (
        Column("THEN SUCCEEDED", align="right"),
        lambda r: as_count(r.get("retried_then_succeeded")),
    ),
    (Column("STILL FAILED", align="right"), lambda r: as_count(r.get("retried_still_failed"))),
]


def _print_retries(report: Report, width: int) -> None:
    """Attempts and retried jobs in a line, then per agent when any job was retried."""
    print()
    print(textwrap.fill(f"retries: {retries_line(report.totals)}", width=width))
    rows = retried_agents(report)
    if not rows:
        return
    print()
    print_rows(
        [Column("AGENT", free=True), *(c for c, _ in RETRY_CELLS)],
        [[as_text(r.get("agent")), *(cell(r) for _, cell in RETRY_CELLS)] for r in rows],
        empty="",
        title="retried jobs per agent",
        width=width,
    )


def _print_denials(report: Report, width: int) -> None:
    """The tool calls agent CLIs denied in a line, then per tool when there were any."""
    print()
    print(textwrap.fill(f"denied: {denials_line(report.totals, report.denied)}", width=width))
    if not report.denied:
        return
    print()
    print_rows(
        [Column("TOOL", free=True), Column("CALLS", align="right"), Column("JOBS", align="right")],
        [
            [as_text(d.get("tool")), as_count(d.get("calls")), as_count(d.get("jobs"))]
            for d in report.denied
        ],
        empty="",
        title="denied tool calls per tool",
        width=width,
    )


def _print_groups(report: Report, width: int) -> None:
    """Per agent, per queue group (when jobs had one), and per session for the sessions
    that hosted more than one job."""
    for title, key, rows in (
        ("per agent", "agent", report.agents),
        ("per queue group", "group", report.groups),
        ("sessions that hosted more than one job", "session", sessions_shared(report)),
    ):
        if not rows:
            continue
        print()
        print_rows(
            [Column(key.upper(), free=True), *(c for c, _ in GROUP_CELLS)],
            [[as_text(r.get(key)), *(cell(r) for _, cell in GROUP_CELLS)] for r in rows],
            empty="",
            title=title,
            width=width,
        )


def _print_days(report: Report, width: int) -> None:
    if not report.days:
        return
    print()
    print_rows(
        [
            Column("DAY (UTC)"),
            *(Column(h, align="right") for h in ("SUBMITTED", "DONE", "FAILED", "COST")),
        ],
        [
            [
                as_text(d.get("day")),
                as_count(d.get("submitted")),
                as_count(d.get("completed")),
                as_count(d.get("failed")),
                as_cost(d.get("cost_usd")),
            ]
            for d in report.days
        ],
        empty="",
        title="per day",
        width=width,
    )


USAGE_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("JOBS", align="right"), lambda r: as_count(r.get("jobs"))),
    (Column("LIMITED", align="right"), lambda r: as_count(r.get("limited_jobs"))),
    (Column("PEAK MEM", align="right"), lambda r: as_bytes(r.get("peak_memory_bytes"))),
    (Column("CPU", align="right"), lambda r: as_cpu(r.get("cpu_s"))),
    (Column("SANDBOXED", align="right"), lambda r: as_count(r.get("sandboxed_jobs"))),
    (Column("CONNS", align="right"), lambda r: as_count(r.get("egress_connections"))),
    (Column("REFUSED", align="right"), lambda r: as_count(r.get("egress_refused"))),
    (Column("SENT", align="right"), lambda r: as_bytes(r.get("egress_sent"))),
    (Column("RECEIVED", align="right"), lambda r: as_bytes(r.get("egress_received"))),
]
TOP_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("JOB"), lambda r: str(r["job_id"])),
    (Column("AGENT", free=True), lambda r: as_text(r.get("agent"))),
    (Column("OUTCOME", free=True), as_outcome),
    (Column("DURATION", align="right"), lambda r: human_duration(r.get("duration_s"))),
    (Column("PEAK MEM", align="right"), lambda r: as_bytes(r.get("peak_memory_bytes"))),
    (Column("CPU", align="right"), lambda r: as_cpu(r.get("cpu_s"))),
]
HOST_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("HOST", free=True), as_host),
    (Column("JOBS", align="right"), lambda r: as_count(r.get("jobs"))),
    (Column("CONNS", align="right"), lambda r: as_count(r.get("connections"))),
    (Column("REFUSED", align="right"), lambda r: as_count(r.get("refused"))),
    (Column("SENT", align="right"), lambda r: as_bytes(r.get("sent"))),
    (Column("RECEIVED", align="right"), lambda r: as_bytes(r.get("received"))),
]


def _print_usage(report: Report, width: int) -> None:
    """Memory, CPU and egress in a line, then per agent and per day when jobs had figures;
    the slowest and hungriest jobs; the hosts reached through an egress proxy."""
    print()
    print(textwrap.fill(f"resources: {usage_line(report.totals)}", width=width))
    tables = [
        ("resources per agent", "AGENT", "agent", USAGE_CELLS, report.usage_agents),
        ("resources per day", "DAY (UTC)", "day", USAGE_CELLS, report.usage_days),
        *((title, "#", "rank", TOP_CELLS, rows) for _, title, rows in top_lists(report)),
        ("hosts through an egress proxy", "", "", HOST_CELLS, report.hosts),
    ]
    for title, header, key, cells, rows in tables:
        if not rows:
            continue
        first = [Column(header, free=key == "agent")] if key else []
        print()
        print_rows(
            [*first, *(c for c, _ in cells)],
            [
                [*([as_text(r.get(key))] if key else []), *(cell(r) for _, cell in cells)]
                for r in rows
            ],
            empty="",
            title=title,
            width=width,
        )


def _print_latest_jobs(report: Report, width: int, when: When, jobs_limit: int) -> None:
    shown = report.jobs[-jobs_limit:] if jobs_limit else []
    if not shown:
        return
    print()
    columns, cells = _job_cells(width, when)
    print_rows(
        [c for c, _ in columns if c.header in cells],
        [[cell(j) for c, cell in columns if c.header in cells] for j in shown],
        empty="",
        title=f"latest {len(shown)} of {len(report.jobs)} jobs",
        width=width,
    )


def _print_resources(report: Report, width: int) -> None:
    if not report.resources:
        return
    print()
    print_rows(
        [
            Column("TYPE"),
            Column("RESOURCE", free=True),
            *(
                Column(h, align="right")
                for h in ("GRANTS", "AVG WAIT", "MAX WAIT", "HOLDS", "AVG HOLD", "MAX HOLD")
            ),
            Column("BROKEN", align="right"),
        ],
        [
            [
                r["type"],
                as_text(r.get("resource")),
                as_count(r.get("grants")),
                human_duration(r.get("avg_wait_s")),
                human_duration(r.get("max_wait_s")),
                as_count(r.get("holds")),
                human_duration(r.get("avg_hold_s")),
                human_duration(r.get("max_hold_s")),
                as_count(r.get("broken")),
            ]
            for r in report.resources
        ],
        empty="",
        title="locks and claims",
        width=width,
    )
