"""The report as one HTML page: a summary, failures by reason, charts, and a table per view.

The page embeds its charts (`charts`) and its style sheet (`page.css`), so it needs no network
to open; it takes the window's width, narrow or wide, and prints cleanly. Times are shown in one
zone, which the page names.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime, tzinfo
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from delegate.core.outcome import outcome_words
from delegate.core.timefmt import human_duration
from delegate.report.charts import charts
from delegate.report.common import (
    Coverage,
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
    page_time,
    retried_agents,
    retries_line,
    sessions_shared,
    summary,
    to_local,
    top_lists,
    usage_line,
)

STYLE_SHEET = Path(__file__).with_name("page.css")  # package data (pyproject package-data)


@cache
def style() -> str:
    return STYLE_SHEET.read_text(encoding="utf-8")


class Cell(NamedTuple):
    html: str  # already escaped
    kind: str = "num"  # num (right, no wrap), text (left), free (left, wraps anywhere)


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _num(text: str) -> Cell:
    return Cell(_esc(text))


def _txt(text: str, kind: str = "text") -> Cell:
    return Cell(_esc(text), kind)


def _table(
    headers: Sequence[tuple[str, str]], rows: Sequence[Sequence[Cell]], *, table_id: str
) -> str:
    """A table whose cells carry their column's header (`data-label`) for the narrow layout."""
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


# --- the tables ------------------------------------------------------------------------------


def _groups_section(report: Report) -> str:
    """Per queue group (`--group`), when any job had one."""
    if not report.groups:
        return ""
    table = _group_table(report.groups, "group", "groups-table")
    return f'<section id="groups"><h2>Per queue group</h2>{table}</section>'


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
            _txt(as_text(r.get(key)), "free"),
            _num(as_count(r.get("jobs"))),
            _num(as_count(r.get("completed"))),
            _num(as_count(r.get("error"))),
            _num(as_count(r.get("cancelled"))),
            _num(as_rate(r.get("success_rate"))),
            _num(human_duration(r.get("p50_duration_s"))),
            _num(human_duration(r.get("p95_duration_s"))),
            _num(as_cost(r.get("cost_usd"))),
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
            Cell(f'<span class="count">{_esc(as_count(f["jobs"]))}</span>'),
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


JOB_HEADERS = [
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


def _job_row(j: dict[str, Any], links: Links, tz: tzinfo | None) -> list[Cell]:
    """One job's cells, in JOB_HEADERS' order."""
    return [
        Cell(links.job(j["job_id"]), "text"),
        _status_cell(j),
        _txt(as_text(j.get("agent")), "free"),
        _txt(as_text(j.get("session")), "free"),
        _time_cell(j.get("registered_at"), tz),
        _time_cell(j.get("ended_at"), tz),
        _num(human_duration(j.get("duration_s"))),
        _num(human_duration(j.get("time_to_first_event_s"))),
        _num(as_count(j.get("events"))),
        _num(human_duration(j.get("longest_silence_s"))),
        _num(as_count(j.get("permission_requests"))),
        _txt(as_reasons(j.get("rejected_by_reason")), "free"),
        _txt(as_text(j.get("error")), "free"),
        _num(as_cost(j.get("cost_usd"))),
    ]


def _status_cell(j: dict[str, Any]) -> Cell:
    """`completed, 2 tool calls denied` for a completion with denials: not a plain success."""
    said = outcome_words(j["status"], j.get("denied_tools"))
    kind = "denied" if said != j["status"] else j["status"]
    return Cell(f'<span class="status {_esc(kind)}">{_esc(said)}</span>', "text")


def _jobs_table(report: Report, links: Links, tz: tzinfo | None) -> str:
    cells = [_job_row(j, links, tz) for j in report.jobs]
    return _table(JOB_HEADERS, cells, table_id="jobs-table")


def _retries(report: Report) -> str:
    """Attempts and retried jobs in a sentence, then per agent when any job was retried."""
    line = f'<p id="retries-line">{_esc(retries_line(report.totals))}.</p>'
    rows = retried_agents(report)
    if not rows:
        return line
    headers = [
        ("Agent", "free"),
        ("Attempts", "num"),
        ("Jobs retried", "num"),
        ("Succeeded after retrying", "num"),
        ("Still failed", "num"),
    ]
    cells = [
        [
            _txt(as_text(r.get("agent")), "free"),
            _num(as_count(r.get("attempts"))),
            _num(as_count(r.get("retried"))),
            _num(as_count(r.get("retried_then_succeeded"))),
            _num(as_count(r.get("retried_still_failed"))),
        ]
        for r in rows
    ]
    return line + _table(headers, cells, table_id="retries-table")


def _denials(report: Report) -> str:
    """The tool calls agent CLIs denied in a sentence, then per tool when there were any."""
    line = f'<p id="denied-line">{_esc(denials_line(report.totals, report.denied))}.</p>'
    if not report.denied:
        return line
    headers = [("Tool", "free"), ("Calls denied", "num"), ("Jobs", "num")]
    cells = [
        [
            _txt(as_text(d.get("tool")), "free"),
            _num(as_count(d.get("calls"))),
            _num(as_count(d.get("jobs"))),
        ]
        for d in report.denied
    ]
    return line + _table(headers, cells, table_id="denied-table")


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
            _txt(as_text(d.get("day"))),
            _num(as_count(d.get("submitted"))),
            _num(as_count(d.get("completed"))),
            _num(as_count(d.get("failed"))),
            _num(as_cost(d.get("cost_usd"))),
        ]
        for d in report.days
    ]
    return _table(headers, cells, table_id="days-table")


USAGE_HEADERS = [
    ("Jobs", "num"),
    ("With limits", "num"),
    ("Peak memory", "num"),
    ("CPU", "num"),
    ("Behind a proxy", "num"),
    ("Connections", "num"),
    ("Refused", "num"),
    ("Sent", "num"),
    ("Received", "num"),
]


def _usage_cells(r: dict[str, Any]) -> list[Cell]:
    """One row's cells in USAGE_HEADERS' order."""
    return [
        _num(as_count(r.get("jobs"))),
        _num(as_count(r.get("limited_jobs"))),
        _num(as_bytes(r.get("peak_memory_bytes"))),
        _num(as_cpu(r.get("cpu_s"))),
        _num(as_count(r.get("sandboxed_jobs"))),
        _num(as_count(r.get("egress_connections"))),
        _num(as_count(r.get("egress_refused"))),
        _num(as_bytes(r.get("egress_sent"))),
        _num(as_bytes(r.get("egress_received"))),
    ]


def _top_table(measure: str, rows: list[dict[str, Any]], links: Links) -> str:
    headers = [
        ("#", "num"),
        ("Job", "text"),
        ("Agent", "free"),
        ("Outcome", "free"),
        ("Duration", "num"),
        ("Peak memory", "num"),
        ("CPU", "num"),
    ]
    cells = [
        [
            _num(str(r.get("rank"))),
            Cell(links.job(r["job_id"]), "text"),
            _txt(as_text(r.get("agent")), "free"),
            _txt(as_outcome(r), "free"),
            _num(human_duration(r.get("duration_s"))),
            _num(as_bytes(r.get("peak_memory_bytes"))),
            _num(as_cpu(r.get("cpu_s"))),
        ]
        for r in rows
    ]
    return _table(headers, cells, table_id=f"top-{measure.replace('_', '-')}-table")


def _hosts_table(report: Report) -> str:
    headers = [
        ("Host", "free"),
        ("Jobs", "num"),
        ("Connections", "num"),
        ("Refused", "num"),
        ("Sent", "num"),
        ("Received", "num"),
    ]
    cells = [
        [
            _txt(as_host(r), "free"),
            _num(as_count(r.get("jobs"))),
            _num(as_count(r.get("connections"))),
            _num(as_count(r.get("refused"))),
            _num(as_bytes(r.get("sent"))),
            _num(as_bytes(r.get("received"))),
        ]
        for r in report.hosts
    ]
    return _table(headers, cells, table_id="hosts-table")


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _usage(report: Report, links: Links) -> str:
    """Memory, CPU and egress in a sentence, per agent and per day when jobs had figures, the
    slowest and hungriest jobs, and the hosts reached through an egress proxy."""
    parts = [f'<p id="usage-line">{_esc(_sentence(usage_line(report.totals)))}.</p>']
    for title, key, rows in (
        ("Per agent", "agent", report.usage_agents),
        ("Per day (UTC)", "day", report.usage_days),
    ):
        if rows:
            headers = [(key.capitalize(), "free" if key == "agent" else "text"), *USAGE_HEADERS]
            cells = [[_txt(as_text(r.get(key)), "free"), *_usage_cells(r)] for r in rows]
            table = _table(headers, cells, table_id=f"usage-{key}s-table")
            parts.append(f"<h3>{_esc(title)}</h3>{table}")
    for measure, title, rows in top_lists(report):
        parts.append(f"<h3>{_esc(_sentence(title))}</h3>{_top_table(measure, rows, links)}")
    if report.hosts:
        parts.append(f"<h3>Hosts through an egress proxy</h3>{_hosts_table(report)}")
    return "".join(parts)


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
            _txt(as_text(r.get("resource")), "free"),
            _num(as_count(r.get("grants"))),
            _num(human_duration(r.get("avg_wait_s"))),
            _num(human_duration(r.get("max_wait_s"))),
            _num(as_count(r.get("holds"))),
            _num(human_duration(r.get("avg_hold_s"))),
            _num(human_duration(r.get("max_hold_s"))),
            _num(as_count(r.get("broken"))),
        ]
        for r in report.resources
    ]
    return _table(headers, cells, table_id="resources-table")


# --- the page --------------------------------------------------------------------------------


def _zone(moment: datetime) -> str:
    """`CET, UTC+01:00`: the zone a page's times are in."""
    offset = moment.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    name = moment.tzname() or ""
    utc = f"UTC{sign}{hours:02d}:{mins:02d}"
    return f"{name}, {utc}" if name and name != "UTC" else utc


def _time_range(span: Coverage, tz: tzinfo | None) -> str:
    if not span.start:
        return '<span id="time-range">Covers no jobs</span>'
    return (
        f'<span id="time-range">Covers <time datetime="{_esc(span.start)}">'
        f"{_esc(page_time(span.start, tz, seconds=False))}</time> to "
        f'<time datetime="{_esc(span.end)}">{_esc(page_time(span.end, tz, seconds=False))}'
        f"</time> ({_esc(human_duration(span.span_s))})</span>"
    )


def _header(
    report: Report, links: Links, logs: str | None, generated: datetime, tz: tzinfo | None
) -> str:
    """The title, the time range, when the page was made and in which zone, and the totals."""
    logs_line = (
        f' · logs in <a href="{_esc(links.base)}/">{_esc(logs)}</a>' if links.base and logs else ""
    )
    return f"""<header>
<h1>delegate report</h1>
<p class="meta">{_time_range(coverage(report), tz)} · <span id="generated-at">generated <time
datetime="{_esc(generated.isoformat())}">{_esc(generated.strftime("%Y-%m-%d %H:%M"))}</time></span>
· times in {_esc(_zone(generated))}{logs_line}</p>
<p id="totals">{_esc(summary(report))}</p>
</header>"""


def _sections(report: Report, links: Links, tz: tzinfo | None) -> str:
    """The page's sections, one a line; the last (locks and claims) only when there are any."""
    drawn = "".join(
        f'<figure class="chart" id="chart-{name}">{svg}</figure>'
        for name, svg in charts(report).items()
    )
    if report.failures:
        failures = _failures_table(report, links)
    else:
        failures = '<p id="no-failures">No job failed.</p>'
    shared = sessions_shared(report)
    sessions = (
        _group_table(shared, "session", "sessions-table")
        if shared
        else '<p id="no-shared-sessions">Every session hosted a single job.</p>'
    )
    resources = f"<h2>Locks and claims</h2>{_resources_table(report)}" if report.resources else ""
    return "\n".join(
        [
            f'<section id="failures"><h2>Failures by reason</h2>{failures}</section>',
            f'<section id="retries"><h2>Attempts and retries</h2>{_retries(report)}</section>',
            f'<section id="denied"><h2>Denied tool calls</h2>{_denials(report)}</section>',
            f'<section class="charts">{drawn}</section>',
            '<section id="agents"><h2>Per agent</h2>'
            f"{_group_table(report.agents, 'agent', 'agents-table')}</section>",
            _groups_section(report),
            '<section id="sessions"><h2>Sessions that hosted more than one job</h2>'
            f"{sessions}</section>",
            f'<section id="days"><h2>Per day (UTC)</h2>{_days_table(report)}</section>',
            '<section id="usage"><h2>Memory, CPU and network</h2>'
            f"{_usage(report, links)}</section>",
            f'<section id="jobs"><h2>Jobs</h2>{_jobs_table(report, links, tz)}</section>',
            resources,
        ]
    )


def to_html(
    report: Report,
    *,
    logs: str | None = None,
    generated_at: datetime | None = None,
    tz: tzinfo | None = None,
) -> str:
    """The page. `logs` (a folder or URI) makes each job id a link to its logs folder; times
    are shown in `tz` (default: this machine's zone), which the page names."""
    generated = to_local(generated_at or datetime.now(UTC), tz)
    links = Links(logs)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>delegate report</title>
<style>
{style()}</style></head><body>
{_header(report, links, logs, generated, tz)}
<main>
{_sections(report, links, tz)}
</main>
</body></html>
"""
