"""What `delegate top` shows, as plain text: the columns, each row's cells, the filter, the
header's counts, and a job's detail. No textual here, so its logic is tested without a screen.

A row is the dashboard's live-table row (`runtime.dashboard.snapshot.row_dict`: `ps`'s row with
the cost, group and why a queued job waits), which `runtime.dashboard.live.LiveTable` keeps
up to date from the bus and the registry.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from delegate.adapters.audit import PUBLISHED, RECEIVED, parse_line
from delegate.core.errors import DelegateError
from delegate.core.eventlines import audit_line
from delegate.core.outcome import denied_summary, record_note, status_note
from delegate.core.retry import attempt_label
from delegate.core.timefmt import human_duration
from delegate.runtime.dashboard.snapshot import TERMINAL_STATES
from delegate.services.logs import follow_log
from delegate.services.session import peek
from delegate.services.state import State

PERMISSION_EVENT = "permission_required"
EVENT_KINDS = (PUBLISHED, RECEIVED)


class Column(NamedTuple):
    key: str  # the DataTable's column key
    label: str
    width: int | None  # None: what the screen has left


COLUMNS = (
    Column("job", "JOB", 8),
    Column("state", "STATE", 11),  # with the attempt, as `ps` shows it: `running 2/3`
    Column("agent", "AGENT", 6),
    Column("group", "GROUP", 6),
    Column("time", "TIME", 6),
    Column("cost", "COST", 6),
    Column("mem", "MEM", 4),  # a running agent's memory now, an ended one's peak
    Column("event", "EVENT / WAITS FOR", None),
)


# Below this many columns MEM is left out: at 80 the free column keeps its 20 characters
# ("ASKS: may I push?" whole), which matter more there than a figure `show` also gives.
MEMORY_FROM_WIDTH = 90


def columns(screen_width: int | None = None) -> list[Column]:
    """The columns for a screen `screen_width` wide (None: all of them)."""
    if screen_width is not None and screen_width < MEMORY_FROM_WIDTH:
        return [c for c in COLUMNS if c.key != "mem"]
    return list(COLUMNS)


def event_width(screen_width: int, shown: list[Column], padding: int = 1) -> int:
    """How wide the free column can be on a screen `screen_width` wide: what the others and
    every column's padding leave, less a scroll bar's 2."""
    fixed = sum((c.width or 0) + 2 * padding for c in shown)
    return max(12, screen_width - fixed - 2)


def needs_permission(row: dict[str, Any]) -> bool:
    """An open job whose last event asks a person for permission."""
    event = str(row.get("last_event") or "")
    return row.get("state") not in TERMINAL_STATES and event.endswith(PERMISSION_EVENT)


def elapsed(row: dict[str, Any], now: float | None = None) -> float | None:
    """The TIME column: the row's duration, plus the time since it was read for a job that is
    still going (its clock runs on between rebuilds)."""
    duration = row.get("duration_s")
    if duration is None or row.get("state") in TERMINAL_STATES:
        return duration
    as_of = row.get("as_of")
    now = time.time() if now is None else now
    return float(duration) + max(0.0, now - as_of) if as_of else float(duration)


def note(row: dict[str, Any]) -> str:
    """What core/outcome says beside the row's state, now (an API retry's countdown runs)."""
    return status_note(
        row.get("state"),
        denied_tools=row.get("denied_tools"),
        agent_retry=row.get("agent_retry"),
        not_before=row.get("not_before"),
    )


def what_happens(row: dict[str, Any]) -> str:
    """The free column: a queued attempt's resume time, else why a queued job waits; what
    it asks; the agent CLI's API retry; else the last event with its detail, then why it ended
    (a completion with denied tool calls says so first)."""
    said_now = note(row)
    if row.get("state") == "queued":
        return said_now or f"waits for {row.get('waiting_for') or 'a slot'}"
    event = str(row.get("last_event") or "")
    detail = str(row.get("last_detail") or "")
    if needs_permission(row):  # what it asks first: the column is short at 80 wide
        return f"ASKS: {detail}" if detail else "ASKS permission"
    if said_now:  # first: the column is short at 80 wide
        return said_now
    said = f"{event}: {detail}" if event and detail else event
    if row.get("state") in TERMINAL_STATES and row.get("end_reason") not in (None, "", "-"):
        said = f"{said} ({row['end_reason']})" if said else str(row["end_reason"])
    return said or "-"


def cost_text(cost: float | None) -> str:
    return "-" if cost is None else f"${cost:.2f}"


def memory_text(size: int | None) -> str:
    """Bytes in at most four characters, in units of 1024: `812K`, `41M`, `1.5G`."""
    if size is None:
        return "-"
    for unit in ("K", "M", "G", "T"):
        size_in = size / 1024
        if size_in < 1000 or unit == "T":
            return f"{size_in:.1f}{unit}" if size_in < 10 else f"{size_in:.0f}{unit}"
        size = int(size_in)
    return "-"  # (not reached: T always answers)


def cells(row: dict[str, Any], shown: list[Column], *, event_width: int) -> list[str]:
    """The row's text for each of the `shown` columns, each cut to its width."""
    values = {
        "job": row["job_id"],
        "state": " ".join(filter(None, (row.get("state") or "-", row.get("attempt")))),
        "agent": row.get("agent") or "-",
        "group": row.get("group") or "-",
        "time": human_duration(elapsed(row)),
        "cost": cost_text(row.get("cost_usd")),
        "mem": memory_text(row.get("memory_bytes")),
        "event": what_happens(row),
    }
    return [cut(values[c.key], c.width or event_width) for c in shown]


def cut(text: str, width: int) -> str:
    text = " ".join(text.split())  # one line: a detail may hold newlines
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def matches(row: dict[str, Any], needle: str) -> bool:
    """The `/` filter: every word of `needle` appears in the row's id, state, agent, group,
    session or free column (case does not matter)."""
    if not needle.strip():
        return True
    fields = ("job_id", "state", "agent", "group", "session", "last_event")
    hay = " ".join([*(str(row.get(k) or "") for k in fields), what_happens(row)]).lower()
    return all(word in hay for word in needle.lower().split())


def counts(rows: list[dict[str, Any]]) -> str:
    """The header's summary: how many run, wait, ask for permission, ended."""
    states = [r.get("state") for r in rows]
    asking = sum(1 for r in rows if needs_permission(r))
    parts = [
        f"{states.count('running')} running",
        f"{states.count('queued')} queued",
        f"{states.count('pending')} pending",
    ]
    if asking:
        parts.append(f"{asking} ASK PERMISSION")
    parts.append(f"{sum(1 for s in states if s in TERMINAL_STATES)} ended")
    return " · ".join(parts)


def with_attempts(state: State, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with each job's attempt label from its record (`2/3`; empty for a first)."""
    out = []
    for row in rows:
        try:
            label = attempt_label(state.registry.get(row["job_id"]))
        except DelegateError:
            label = ""
        out.append({**row, "attempt": label})
    return out


def _trail(state: State, job_id: str, *, events_only: bool, width: int) -> list[str]:
    """The job's audit trail as `delegate logs` prints it at a terminal (each event once)."""
    raw: list[bytes] = []
    follow_log(state, job_id, raw.append)
    lines = []
    for line in raw:
        entry = parse_line(line)
        if entry is None:
            continue
        if events_only and entry.get("kind") not in EVENT_KINDS:
            continue
        lines.append(audit_line(entry, width=width))
    return lines


def detail_lines(state: State, job_id: str, *, width: int = 80, pane_lines: int = 30) -> list[str]:
    """Enter on a job: its pane's tail (`delegate peek`) and its events."""
    job = state.registry.get(job_id)
    lines = [f"job {job_id}  {job.status.value}  {job.agent or '-'}  session {job.session or '-'}"]
    if job.error:
        lines.append(f"ended: {job.error}")
    said = record_note(job.public_dict())
    if said:
        tools = denied_summary(job.denied_tools) if job.status.terminal else ""
        lines.append(f"{said} ({tools})" if tools else said)
    lines += ["", "── pane (last lines) ──"]
    if job.host:
        lines.append(f"(the pane is on host {job.host})")
    elif not job.session:
        lines.append("(no pane)")
    else:
        try:
            lines += peek(state, job.session, lines=pane_lines) or ["(empty)"]
        except DelegateError as exc:
            lines.append(f"({exc})")
    lines += ["", "── events ──"]
    return lines + _trail(state, job_id, events_only=True, width=width)


def log_lines(state: State, job_id: str, *, width: int = 80) -> list[str]:
    """`l` on a job: its whole audit trail, as `delegate logs` prints it."""
    return _trail(state, job_id, events_only=False, width=width)
