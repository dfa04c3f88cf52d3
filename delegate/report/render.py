"""Writing a report: a terminal table, JSON, Parquet, or an HTML page with charts.

The HTML page embeds its charts as SVG drawn by matplotlib, so it needs no network to open.
"""

from __future__ import annotations

import html
import io
import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

from .figures import Report


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def to_json(report: Report) -> dict[str, Any]:
    return _plain(report._asdict())  # type: ignore[no-any-return]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}:{v}" for k, v in sorted(value.items())) or "-"
    return str(_plain(value))


GROUP_COLUMNS = [
    "jobs",
    "completed",
    "error",
    "cancelled",
    "success_rate",
    "p50_duration_s",
    "p95_duration_s",
    "cost_usd",
]


def _group_rows(rows: list[dict[str, Any]], key: str) -> list[list[str]]:
    return [[_fmt(r.get(c)) for c in (key, *GROUP_COLUMNS)] for r in rows]


DAY_COLUMNS = ["day", "submitted", "completed", "failed", "cost_usd"]
GROUP_HEADER = ["JOBS", "COMPLETED", "ERROR", "CANCELLED", "SUCCESS", "P50 S", "P95 S", "COST $"]
JOB_COLUMNS = [
    "job_id",
    "status",
    "agent",
    "duration_s",
    "time_to_first_event_s",
    "events",
    "longest_silence_s",
    "permission_requests",
    "rejected_by_reason",
    "cost_usd",
]


RESOURCE_COLUMNS = [
    "type",
    "resource",
    "grants",
    "avg_wait_s",
    "max_wait_s",
    "holds",
    "avg_hold_s",
    "max_hold_s",
    "broken",
]


def print_table(report: Report, *, jobs_limit: int = 20) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = report.totals
    console.print(
        f"[bold]{t['jobs']} jobs[/], {t['events']} events, {t['permission_requests']} permission"
        f" requests, {t['rejected']} rejected messages, {t['malformed_lines']} malformed lines"
    )
    for title, key, rows in (
        ("per agent", "AGENT", report.agents),
        ("per session", "SESSION", report.sessions),
    ):
        table = Table(title=title, box=None, header_style="bold")
        for column in [key, *GROUP_HEADER]:
            table.add_column(column)
        for row in _group_rows(rows, key.lower()):
            table.add_row(*row)
        console.print(table)
    days = Table(title="per day (UTC)", box=None, header_style="bold")
    for column in ("DAY", "SUBMITTED", "COMPLETED", "FAILED", "COST $"):
        days.add_column(column)
    for day in report.days:
        days.add_row(*(_fmt(day.get(c)) for c in DAY_COLUMNS))
    console.print(days)
    jobs = Table(
        title=f"latest {min(jobs_limit, len(report.jobs))} jobs", box=None, header_style="bold"
    )
    for column in JOB_COLUMNS:
        jobs.add_column(column.upper())
    for job in report.jobs[-jobs_limit:]:
        jobs.add_row(*(_fmt(job.get(c)) for c in JOB_COLUMNS))
    console.print(jobs)
    if report.resources:
        resources = Table(title="locks and claims", box=None, header_style="bold")
        for column in RESOURCE_COLUMNS:
            resources.add_column(column.upper())
        for held in report.resources:
            resources.add_row(*(_fmt(held.get(c)) for c in RESOURCE_COLUMNS))
        console.print(resources)


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.find("<svg") :]  # drop the XML prolog: it is inline in HTML


def charts(report: Report) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out = {}
    durations = [j["duration_s"] for j in report.jobs if j["duration_s"] is not None]
    fig, ax = plt.subplots(figsize=(7, 3))
    ax.hist(durations or [0], bins=30, color="#4c72b0")
    ax.set_xlabel("duration (s)")
    ax.set_ylabel("jobs")
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
    ax.set_title("Outcomes per day (UTC)")
    ax.legend()
    out["outcomes"] = _svg(fig)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3))
    agents = [str(a["agent"]) for a in report.agents]
    bottom = [0] * len(agents)
    for key, colour in (("completed", "#55a868"), ("error", "#c44e52"), ("cancelled", "#8172b2")):
        values = [a[key] for a in report.agents]
        ax.bar(agents, values, bottom=bottom, label=key, color=colour)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_title("Outcomes per agent")
    ax.legend()
    out["agents"] = _svg(fig)
    plt.close(fig)
    return out


def _html_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def to_html(report: Report) -> str:
    drawn = charts(report)
    t = report.totals
    sections = "".join(
        f'<section class="chart" id="chart-{name}">{svg}</section>' for name, svg in drawn.items()
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>delegate report</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 0.25em 0.8em; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; }}
.chart svg {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>delegate report</h1>
<p id="totals">{t["jobs"]} jobs, {t["events"]} events, {t["permission_requests"]} permission
requests, {t["rejected"]} rejected messages, {t["malformed_lines"]} malformed lines</p>
{sections}
<h2>Per agent</h2>{_html_table(report.agents, ["agent", *GROUP_COLUMNS])}
<h2>Per session</h2>{_html_table(report.sessions, ["session", *GROUP_COLUMNS])}
<h2>Per day (UTC)</h2>{_html_table(report.days, DAY_COLUMNS)}
<h2>Jobs</h2>{_html_table(report.jobs, JOB_COLUMNS)}
<h2>Locks and claims</h2>{_html_table(report.resources, RESOURCE_COLUMNS)}
</body></html>
"""


def write(report: Report, frames: dict[str, Any] | None, fmt: str, out: Path) -> list[Path]:
    """Write `report` as `fmt` into `out`; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        path = out / "report.json"
        path.write_text(json.dumps(to_json(report), indent=2, sort_keys=True))
        return [path]
    if fmt == "html":
        path = out / "report.html"
        path.write_text(to_html(report), encoding="utf-8")
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
