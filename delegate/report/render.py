"""Writing a report: terminal tables, JSON, Parquet, or an HTML page with charts.

What people read says durations in words (`4m 12s`, `delegate.core.timefmt`), times in local time,
the time range the report covers and when it was made, and failures ranked by reason. The
HTML page embeds its charts as SVG drawn by matplotlib, so it needs no network to open; it
takes the window's width, narrow or wide, and prints cleanly. JSON and Parquet keep the figures
as computed (seconds, UTC).
"""

from __future__ import annotations

import html
import io
import json
import sys
import textwrap
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.terminal import Column, terminal_width
from delegate.adapters.terminal import print_table as print_rows
from delegate.core.timefmt import (
    RECORD_FORMAT,
    human_duration,
    human_timeout,
    local_time,
    parse_iso,
    seconds_between,
)
from delegate.report.figures import Report

PIPED_WIDTH = 240  # a table written to a file or a pipe keeps its natural width up to this
JOBS_AT_TERMINAL = 20


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.strftime(RECORD_FORMAT)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_json(report: Report) -> dict[str, Any]:
    return _plain(report._asdict())  # type: ignore[no-any-return]


# --- cells as people read them -------------------------------------------------------------


def _count(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def _rate(value: Any) -> str:
    return "-" if value is None else f"{value:.0%}"


def _cost(value: Any) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def _reasons(value: Any) -> str:
    if not value:
        return "-"
    return ", ".join(f"{reason} {count}" for reason, count in sorted(value.items()))


def _text(value: Any) -> str:
    return "-" if value is None or value == "" else str(_plain(value))


def _zone(moment: datetime) -> str:
    """`CET, UTC+01:00`: the zone a page's times are in."""
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    name = moment.tzname() or ""
    utc = f"UTC{sign}{hours:02d}:{mins:02d}"
    return f"{name}, {utc}" if name and name != "UTC" else utc


def _local(moment: datetime, tz: tzinfo | None) -> datetime:
    return moment.astimezone(tz) if tz is not None else moment.astimezone()


def page_time(text: Any, tz: tzinfo | None = None, *, seconds: bool = True) -> str:
    """An ISO time as the HTML page shows it, in `tz` (default: this machine's zone):
    `2026-11-22 14:02:07` (or without seconds); `-` when missing."""
    moment = parse_iso(text)
    if moment is None:
        return "-"
    return _local(moment, tz).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


class Coverage(NamedTuple):
    start: str | None  # ISO UTC
    end: str | None
    span_s: float | None


def coverage(report: Report) -> Coverage:
    start, end = report.totals.get("covers_from"), report.totals.get("covers_to")
    return Coverage(start, end, seconds_between(start, end))


def sessions_shared(report: Report) -> list[dict[str, Any]]:
    """The sessions that hosted more than one job: a one-job session is that job's row."""
    return [s for s in report.sessions if (s.get("jobs") or 0) > 1]


def _outcomes(report: Report) -> str:
    counts: dict[str, int] = {}
    for job in report.jobs:
        counts[job["status"]] = counts.get(job["status"], 0) + 1
    ended = [(s, counts.pop(s, 0)) for s in ("completed", "error", "cancelled")]
    parts = [f"{n} {'failed' if s == 'error' else s}" for s, n in ended]
    still = sum(counts.values())
    if still:
        parts.append(f"{still} not ended")
    return ", ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def _summary(report: Report) -> str:
    t = report.totals
    return (
        f"{_plural(t['jobs'], 'job')} ({_outcomes(report)}); {_plural(t['events'], 'event')},"
        f" {_plural(t['permission_requests'], 'permission request')},"
        f" {_plural(t['rejected'], 'rejected message')},"
        f" {_plural(t['malformed_lines'], 'malformed line')}"
    )


# --- the terminal ----------------------------------------------------------------------------

GROUP_CELLS: list[tuple[Column, Callable[[dict[str, Any]], str]]] = [
    (Column("JOBS", align="right"), lambda r: _count(r.get("jobs"))),
    (Column("DONE", align="right"), lambda r: _count(r.get("completed"))),
    (Column("FAILED", align="right"), lambda r: _count(r.get("error"))),
    (Column("CANCELLED", align="right"), lambda r: _count(r.get("cancelled"))),
    (Column("SUCCESS", align="right"), lambda r: _rate(r.get("success_rate"))),
    (Column("P50", align="right"), lambda r: human_duration(r.get("p50_duration_s"))),
    (Column("P95", align="right"), lambda r: human_duration(r.get("p95_duration_s"))),
    (Column("COST", align="right"), lambda r: _cost(r.get("cost_usd"))),
]


JobCell = Callable[[dict[str, Any]], str]
WIDE_JOBS = 130  # below this many columns the jobs table keeps what matters most


def _job_cells(
    width: int, when: Callable[[Any], str] = local_time
) -> tuple[list[tuple[Column, JobCell]], set[str]]:
    """The jobs table's columns, and the headers of those shown at `width`."""
    columns: list[tuple[Column, JobCell]] = [
        (Column("JOB"), lambda j: str(j["job_id"])),
        (Column("STATUS"), lambda j: str(j["status"])),
        (Column("AGENT"), lambda j: _text(j.get("agent"))),
        (Column("STARTED"), lambda j: when(j.get("registered_at"))),
        (Column("ENDED"), lambda j: when(j.get("ended_at"))),
        (Column("DURATION", align="right"), lambda j: human_duration(j.get("duration_s"))),
        (
            Column("1ST EVENT", align="right"),
            lambda j: human_duration(j.get("time_to_first_event_s")),
        ),
        (Column("EVENTS", align="right"), lambda j: _count(j.get("events"))),
        (Column("SILENCE", align="right"), lambda j: human_duration(j.get("longest_silence_s"))),
        (Column("PERMS", align="right"), lambda j: _count(j.get("permission_requests"))),
        (Column("REJECTED", free=True), lambda j: _reasons(j.get("rejected_by_reason"))),
        (Column("ERROR", free=True), lambda j: _text(j.get("error"))),
        (Column("COST", align="right"), lambda j: _cost(j.get("cost_usd"))),
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

    span = coverage(report)
    print(textwrap.fill(_summary(report), width=width, break_on_hyphens=False))
    covered = (
        f"from {when(span.start)} to {when(span.end)} ({human_duration(span.span_s)})"
        if span.start
        else "no jobs"
    )
    print(textwrap.fill(f"{covered}; generated {when(now.isoformat())}", width=width))

    print()
    print_rows(
        [Column("REASON"), Column("JOBS", align="right"), Column("EXAMPLES", free=True)],
        [[f["reason"], _count(f["jobs"]), " ".join(f["examples"] or [])] for f in report.failures],
        empty="no failed jobs in this report",
        title="failures by reason",
        width=width,
    )
    for title, key, rows in (
        ("per agent", "agent", report.agents),
        ("sessions that hosted more than one job", "session", sessions_shared(report)),
    ):
        if not rows:
            continue
        print()
        print_rows(
            [Column(key.upper(), free=True), *(c for c, _ in GROUP_CELLS)],
            [[_text(r.get(key)), *(cell(r) for _, cell in GROUP_CELLS)] for r in rows],
            empty="",
            title=title,
            width=width,
        )
    if report.days:
        print()
        print_rows(
            [
                Column("DAY (UTC)"),
                *(Column(h, align="right") for h in ("SUBMITTED", "DONE", "FAILED", "COST")),
            ],
            [
                [
                    _text(d.get("day")),
                    _count(d.get("submitted")),
                    _count(d.get("completed")),
                    _count(d.get("failed")),
                    _cost(d.get("cost_usd")),
                ]
                for d in report.days
            ],
            empty="",
            title="per day",
            width=width,
        )
    shown = report.jobs[-jobs_limit:] if jobs_limit else []
    if shown:
        print()
        columns, cells = _job_cells(width, when)
        print_rows(
            [c for c, _ in columns if c.header in cells],
            [[cell(j) for c, cell in columns if c.header in cells] for j in shown],
            empty="",
            title=f"latest {len(shown)} of {len(report.jobs)} jobs",
            width=width,
        )
    if report.resources:
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
                    _text(r.get("resource")),
                    _count(r.get("grants")),
                    human_duration(r.get("avg_wait_s")),
                    human_duration(r.get("max_wait_s")),
                    _count(r.get("holds")),
                    human_duration(r.get("avg_hold_s")),
                    human_duration(r.get("max_hold_s")),
                    _count(r.get("broken")),
                ]
                for r in report.resources
            ],
            empty="",
            title="locks and claims",
            width=width,
        )


# --- the HTML page ---------------------------------------------------------------------------


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.find("<svg") :]  # drop the XML prolog: it is inline in HTML


TICK_STEPS = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400)


def _tick_step(longest: float, ticks: int = 7) -> float:
    """A step in round units (seconds, minutes, hours, days) giving at most `ticks` ticks."""
    for step in TICK_STEPS:
        if longest / step <= ticks:
            return step
    return 86400 * (longest // (86400 * ticks) + 1)


def _tick(seconds: float) -> str:
    return "0" if seconds <= 0 else human_timeout(seconds)


def charts(report: Report) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator, MultipleLocator

    out = {}
    durations = [j["duration_s"] for j in report.jobs if j["duration_s"] is not None]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.hist(durations or [0], bins=30, color="#4c72b0")
    ax.xaxis.set_major_locator(MultipleLocator(_tick_step(max(durations, default=0))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _tick(x)))
    ax.set_xlabel("duration")
    ax.set_ylabel("jobs")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Job durations")
    out["durations"] = _svg(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    days = [str(d["day"]) for d in report.days]
    submitted = [d["submitted"] for d in report.days]
    completed = [d["completed"] for d in report.days]
    failed = [d["failed"] for d in report.days]
    x = range(len(days))
    ax.bar([i - 0.27 for i in x], submitted, width=0.27, label="submitted", color="#8c8c8c")
    ax.bar(list(x), completed, width=0.27, label="completed", color="#55a868")
    ax.bar([i + 0.27 for i in x], failed, width=0.27, label="failed", color="#c44e52")
    ax.set_xticks(list(x), days, rotation=30, ha="right")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Outcomes per day (UTC)")
    ax.legend()
    out["outcomes"] = _svg(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    agents = [str(a["agent"]) for a in report.agents]
    bottom = [0] * len(agents)
    for key, label, colour in (
        ("completed", "completed", "#55a868"),
        ("error", "failed", "#c44e52"),
        ("cancelled", "cancelled", "#8172b2"),
    ):
        values = [a[key] for a in report.agents]
        ax.bar(agents, values, bottom=bottom, label=label, color=colour)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Outcomes per agent")
    ax.legend()
    out["agents"] = _svg(fig)
    plt.close(fig)
    return out


class Cell(NamedTuple):
    html: str  # already escaped
    kind: str = "num"  # num (right, no wrap), text (left), free (left, wraps anywhere)


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(
    headers: Sequence[tuple[str, str]], rows: Sequence[Sequence[Cell]], *, table_id: str
) -> str:
    head = "".join(f'<th class="{kind}" scope="col">{_esc(h)}</th>' for h, kind in headers)
    labels = [_esc(h) for h, _ in headers]
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{c.kind}" data-label="{label}">{c.html}</td>'
            for c, label in zip(row, labels, strict=True)
        )
        + "</tr>"
        for row in rows
    )
    return (
        f'<div class="wide"><table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def _num(text: str) -> Cell:
    return Cell(_esc(text))


def _txt(text: str, kind: str = "text") -> Cell:
    return Cell(_esc(text), kind)


class Links:
    """Where a job's logs folder is: `<logs>/<job id>/` (a file:// URI for a local folder)."""

    def __init__(self, logs: str | None) -> None:
        if logs and "://" not in logs:
            logs = Path(logs).absolute().as_uri()
        self.base = logs.rstrip("/") if logs else None

    def href(self, job_id: str) -> str | None:
        return f"{self.base}/{job_id}/" if self.base else None

    def job(self, job_id: str) -> str:
        href = self.href(job_id)
        if href is None:
            return f'<span class="job">{_esc(job_id)}</span>'
        return (
            f'<a class="job" href="{_esc(href)}" title="logs of job {_esc(job_id)}">'
            f"{_esc(job_id)}</a>"
        )


def _time_cell(text: Any, tz: tzinfo | None) -> Cell:
    shown = page_time(text, tz)
    if shown == "-":
        return Cell("-", "time")
    day, _, clock = shown.partition(" ")  # a narrow column breaks between them, not inside
    return Cell(
        f'<time datetime="{_esc(text)}"><span>{_esc(day)}</span> <span>{_esc(clock)}</span></time>',
        "time",
    )


def _group_table(rows: list[dict[str, Any]], key: str, table_id: str) -> str:
    headers = [
        (key.capitalize(), "free"),
        ("Jobs", "num"),
        ("Completed", "num"),
        ("Failed", "num"),
        ("Cancelled", "num"),
        ("Success", "num"),
        ("p50 duration", "num"),
        ("p95 duration", "num"),
        ("Cost", "num"),
    ]
    cells = [
        [
            _txt(_text(r.get(key)), "free"),
            _num(_count(r.get("jobs"))),
            _num(_count(r.get("completed"))),
            _num(_count(r.get("error"))),
            _num(_count(r.get("cancelled"))),
            _num(_rate(r.get("success_rate"))),
            _num(human_duration(r.get("p50_duration_s"))),
            _num(human_duration(r.get("p95_duration_s"))),
            _num(_cost(r.get("cost_usd"))),
        ]
        for r in rows
    ]
    return _table(headers, cells, table_id=table_id)


def _failures_table(report: Report, links: Links) -> str:
    failed = sum(f["jobs"] for f in report.failures) or 1
    cells = [
        [
            _num(str(rank)),
            Cell(f'<span class="reason">{_esc(f["reason"])}</span>', "text"),
            Cell(f'<span class="count">{_esc(_count(f["jobs"]))}</span>'),
            _num(f"{f['jobs'] / failed:.0%}"),
            Cell(" ".join(links.job(j) for j in f["examples"] or []), "free"),
        ]
        for rank, f in enumerate(report.failures, 1)
    ]
    headers = [
        ("#", "num"),
        ("Reason", "text"),
        ("Jobs", "num"),
        ("Share", "num"),
        ("Examples (latest first)", "free"),
    ]
    return _table(headers, cells, table_id="failures-table")


def _jobs_table(report: Report, links: Links, tz: tzinfo | None) -> str:
    headers = [
        ("Job", "text"),
        ("Status", "text"),
        ("Agent", "free"),
        ("Session", "free"),
        ("Started", "time"),
        ("Ended", "time"),
        ("Duration", "num"),
        ("First event after", "num"),
        ("Events", "num"),
        ("Longest silence", "num"),
        ("Permission requests", "num"),
        ("Rejected", "free"),
        ("Error", "free"),
        ("Cost", "num"),
    ]
    cells = [
        [
            Cell(links.job(j["job_id"]), "text"),
            Cell(f'<span class="status {_esc(j["status"])}">{_esc(j["status"])}</span>', "text"),
            _txt(_text(j.get("agent")), "free"),
            _txt(_text(j.get("session")), "free"),
            _time_cell(j.get("registered_at"), tz),
            _time_cell(j.get("ended_at"), tz),
            _num(human_duration(j.get("duration_s"))),
            _num(human_duration(j.get("time_to_first_event_s"))),
            _num(_count(j.get("events"))),
            _num(human_duration(j.get("longest_silence_s"))),
            _num(_count(j.get("permission_requests"))),
            _txt(_reasons(j.get("rejected_by_reason")), "free"),
            _txt(_text(j.get("error")), "free"),
            _num(_cost(j.get("cost_usd"))),
        ]
        for j in report.jobs
    ]
    return _table(headers, cells, table_id="jobs-table")


def _days_table(report: Report) -> str:
    headers = [
        ("Day (UTC)", "text"),
        ("Submitted", "num"),
        ("Completed", "num"),
        ("Failed", "num"),
        ("Cost", "num"),
    ]
    cells = [
        [
            _txt(_text(d.get("day"))),
            _num(_count(d.get("submitted"))),
            _num(_count(d.get("completed"))),
            _num(_count(d.get("failed"))),
            _num(_cost(d.get("cost_usd"))),
        ]
        for d in report.days
    ]
    return _table(headers, cells, table_id="days-table")


def _resources_table(report: Report) -> str:
    headers = [
        ("Type", "text"),
        ("Resource", "free"),
        ("Grants", "num"),
        ("Average wait", "num"),
        ("Longest wait", "num"),
        ("Holds", "num"),
        ("Average hold", "num"),
        ("Longest hold", "num"),
        ("Broken", "num"),
    ]
    cells = [
        [
            _txt(r["type"]),
            _txt(_text(r.get("resource")), "free"),
            _num(_count(r.get("grants"))),
            _num(human_duration(r.get("avg_wait_s"))),
            _num(human_duration(r.get("max_wait_s"))),
            _num(_count(r.get("holds"))),
            _num(human_duration(r.get("avg_hold_s"))),
            _num(human_duration(r.get("max_hold_s"))),
            _num(_count(r.get("broken"))),
        ]
        for r in report.resources
    ]
    return _table(headers, cells, table_id="resources-table")


STYLE = """
*, *::before, *::after { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { font-family: system-ui, sans-serif; margin: 0; padding: 1rem 1.5rem 2rem; color: #222;
       line-height: 1.4; }
h1 { margin: 0 0 0.25rem; font-size: 1.6rem; }
h2 { margin: 1.5rem 0 0.25rem; font-size: 1.2rem; }
p { margin: 0.25rem 0; }
.meta { color: #555; }
a { color: #1f5fa8; }
.wide { width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
#jobs-table { width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.6em; vertical-align: top; }
th:not(:first-child), td:not(:first-child) { padding-left: 1.2em; }
#jobs-table th, #jobs-table td { padding: 0.3em 0.45em; }
th { text-align: left; font-weight: 600; background: #f3f4f6; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { white-space: nowrap; }
td.free { overflow-wrap: break-word; }
td.time span { white-space: nowrap; }
td.time { font-variant-numeric: tabular-nums; }
#failures-table td.free a { margin-right: 0.5em; }
.status.error { color: #b02a30; font-weight: 600; }
.status.cancelled { color: #6c4fa3; }
.charts { display: grid; gap: 1rem; margin: 1rem 0;
          grid-template-columns: repeat(auto-fit, minmax(min(100%, 22rem), 1fr)); }
.chart { margin: 0; min-width: 0; }
.chart svg { display: block; width: 100%; height: auto; }
@media screen and (max-width: 1200px) {
  body { padding: 0.75rem; }
  table { font-size: 0.85rem; }
  th, td { padding: 0.25em 0.4em; }
  /* too narrow for a column per figure: each job becomes a card of labelled figures */
  #jobs-table, #jobs-table tbody { display: block; }
  #jobs-table thead { display: none; }
  #jobs-table tr { display: grid; gap: 0.15rem 0.8rem; padding: 0.5rem 0;
                   grid-template-columns: repeat(auto-fill, minmax(9rem, 1fr));
                   border-bottom: 1px solid #ccc; }
  #jobs-table td { border: 0; padding: 0; text-align: left; min-width: 0;
                  overflow-wrap: anywhere; }
  #jobs-table td::before { content: attr(data-label); display: block; font-size: 0.72rem;
                           color: #666; }
}
@media print {
  @page { margin: 12mm; }
  body { padding: 0; font-size: 9pt; color: #000; }
  a { color: inherit; text-decoration: none; }
  th { background: none; }
  .wide { overflow: visible; }
  table { font-size: 7pt; }
  th, td, #jobs-table th, #jobs-table td { padding: 0.2em 0.25em; }
  td.num, td.time span { white-space: normal; }
  td.free { overflow-wrap: anywhere; }
  thead { display: table-header-group; }
  tr, .chart { break-inside: avoid; }
  h2 { break-after: avoid; }
  .charts { grid-template-columns: repeat(3, 1fr); gap: 0.5rem; }
}
"""


def to_html(
    report: Report,
    *,
    logs: str | None = None,
    generated_at: datetime | None = None,
    tz: tzinfo | None = None,
) -> str:
    """The page. `logs` (a folder or URI) makes each job id a link to its logs folder; times
    are shown in `tz` (default: this machine's zone), which the page names."""
    generated = _local(generated_at or datetime.now(UTC), tz)
    links = Links(logs)
    drawn = charts(report)
    span = coverage(report)
    sections = "".join(
        f'<figure class="chart" id="chart-{name}">{svg}</figure>' for name, svg in drawn.items()
    )
    if span.start:
        covered = (
            f'<span id="time-range">Covers <time datetime="{_esc(span.start)}">'
            f"{_esc(page_time(span.start, tz, seconds=False))}</time> to "
            f'<time datetime="{_esc(span.end)}">{_esc(page_time(span.end, tz, seconds=False))}'
            f"</time> ({_esc(human_duration(span.span_s))})</span>"
        )
    else:
        covered = '<span id="time-range">Covers no jobs</span>'
    logs_line = (
        f' · logs in <a href="{_esc(links.base)}/">{_esc(logs)}</a>' if links.base and logs else ""
    )
    if report.failures:
        failures = _failures_table(report, links)
    else:
        failures = '<p id="no-failures">No job failed.</p>'
    agents = _group_table(report.agents, "agent", "agents-table")
    shared = sessions_shared(report)
    sessions = (
        _group_table(shared, "session", "sessions-table")
        if shared
        else '<p id="no-shared-sessions">Every session hosted a single job.</p>'
    )
    resources = f"<h2>Locks and claims</h2>{_resources_table(report)}" if report.resources else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>delegate report</title>
<style>{STYLE}</style></head><body>
<header>
<h1>delegate report</h1>
<p class="meta">{covered} · <span id="generated-at">generated <time
datetime="{_esc(generated.isoformat())}">{_esc(generated.strftime("%Y-%m-%d %H:%M"))}</time></span>
· times in {_esc(_zone(generated))}{logs_line}</p>
<p id="totals">{_esc(_summary(report))}</p>
</header>
<main>
<section id="failures"><h2>Failures by reason</h2>{failures}</section>
<section class="charts">{sections}</section>
<section id="agents"><h2>Per agent</h2>{agents}</section>
<section id="sessions"><h2>Sessions that hosted more than one job</h2>{sessions}</section>
<section id="days"><h2>Per day (UTC)</h2>{_days_table(report)}</section>
<section id="jobs"><h2>Jobs</h2>{_jobs_table(report, links, tz)}</section>
{resources}
</main>
</body></html>
"""


def write(
    report: Report,
    frames: dict[str, Any] | None,
    fmt: str,
    out: Path,
    *,
    logs: str | None = None,
    generated_at: datetime | None = None,
    tz: tzinfo | None = None,
) -> list[Path]:
    """Write `report` as `fmt` into `out`; return the paths written. `logs` is the folder (or
    URI) the report read, for the page's links to each job's logs."""
    out.mkdir(parents=True, exist_ok=True)
    generated_at = generated_at or datetime.now(UTC)
    if fmt == "json":
        path = out / "report.json"
        data = {**to_json(report), "generated_at": generated_at.astimezone(UTC).isoformat()}
        path.write_text(json.dumps(data, indent=2, sort_keys=True))
        return [path]
    if fmt == "html":
        path = out / "report.html"
        page = to_html(report, logs=logs, generated_at=generated_at, tz=tz)
        path.write_text(page, encoding="utf-8")
        return [path]
    if fmt == "parquet":
        assert frames is not None
        written = []
        for name, frame in frames.items():
            path = out / f"{name}.parquet"
            frame.write.mode("overwrite").parquet(str(path))
            written.append(path)
        return written
    raise ValueError(f"unknown format {fmt!r}")
