"""Why a job has the state it has, in sentences. Pure: built from its audit lines.

Every state change's `status_changed` line carries a `cause`: its `source` (`agent`: the
agent's event, or the wrapper's report of how the agent exited; a monitor or supervisor that
saw a dead pane, a gone server or a passed deadline, or inferred a lost one; `operator`: a
person's command, with the user; `rule`: a dependency; `queue`; `launcher`) and whether it was
`observed` or inferred, with the evidence. `delegate why JOB` prints the chain:
`running since 14:02 (agent reported started); error at 14:40: pane died with exit 137
(observed by the monitor)`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from delegate.core.eventlines import reason_words
from delegate.core.outcome import (
    agent_retry_sentence,
    denied_count,
    denied_summary,
    resumes_at,
)
from delegate.core.timefmt import (
    human_timeout,
    local_minute,
    local_time,
    parse_iso,
    record_timestamp,
)

# Endings concluded from not seeing something (a server that cannot be asked, a host silent
# past its grace), not from seeing it happen.
INFERRED = ("lost", "host_lost")
WRAPPER_REPORTS = ("agent exited with status", "agent killed by signal", "the wrapper got")


def inferred_reason(reason: str | None) -> bool:
    return (reason or "").partition(":")[0].strip() in INFERRED


def _by(cause: Mapping[str, Any]) -> str:
    """`observed by the monitor`, `inferred by supervisor`."""
    how = "observed" if cause.get("observed", True) else "inferred"
    who = str(cause.get("actor") or cause.get("source") or "")
    who = {"monitor": "the monitor", "supervisor": "its supervisor"}.get(who, who)
    return f"{how} by {who}" if who else how


def _pane_fact(evidence: Mapping[str, Any]) -> str | None:
    if evidence.get("pane") == "absent":
        return "its pane was gone"
    if evidence.get("exit_signal"):
        return f"pane died with signal {evidence['exit_signal']}"
    if evidence.get("exit_status") is not None:
        return f"pane died with exit {evidence['exit_status']}"
    if evidence.get("pane_dead"):
        return "its pane was dead"
    return None


def _deadline(code: str, job: Mapping[str, Any], evidence: Mapping[str, Any]) -> str:
    """`no activity for 10m (idle deadline 14:30:00 passed)`."""
    start = parse_iso(evidence.get("started_at") or job.get("started_at"))
    if code == "idle_timeout":
        limit = evidence.get("idle_timeout_s") or job.get("idle_timeout_s")
        last = parse_iso(evidence.get("last_event_at") or job.get("last_event_at")) or start
        words = f"no activity for {human_timeout(limit)}"
    else:
        limit = evidence.get("wall_timeout_s") or job.get("wall_timeout_s")
        last = start
        words = f"still running after its {human_timeout(limit)} budget"
    if last is None or not limit:
        return f"{words} (timeout rule)"
    due = datetime.fromtimestamp(last.timestamp() + float(limit), tz=last.tzinfo)
    return f"{words} (timeout rule: deadline {local_time(record_timestamp(due))} passed)"


def ending_fact(
    status: str, reason: str | None, cause: Mapping[str, Any], job: Mapping[str, Any]
) -> str:
    """What ended the job, naming the fact seen (or the one a conclusion rests on)."""
    if status == "cancelled":
        user = f" by {cause['user']}" if cause.get("user") else ""
        command = f" (`{cause['command']}`)" if cause.get("command") else ""
        return f"cancelled{user}{command}" + (f": {reason}" if reason else "")
    if cause.get("source") == "agent":
        return _agent_fact(status, reason, str(cause.get("detail") or ""))
    return _seen_fact(status, reason, cause, job)


def _agent_fact(status: str, reason: str | None, detail: str) -> str:
    """An ending by the agent's own event, or by the wrapper's report of its exit."""
    rest = (reason or "").partition(":")[2].strip() or detail
    if rest.startswith(WRAPPER_REPORTS):
        rest = rest.removesuffix(" without reporting")
        return f"{rest.replace('agent ', 'the agent ', 1)} (the wrapper's exit report)"
    if status == "completed":
        return "the agent reported completed"
    return f"the agent reported an error{': ' + rest if rest else ''}"


def _seen_fact(
    status: str, reason: str | None, cause: Mapping[str, Any], job: Mapping[str, Any]
) -> str:
    """An ending a monitor, a supervisor, a rule or a launcher decided, and on what."""
    code, _, rest = (reason or "").partition(":")
    code, rest = code.strip(), rest.strip()
    evidence = cause.get("evidence") if isinstance(cause.get("evidence"), Mapping) else {}
    if code == "agent_exited":
        fact = _pane_fact(evidence or {}) or reason_words(reason)
        return f"{fact} ({_by(cause)})"
    if code == "tmux_gone":
        where = f" on {evidence['socket']}" if evidence and evidence.get("socket") else ""
        said = f": {evidence['tmux']}" if evidence and evidence.get("tmux") else ""
        return f"its tmux server{where} was gone{said} ({_by(cause)})"
    if code in ("idle_timeout", "wall_timeout"):
        return f"{_deadline(code, job, evidence or {})}, {_by(cause)}"
    if code in INFERRED:
        return f"{code}: {rest or reason_words(reason)} ({_by(cause)})"
    if code == "dependency_failed":
        dep, _, ended = rest.partition(" ")
        return f"its dependency {dep} ended {ended or 'unknown'} (rule --after)"
    if code in ("launch_failed", "never_launched", "assign_failed"):
        return f"{reason_words(reason)} ({_by(cause)})"
    words = reason_words(reason) or status
    return f"{words} ({_by(cause)})" if cause else words


def _open_fact(status: str, cause: Mapping[str, Any]) -> str:
    if cause.get("source") == "agent":
        return f"agent reported {cause.get('event', status)}"
    if cause.get("detail"):
        return str(cause["detail"])
    return _by(cause) if cause else "recorded"


def transitions(
    entries: Iterable[Mapping[str, Any]], job: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The job's state changes from its audit lines, oldest first, each with its sentence."""
    job = job or {}
    steps: list[dict[str, Any]] = []
    for entry in entries:
        kind = entry.get("kind")
        if kind == "registered":
            status, previous, cause = str(entry.get("status")), None, {"source": "submit"}
        elif kind == "status_changed":
            status, previous = str(entry.get("status")), entry.get("previous")
            raw = entry.get("cause")
            cause = dict(raw) if isinstance(raw, Mapping) else {}
        else:
            continue
        when = local_time(entry.get("ts"))
        terminal = status in ("completed", "error", "cancelled")
        if terminal:
            fact = ending_fact(status, entry.get("error"), cause, job)
            sentence = f"{status} at {when}: {fact}{_denials(job)}"
        elif kind == "registered":
            sentence = f"registered at {when} ({status})"
        else:
            sentence = f"{status} since {when} ({_open_fact(status, cause)})"
        steps.append(
            {
                "at": entry.get("ts"),
                "previous": previous,
                "status": status,
                "source": cause.get("source"),
                "observed": bool(cause.get("observed", True)),
                "cause": cause,
                "sentence": sentence,
            }
        )
    return steps


def _denials(job: Mapping[str, Any]) -> str:
    """`; its agent CLI denied 2 tool calls (Bash x2)`: work asked for and not done."""
    denied = job.get("denied_tools")
    count = denied_count(denied)
    if not count:
        return ""
    return f"; {count} by its agent CLI ({denied_summary(denied)})"


def present_fact(
    job: Mapping[str, Any], now: datetime, *, previous_error: str | None = None
) -> str | None:
    """What holds an open job now, beyond its last change: the agent CLI retrying its API, or
    a queued attempt waiting for its time (`previous_error`: how the attempt before it ended)."""
    status = job.get("status")
    retry = job.get("agent_retry")
    if status not in ("completed", "error", "cancelled") and isinstance(retry, Mapping):
        return agent_retry_sentence(job.get("agent"), retry)
    if resumes_at(status, job.get("not_before"), now) is None:
        return None
    after = ""
    if (previous_error or "").startswith("rate_limited"):
        after = f" after the rate limit of attempt {max(1, _int(job.get('attempt')) - 1)}"
    return f"waiting, resumes {local_minute(job.get('not_before'), now=now)}{after}"


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def why_text(steps: Sequence[Mapping[str, Any]], *, attempt: str = "") -> str:
    """The chain in one line: the sentences of every change after registration."""
    said = [str(s["sentence"]) for s in steps if s.get("previous") is not None] or [
        str(s["sentence"]) for s in steps
    ]
    lead = f"attempt {attempt}: " if attempt else ""
    return lead + "; ".join(said) if said else lead + "no state change recorded"
