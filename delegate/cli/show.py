"""`delegate show JOB`: one job for a person, or its record for a program.

At a terminal: a summary first (what ran, its state and reason in the words every view uses,
when, where, what it cost, its attempts, denials and resources, the audit log's path), then
only the fields that are set, grouped (Queue, Worktree, Session, Launch, Limits and sandbox,
Budget, Record); `--all` shows every field, `-` where unset. Piped or with `--json`: the
record (never its token) as one JSON object, as it always was.
"""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import shlex
import textwrap
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import Column, print_json, print_table, terminal_width, wants_json
from delegate.cli.common import JobIdArg, JsonOpt, open_state
from delegate.core.eventlines import outcome_line, reason_words
from delegate.core.limits import Limits, describe, human_bytes
from delegate.core.model import Job
from delegate.core.outcome import denied_summary, record_note
from delegate.core.retry import attempt_label
from delegate.core.timefmt import human_duration, human_timeout, local_time
from delegate.services.ps import job_timing
from delegate.services.state import State
from delegate.services.why import explain
from delegate.services.worktrees import chain as worktree_chain

# The root-level command this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()

LABEL_WIDTH = 18  # the labels' column: the values start after it
# Labels that say more than the key does (else the key with spaces for underscores).
LABELS = {
    "wall_timeout_s": "wall timeout",
    "idle_timeout_s": "idle timeout",
    "max_cost_usd": "max cost",
    "sub_jobs_cost_usd": "sub-jobs' cost",
    "sub_jobs_tokens": "sub-jobs' tokens",
    "conversation_usage": "usage",
    "last_seq": "last event #",
    "retried_by": "retried as",
    "retry": "retries",
}
# The summary's own fields (shown first, in its own words), and the groups after it: each
# field of a record is in one of them, else under "Other" (so a new field is never hidden).
SUMMARY_KEYS = (
    "job_id",
    "status",
    "error",
    "agent",
    "host",
    "started_at",
    "workdir",
    "cost_usd",
    "tokens_in",
    "tokens_out",
    "attempt",
    "denied_tools",
    "agent_retry",
    "peak_memory_bytes",
    "cpu_s",
    "hosts_reached",
    "hosts_refused",
    "audit_log",
)
GROUPS: dict[str, tuple[str, ...]] = {
    "Queue": (
        "group",
        "after",
        "after_rule",
        "max_running",
        "not_before",
        "retry",
        "on_interrupt",
        "retry_of",
        "retried_by",
        "parent",
        "fan_out",
        "detached",
        "picked_by",
    ),
    "Worktree": ("worktree", "merged", "follow_up_of", "review_chain"),
    "Session": ("session", "tmux_socket", "conversation_id", "launcher"),
    "Launch": ("command", "launch", "bus", "notify"),
    "Limits and sandbox": ("limits", "wall_timeout_s", "idle_timeout_s", "sandbox"),
    "Budget": (
        "max_cost_usd",
        "max_tokens",
        "sub_jobs_cost_usd",
        "sub_jobs_tokens",
        "conversation_usage",
    ),
    "Record": (
        "created_at",
        "updated_at",
        "last_event_at",
        "last_seq",
        "idempotency_key",
        "schema_version",
    ),
}
# `launch` keys shown in a group of their own (limits and sandbox) rather than under Launch
LAUNCH_ELSEWHERE = ("limits", "sandbox")


@commands.command()
def show(
    job_id: JobIdArg,
    every: Annotated[
        bool, typer.Option("--all", help="Every field of the record, `-` where it is unset.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Show one job: how it went, then what it was asked to do (never its token).

    At a terminal: a summary (agent, state and reason, times, where it worked, cost and
    tokens, attempts, denied tools, peak memory and CPU, hosts reached, the audit log), then
    the fields that are set, grouped. Piped or with --json: the record as JSON.
    Example: delegate show 1a2b3c4d
    Example: delegate show 1a2b3c4d --all
    """
    state = open_state()
    job = state.registry.get(job_id)
    record = shown_record(state, job)
    story = explain(state, job_id)
    if wants_json(as_json):
        print_json({**record, "transitions": story["transitions"], "attempts": story["attempts"]})
        return 0
    width = terminal_width()
    print("\n".join(view(job, record, every=every, width=width)))
    if len(story["attempts"]) > 1:
        print()
        print_table(
            ["ATTEMPT", "JOB", "STATE", Column("REASON", free=True)],
            [[a["label"], a["job_id"], a["status"], a["reason"] or "-"] for a in story["attempts"]],
            title="attempts",
            empty="none",
        )
    return 0


def shown_record(state: State, job: Job) -> dict[str, Any]:
    """The record `show` prints: never the token; the audit log's path, the limits in words
    and a review's chain beside it."""
    record = job.public_dict()
    record["audit_log"] = str(state.audit.events_path(job.job_id))
    limits = Limits.from_dict((job.launch or {}).get("limits"))
    if limits:
        record["limits"] = describe(limits)
    if (job.launch or {}).get("sandbox", {}).get("network") == "allowlist":
        said = state.audit.read_events(job.job_id, "egress")
        for key, allowed in (("hosts_reached", True), ("hosts_refused", False)):
            record[key] = sorted(
                {f"{e['host']}:{e['port']}" for e in said if e["allowed"] is allowed}
            )
    if job.follow_up_of or (job.worktree or {}).get("handed_to"):
        record["review_chain"] = worktree_chain(state, job.job_id)  # `review`'s follow-ups
    return record


def view(job: Job, record: Mapping[str, Any], *, every: bool, width: int) -> list[str]:
    """The lines `show` prints at a terminal: the outcome, the summary, then each group."""
    lines = [*textwrap.wrap(outcome_line(record), max(20, width), break_on_hyphens=False), ""]
    lines += [row for label, value in summary(job, record) for row in labelled(label, value, width)]
    for title, rows in groups(record, every=every):
        lines += ["", title]
        lines += [line for label, value in rows for line in labelled(label, value, width, 2)]
    return lines


def summary(job: Job, record: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """The summary's (label, value) rows: the same for every job, those marked "when set"
    only when they are."""
    yield "status", status_cell(record)
    if record.get("error"):
        code = str(record["error"]).partition(":")[0].strip()
        yield "reason", f"{reason_words(record['error'], record)} ({code})"
    agent = record.get("agent") or "-"
    yield "agent", agent + (f" on host {record['host']}" if record.get("host") else "")
    took, ended = job_timing(job, datetime.now(UTC))
    yield "started", local_time(record.get("started_at"))
    yield "ended", local_time(ended) if ended else "-"
    yield "took" if ended else "so far", human_duration(took)
    yield ("worktree" if record.get("worktree") else "workdir"), record.get("workdir") or "-"
    yield "cost", dollars(record.get("cost_usd"))
    yield "tokens", tokens(record.get("tokens_in"), record.get("tokens_out"))
    yield "attempt", attempt_label(job) or "1"
    if record.get("denied_tools"):
        yield "denied tools", denied_summary(record["denied_tools"])
    if record.get("peak_memory_bytes") is not None:
        yield "peak memory", human_bytes(record["peak_memory_bytes"])
    if record.get("cpu_s") is not None:
        yield "CPU", f"{record['cpu_s']:.1f} s"
    for key, label in (("hosts_reached", "hosts reached"), ("hosts_refused", "hosts refused")):
        if record.get(key):
            yield label, ", ".join(record[key])
    yield "audit log", str(record.get("audit_log") or "-")


def groups(
    record: Mapping[str, Any], *, every: bool
) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Each group's title and its (label, value) rows: those set, or with `every` all (`-`
    where unset); a group with no row is left out."""
    fields = dict(record)
    launch = fields.get("launch")
    fields["sandbox"] = launch.get("sandbox") if isinstance(launch, Mapping) else None
    known = set(SUMMARY_KEYS).union(*GROUPS.values())
    others = tuple(sorted(k for k in fields if k not in known and k not in ("transitions",)))
    for title, keys in [*GROUPS.items(), ("Other", others)]:
        rows = [row for key in keys for row in field_rows(key, fields.get(key), every=every)]
        if rows:
            yield title, rows


def field_rows(key: str, value: Any, *, every: bool) -> list[tuple[str, str]]:
    """One field as rows: a mapping one row a key (`launch`: its argv as a shell line)."""
    if not every and not is_set(value):
        return []
    label = LABELS.get(key, key.replace("_", " "))
    if key == "retry" and isinstance(value, Mapping):
        return [(label, retry_words(value))]
    if key == "sandbox" and isinstance(value, Mapping):
        return sandbox_rows(value, every=every)
    if isinstance(value, Mapping):
        skip = LAUNCH_ELSEWHERE if key == "launch" else ()
        sub = [(k, v) for k, v in value.items() if k not in skip and (every or is_set(v))]
        prefix = "" if key == "launch" else f"{label} "  # Launch's own rows need no prefix
        rows = [(prefix + k.replace("_", " "), words(k, v)) for k, v in sub]
        return rows or [(label, "-")]
    return [(label, words(key, value))]


def is_set(value: Any) -> bool:
    return value is not None and value is not False and value not in ("", [], {})


def words(key: str, value: Any) -> str:
    """A field's value as a person reads it."""
    if value is None:
        return "-"
    if key == "argv" and isinstance(value, list):
        return shlex.join(str(part) for part in value)
    if key.endswith("_at") or key == "not_before":
        return local_time(value)
    if key.endswith("_timeout_s"):
        return human_timeout(value)
    if key.endswith("cost_usd"):
        return dollars(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(words(key, v) for v in value) or "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={words(k, v)}" for k, v in value.items()) or "-"
    return str(value)


def retry_words(retry: Mapping[str, Any]) -> str:
    """`2 (on error, rate_limited; backoff 1s, 1m 00s)`."""
    on = ", ".join(str(o) for o in retry.get("on") or [])
    backoff = ", ".join(human_duration(b) for b in retry.get("backoff") or [])
    detail = "; ".join(
        part for part in (on and f"on {on}", backoff and f"backoff {backoff}") if part
    )
    return f"{retry.get('retries', '-')}" + (f" ({detail})" if detail else "")


def sandbox_rows(box: Mapping[str, Any], *, every: bool) -> list[tuple[str, str]]:
    """A sandboxed job's box: its network, the hosts allowed, what it may write and read."""
    network = str(box.get("network") or "none")
    rows = [("sandbox", f"bubblewrap, network {network}")]
    for key, label in (
        ("allow_hosts", "allowed hosts"),
        ("write", "writable"),
        ("read", "read-only"),
        ("hide", "hidden"),
    ):
        if every or box.get(key):
            rows.append((label, words(key, box.get(key))))
    return rows


def dollars(value: Any) -> str:
    return "-" if value is None else f"${float(value):.4f}".rstrip("0").rstrip(".")


def tokens(tokens_in: Any, tokens_out: Any) -> str:
    if tokens_in is None and tokens_out is None:
        return "-"
    return f"{tokens_in or 0:,} in, {tokens_out or 0:,} out"


def status_cell(record: Mapping[str, Any]) -> str:
    """`show`'s status: `completed, 2 tool calls denied`, `running (rate limited, retry 4/10
    in 4s)`, `queued (waiting, resumes 14:05)`, else the state alone."""
    status, note = str(record.get("status")), record_note(record)
    if not note or note.startswith(f"{status},"):
        return note or status
    return f"{status} ({note})"


def labelled(label: str, value: str, width: int, indent: int = 0) -> list[str]:
    """`label   value`, the value folded at spaces (never cut) under itself past `width`."""
    lead = " " * indent + f"{label:<{LABEL_WIDTH}} "
    if len(lead) > indent + LABEL_WIDTH + 1:  # a label longer than its column
        lead = " " * indent + label + " "
    room = max(20, width - len(lead))
    folded = textwrap.wrap(value, room, break_on_hyphens=False) or [""]
    return [lead + folded[0], *(" " * len(lead) + rest for rest in folded[1:])]
