"""What the dashboard shows, as JSON-ready dicts, built from the services the CLI uses
(`services.ps.row_for` for the table, `services.logs` for a job's trail, `services.session.peek`
for its pane, `services.remote.host_rows` for hosts, `services.worktrees.diff` for a worktree
job's changes, the approvals services for its waiting permission requests): never a second
copy of their logic."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delegate.adapters.audit import parse_line
from delegate.core.errors import DelegateError
from delegate.core.model import Job
from delegate.core.timefmt import record_timestamp
from delegate.services import ps, worktrees
from delegate.services.jobs.approvals import WaitingRequest, waiting_requests
from delegate.services.jobs.host_approvals import waiting_on_hosts
from delegate.services.logs import follow_log
from delegate.services.remote import host_rows
from delegate.services.session import peek
from delegate.services.state import State

# The record fields a page may show: never `auth_token` (it signs the job's events), nor the
# bus settings or the launch argv, which are the toolkit's business.
JOB_FIELDS = (
    "job_id",
    "agent",
    "command",
    "workdir",
    "session",
    "created_at",
    "updated_at",
    "started_at",
    "last_event_at",
    "last_seq",
    "error",
    "cost_usd",
    "tokens_in",
    "tokens_out",
    "host",
    "conversation_id",
    "wall_timeout_s",
    "idle_timeout_s",
    "attempt",
    "retry_of",
    "retried_by",
    "not_before",
    "denied_tools",
    "agent_retry",
)
TERMINAL_STATES = frozenset(
    {"completed", "error", "failed", "cancelled"}
)  # "failed": rows as older code named them
# How much of a worktree job's diff a page is sent: a job that rewrote a vendored tree would
# otherwise make a response (and a <pre>) of many megabytes. `delegate diff` shows it all.
DIFF_LIMIT = 200_000


def row_dict(
    row: ps.Row, cost_usd: float | None, memory_bytes: int | None = None
) -> dict[str, Any]:
    """One line of the jobs table: `ps`'s row with the cost from the job's record and its
    agent's memory (a running one's now, an ended one's peak).

    `note` is what core/outcome says beside the state when the row was built; the page and
    `top` say it again from `denied_tools`, `agent_retry` and `not_before` as their clock runs
    (an API retry's countdown, a resume in the reader's own time zone)."""
    return {
        "job_id": row.job_id,
        "state": row.job_state,
        "agent": row.agent,
        "session": row.session,
        "tmux": row.tmux,
        "age_s": row.age_s,
        "duration_s": row.duration_s,
        "last_event": row.last_event,
        "last_detail": row.last_detail,
        "queue_position": row.queue_position,
        "host": row.host,
        "end_reason": row.end_reason,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "cost_usd": cost_usd,
        "memory_bytes": memory_bytes,
        "group": row.group,
        "waiting_for": row.waiting_for,
        "denied_tools": row.denied_tools,
        "agent_retry": row.agent_retry,
        "not_before": row.not_before,
        "note": row.note,
    }


def job_fields(job: Job) -> dict[str, Any]:
    return {"state": job.status.value, **{name: getattr(job, name) for name in JOB_FIELDS}}


def _timeline_entry(line: bytes) -> dict[str, Any] | None:
    entry = parse_line(line)
    if entry is None:
        return None
    envelope = entry.get("envelope")
    detail = envelope.get("detail") if isinstance(envelope, dict) else entry.get("error")
    return {
        "ts": entry.get("ts"),
        "kind": entry.get("kind"),
        "seq": entry.get("seq"),
        "event": entry.get("event") or entry.get("status"),
        "detail": str(detail or ""),
    }


def job_detail(
    state: State, job_id: str, *, pane_lines: int = 40, log_lines: int = 200
) -> dict[str, Any]:
    """A job's record, its event timeline and raw trail (`delegate logs`), and its pane's tail
    (`delegate peek`); JobNotFound for an unknown id."""
    job = state.registry.get(job_id)
    lines: list[bytes] = []
    follow_log(state, job_id, lines.append)
    timeline = [e for e in map(_timeline_entry, lines) if e is not None]
    pane: list[str] = []
    pane_note = None
    if job.session and not job.host:
        try:
            pane = peek(state, job.session, lines=pane_lines)
        except DelegateError as exc:
            pane_note = str(exc)
    return {
        "job": job_fields(job),
        "timeline": timeline,
        "logs": [line.decode("utf-8", "replace").rstrip("\n") for line in lines[-log_lines:]],
        "pane": pane,
        "pane_note": pane_note,
        "waiting": [r._asdict() for r in waiting_of(state, job)],
        "diff": worktree_diff(state, job) if job.worktree else None,
    }


def waiting_of(state: State, job: Job) -> list[WaitingRequest]:
    """The job's permission requests waiting for a person, oldest first, as `delegate
    approvals` lists them (here, or on the job's agent host)."""
    if job.status.terminal:
        return []
    if job.host:
        return waiting_on_hosts(state, [job])
    return waiting_requests(state, [job.job_id])


def worktree_diff(state: State, job: Job, limit: int = DIFF_LIMIT) -> dict[str, Any]:
    """A worktree job's changes as `delegate diff --stat` and `delegate diff` print them
    (without colour), the patch cut at `limit` characters; `note` says why there is none."""
    try:
        # one git run for both: the stat, a blank line, then the patch
        both = worktrees.diff(state, job.job_id, ["--stat", "--patch"], color=False)
    except DelegateError as exc:
        return {"stat": "", "patch": "", "truncated": False, "note": str(exc)}
    cut = both.find(b"\n\ndiff --git ")
    stat, patch = (both, b"") if cut < 0 else (both[: cut + 1], both[cut + 2 :])
    text = patch.decode("utf-8", "replace")
    return {
        "stat": stat.decode("utf-8", "replace"),
        "patch": text[:limit],
        "truncated": len(text) > limit,
        "note": None if text else "no changes against the base",
    }


def hosts(state: State) -> list[dict[str, Any]]:
    """Each agent host and its presence, as `delegate host list` shows them."""
    return host_rows(state, listen_s=0.5)


def latest_report(folder: Path) -> Path | None:
    """The newest HTML report in `folder` (where `delegate report --format html` writes): a
    regular file, never a link (a link there could lead to any file of the user's)."""
    try:
        pages = [p for p in folder.glob("*.html") if not p.is_symlink() and p.is_file()]
    except OSError:
        return None
    return max(pages, key=lambda p: p.stat().st_mtime_ns, default=None)


def report_info(folder: Path) -> dict[str, Any]:
    page = latest_report(folder)
    if page is None:
        return {"available": False, "folder": str(folder)}
    written = datetime.fromtimestamp(page.stat().st_mtime, UTC)
    return {"available": True, "name": page.name, "written_at": record_timestamp(written)}
