"""What the terminal report and the HTML page share: figures as people read them, the time
range covered, the one-line summary, and the report as plain JSON.

What people read says durations in words (`4m 12s`, `delegate.core.timefmt`), times in local
time, and `-` for what is missing. JSON keeps the figures as computed (seconds, UTC).
"""

from __future__ import annotations

from datetime import date, datetime, tzinfo
from typing import Any, NamedTuple

from delegate.core.limits import human_bytes
from delegate.core.timefmt import RECORD_FORMAT, human_duration, parse_iso, seconds_between


class Report(NamedTuple):
    """The report's tables as plain rows (report.figures computes them)."""

    jobs: list[dict[str, Any]]
    agents: list[dict[str, Any]]
    sessions: list[dict[str, Any]]
    days: list[dict[str, Any]]
    totals: dict[str, Any]
    resources: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated
    failures: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated
    groups: list[dict[str, Any]] = []  # noqa: RUF012 - per queue group (`--group`), as agents
    denied: list[dict[str, Any]] = []  # noqa: RUF012 - per tool its agent CLIs denied (figures)
    # memory, CPU time and egress (report/usage): per agent and per day with figures, the top
    # jobs by duration, peak memory and CPU seconds, and the hosts reached through a proxy
    usage_agents: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated
    usage_days: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated
    top_jobs: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated
    hosts: list[dict[str, Any]] = []  # noqa: RUF012 - a NamedTuple default, never mutated


def plain(value: Any) -> Any:
    """`value` with its datetimes and dates as text, for JSON."""
    if isinstance(value, datetime):
        return value.strftime(RECORD_FORMAT)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def to_json(report: Report) -> dict[str, Any]:
    return plain(report._asdict())  # type: ignore[no-any-return]


# --- cells as people read them -------------------------------------------------------------


def as_count(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def as_rate(value: Any) -> str:
    return "-" if value is None else f"{value:.0%}"


def as_cost(value: Any) -> str:
    if value is None:
        return "-"
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def as_reasons(value: Any) -> str:
    if not value:
        return "-"
    return ", ".join(f"{reason} {count}" for reason, count in sorted(value.items()))


def as_bytes(value: Any) -> str:
    return "-" if value is None else human_bytes(value)


def as_cpu(value: Any) -> str:
    """CPU seconds: `0.4 s`, `42.0 s`, then as durations (`3m 20s`)."""
    if value is None:
        return "-"
    return f"{value:.1f} s" if value < 60 else human_duration(value)


def as_host(row: dict[str, Any]) -> str:
    """`api.anthropic.com:443`; a request through a proxy that named no host (`?`) says so."""
    if row.get("host") == "?":
        return "(no host named)"
    return f"{row.get('host')}:{row.get('port')}"


def as_outcome(job: dict[str, Any]) -> str:
    """`completed`, or `error (idle_timeout)`: a job's status with a failure's reason."""
    reason = job.get("failure_reason")
    return f"{job['status']} ({reason})" if reason else str(job["status"])


def as_text(value: Any) -> str:
    return "-" if value is None or value == "" else str(plain(value))


def to_local(moment: datetime, tz: tzinfo | None) -> datetime:
    """`moment` in `tz`, or in this machine's zone when `tz` is None."""
    return moment.astimezone(tz) if tz is not None else moment.astimezone()


def page_time(text: Any, tz: tzinfo | None = None, *, seconds: bool = True) -> str:
    """An ISO time as the HTML page shows it, in `tz` (default: this machine's zone):
    `2026-11-22 14:02:07` (or without seconds); `-` when missing."""
    moment = parse_iso(text)
    if moment is None:
        return "-"
    return to_local(moment, tz).strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M")


# --- what the report covers ------------------------------------------------------------------


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


def summary(report: Report) -> str:
    """`12 jobs (9 completed, 2 failed, 1 cancelled); 240 events, ...`: the report in a line."""
    t = report.totals
    return (
        f"{_plural(t['jobs'], 'job')} ({_outcomes(report)}); {_plural(t['events'], 'event')},"
        f" {_plural(t['permission_requests'], 'permission request')},"
        f" {_plural(t['rejected'], 'rejected message')},"
        f" {_plural(t['malformed_lines'], 'malformed line')}"
    )


def retries_line(figures: dict[str, Any]) -> str:
    """`9 attempts; 2 jobs retried: 1 succeeded after retrying, 1 still failed` (overall or
    one agent's figures, report/retries.py)."""
    attempts = _plural(figures.get("attempts") or 0, "attempt")
    retried = figures.get("retried") or 0
    if not retried:
        return f"{attempts}; no job was retried"
    succeeded = figures.get("retried_then_succeeded") or 0
    failed = figures.get("retried_still_failed") or 0
    parts = [f"{succeeded:,} succeeded after retrying", f"{failed:,} still failed"]
    if retried - succeeded - failed:
        parts.append(f"{retried - succeeded - failed:,} cancelled or not ended")
    return f"{attempts}; {_plural(retried, 'job')} retried: {', '.join(parts)}"


def denials_line(figures: dict[str, Any], per_tool: list[dict[str, Any]]) -> str:
    """`2 jobs completed with denied tool calls; 3 calls denied: Bash 2, WebFetch 1`."""
    calls = figures.get("denied_tool_calls") or 0
    if not calls:
        return "no tool call was denied"
    jobs = _plural(figures.get("completed_with_denials") or 0, "job")
    tools = ", ".join(f"{t['tool']} {t['calls']:,}" for t in per_tool)
    return f"{jobs} completed with denied tool calls; {_plural(calls, 'call')} denied: {tools}"


def usage_line(figures: dict[str, Any]) -> str:
    """`3 of 7 jobs with limits: peak memory 1.2 GiB, CPU 3m 20s; 2 jobs behind an egress
    proxy: 14 connections, 3 refused, 2 KiB sent, 20 MiB received` (report/usage's totals)."""
    limited, sandboxed = figures.get("limited_jobs") or 0, figures.get("sandboxed_jobs") or 0
    if not limited and not sandboxed:
        return "no job has memory, CPU or egress figures"
    parts = []
    if limited:
        parts.append(
            f"{limited:,} of {_plural(figures.get('jobs') or 0, 'job')} with limits:"
            f" peak memory {as_bytes(figures.get('peak_memory_bytes'))},"
            f" CPU {as_cpu(figures.get('cpu_s'))}"
        )
    if sandboxed:
        parts.append(
            f"{_plural(sandboxed, 'job')} behind an egress proxy:"
            f" {_plural(figures.get('egress_connections') or 0, 'connection')},"
            f" {figures.get('egress_refused') or 0:,} refused,"
            f" {as_bytes(figures.get('egress_sent'))} sent,"
            f" {as_bytes(figures.get('egress_received'))} received"
        )
    return "; ".join(parts)


def top_lists(report: Report) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The top lists that have jobs: (measure, title, rows), in report/usage's MEASURES order."""
    titles = {
        "duration_s": "slowest jobs",
        "peak_memory_bytes": "most memory",
        "cpu_s": "most CPU time",
    }
    lists = []
    for measure, title in titles.items():
        rows = [r for r in report.top_jobs if r.get("by") == measure]
        if rows:
            lists.append((measure, title, rows))
    return lists


def retried_agents(report: Report) -> list[dict[str, Any]]:
    """The agents with a retried job: the others have one attempt per job."""
    return [a for a in report.agents if (a.get("retried") or 0) > 0]
