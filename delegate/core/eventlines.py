"""Events and outcomes in words, for a person at a terminal. Pure: no I/O.

`submit --wait` and `watch` print one of these lines per event at a terminal (JSON lines when
piped or with `--json`), and an ending says what happened and why: `timed out: no activity for
10m`, not an exit status alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delegate.core.outcome import denied_summary, outcome_words
from delegate.core.timefmt import human_duration, human_timeout, local_time, seconds_between

EVENT_WIDTH = len("permission_required")
_HIDDEN_DATA = ("hmac_sig",)


def _data_summary(data: Mapping[str, Any]) -> str:
    """A few `key=value` pairs of an event's data (never its signature)."""
    parts = []
    for key, value in data.items():
        if key in _HIDDEN_DATA or isinstance(value, dict | list):
            continue
        parts.append(f"{key}={value}")
    return " ".join(parts[:4])


def event_line(envelope: Mapping[str, Any], *, width: int = 100) -> str:
    """`14:02:07  progress             unit tests pass`, cut to `width` characters."""
    when = local_time(envelope.get("timestamp"))
    event = str(envelope.get("event", "?"))
    detail = str(envelope.get("detail") or "")
    data = envelope.get("data")
    if not detail and isinstance(data, Mapping):
        detail = _data_summary(data)
    line = f"{when:>8}  {event:<{EVENT_WIDTH}}  {detail}".rstrip()
    line = " ".join(line.split("\n"))
    return line if len(line) <= width else line[: max(width - 1, 10)] + "…"


def _reason_parts(reason: str | None) -> tuple[str, str]:
    """`agent_exited: exit status 3` -> (`agent_exited`, `exit status 3`)."""
    if not reason:
        return "", ""
    code, _, rest = reason.partition(":")
    return code.strip(), rest.strip()


def reason_words(reason: str | None, job: Mapping[str, Any] | None = None) -> str:
    """An end reason as a person reads it (`no activity for 10m`)."""
    job = job or {}
    code, rest = _reason_parts(reason)
    if code == "idle_timeout":
        return f"no activity for {human_timeout(job.get('idle_timeout_s'))}"
    if code == "wall_timeout":
        return f"still running after its {human_timeout(job.get('wall_timeout_s'))} budget"
    known = {
        "agent_exited": "the agent exited without reporting",
        "agent_error": "the agent reported an error",
        "tmux_gone": "its tmux server went away",
        "host_lost": "its agent host stopped answering",
        "launch_failed": "it could not be launched",
        "assign_failed": "it could not be sent to its host",
        "never_launched": "it was never launched",
    }
    words = known.get(code, code.replace("_", " ") if code else "")
    return f"{words}: {rest}" if rest and words else words or rest


def outcome_line(job: Mapping[str, Any]) -> str:
    """How a job ended, in words: `job 1a2b3c4d completed in 4m 12s`, `job 1a2b3c4d completed,
    2 tool calls denied (Bash x2) in 4m 12s`, `job 1a2b3c4d timed out: no activity for 10m
    (idle_timeout)`. `job` is the record as `public_dict()` gives it."""
    job_id = job.get("job_id", "?")
    status = str(job.get("status", ""))
    reason = job.get("error")
    took = seconds_between(job.get("started_at") or job.get("created_at"), job.get("updated_at"))
    after = f" after {human_duration(took)}" if took is not None else ""
    code, _ = _reason_parts(reason)
    if status == "completed":
        said = outcome_words(status, job.get("denied_tools"))
        tools = denied_summary(job.get("denied_tools"))
        return f"job {job_id} {said}{f' ({tools})' if tools else ''} in {human_duration(took)}"
    if status == "cancelled":
        by = f" ({reason})" if reason else ""
        return f"job {job_id} cancelled{after}{by}"
    if code in ("idle_timeout", "wall_timeout"):
        return f"job {job_id} timed out{after}: {reason_words(reason, job)} ({code})"
    if status == "error":
        return f"job {job_id} failed{after}: {reason_words(reason, job)} ({code or 'error'})"
    return f"job {job_id} is {status}"


def _compact(entry: Mapping[str, Any], skip: tuple[str, ...]) -> str:
    """`key=value` pairs of an audit entry's scalar fields (nested objects left out)."""
    parts = []
    for key, value in entry.items():
        if key in skip or value is None or isinstance(value, dict | list):
            continue
        parts.append(f"{key}={value}")
    return " ".join(parts)


def audit_line(entry: Mapping[str, Any], *, width: int = 100) -> str:
    """One audit entry as a person reads it: `14:02:07  received   progress #2  tests pass`,
    `14:02:09  status     running -> completed`, cut to `width` characters."""
    when = local_time(entry.get("ts"))
    kind = str(entry.get("kind", "?"))
    if kind in ("published", "received"):
        envelope = entry.get("envelope") if isinstance(entry.get("envelope"), Mapping) else {}
        detail = str((envelope or {}).get("detail") or "")
        what = f"{entry.get('event')} #{entry.get('seq')}  {detail}"
    elif kind == "status_changed":
        kind = "status"
        reason = f"  ({entry['error']})" if entry.get("error") else ""
        what = f"{entry.get('previous')} -> {entry.get('status')}{reason}"
    elif kind == "registered":
        what = str(entry.get("status", ""))
    else:
        what = _compact(entry, ("ts", "kind", "job_id"))
    line = " ".join(f"{when:>8}  {kind:<10} {what}".split("\n")).rstrip()
    return line if len(line) <= width else line[: max(width - 1, 10)] + "…"
