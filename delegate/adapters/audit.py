"""Per-job audit logs under `logs/<job_id>/`.

  meta.json       immutable facts at registration (never the token)
  status.json     the latest status, rewritten atomically
  events.ndjson   append-only: registered, status_changed, published, received, rejected

Each line of events.ndjson is written by one `write` call, so a reader sees whole lines only;
a reader still skips a line that does not parse rather than failing on the whole log.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from delegate.adapters.fsio import append_line, atomic_write, ensure_private_dir, write_new
from delegate.config.logsetup import get_logger
from delegate.core import fastjson
from delegate.core.model import Job, JobState, validate_job_id
from delegate.core.timefmt import record_timestamp

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms
if TYPE_CHECKING:
    from typing import Any

log = get_logger(__name__)

META = "meta.json"
STATUS = "status.json"
EVENTS = "events.ndjson"

# Kinds of audit lines.
REGISTERED = "registered"
STATUS_CHANGED = "status_changed"
PUBLISHED = "published"
RECEIVED = "received"
REJECTED = "rejected"

_META_FIELDS = (
    "job_id",
    "created_at",
    "agent",
    "command",
    "workdir",
    "session",
    "wall_timeout_s",
    "idle_timeout_s",
    "idempotency_key",
)


def _dump(obj: Any) -> bytes:
    # fastjson: json's text without importing json (~2 ms of a fresh publish, which logs)
    text = fastjson.dumps(obj, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text.encode()


class AuditLog:
    def __init__(self, root: Path) -> None:
        self.root = root

    def job_dir(self, job_id: str, *, create: bool = False) -> Path:
        path = self.root / validate_job_id(job_id)
        if create:
            ensure_private_dir(path)
        return path

    # --- writers -------------------------------------------------------------------------

    def append(self, job_id: str, kind: str, **fields: Any) -> dict[str, Any]:
        entry = {"ts": record_timestamp(), "kind": kind, "job_id": job_id, **fields}
        append_line(self.job_dir(job_id, create=True) / EVENTS, _dump(entry))
        return entry

    def append_unsynced(self, job_id: str, kind: str, **fields: Any) -> None:
        """`append` without its fdatasync, for a line that repeats one already on disk (the
        supervisor's `received` of a progress event, whose `published` line its publisher
        synced): a crash may lose it, never tear it. 100 agents reporting each second would
        otherwise cost the supervisor 100 syncs a second."""
        entry = {"ts": record_timestamp(), "kind": kind, "job_id": job_id, **fields}
        append_line(self.job_dir(job_id, create=True) / EVENTS, _dump(entry), durable=False)

    def write_status(self, job: Job) -> None:
        atomic_write(
            self.job_dir(job.job_id, create=True) / STATUS, _dump(self._status(job)) + b"\n"
        )

    @staticmethod
    def _status(job: Job) -> dict[str, Any]:
        return {
            "job_id": job.job_id,
            "status": job.status.value,
            "updated_at": job.updated_at,
            "last_seq": job.last_seq,
            "error": job.error,
            "agent": job.agent,
            "session": job.session,
            # what the agent's channel reported (claude-stream, codex-json), for the report
            "cost_usd": job.cost_usd,
            "tokens_in": job.tokens_in,
            "tokens_out": job.tokens_out,
            "group": job.group,  # its queue group, for the report's per-group figures
            # the tool calls its agent CLI denied, for the report's denial figures
            "denied_tools": list(job.denied_tools) if job.denied_tools is not None else None,
            # a limited job's figures (runtime/limited), for the report's memory and CPU
            "peak_memory_bytes": job.peak_memory_bytes,
            "cpu_s": job.cpu_s,
        }

    def write_meta(self, job: Job) -> None:
        path = self.job_dir(job.job_id, create=True) / META
        if path.exists():
            return  # immutable once written
        meta = {name: getattr(job, name) for name in _META_FIELDS}
        meta["bus"] = job.bus.get("url")
        atomic_write(path, _dump(meta) + b"\n")

    def record_change(
        self, job: Job, previous: JobState | None, cause: dict[str, Any] | None = None
    ) -> None:
        """The registry's on_change hook: a job was created or changed state. `cause` (where
        the change came from, observed or inferred: core/why) is kept on the line."""
        if previous is None:
            self.write_meta(job)
            self.append(job.job_id, REGISTERED, status=job.status.value)
        else:
            self.append(
                job.job_id,
                STATUS_CHANGED,
                previous=previous.value,
                status=job.status.value,
                error=job.error,
                **({"cause": cause} if cause else {}),
            )
        self.write_status(job)

    def record_planned(self, job: Job, cause: dict[str, Any] | None) -> None:
        """A plan's new job (services/jobs/plan): the lines a submit writes (registered
        pending, then queued with `cause` when it waits), its meta and its status, each file
        made new in one write; the plan's commit syncs them."""
        folder = self.job_dir(job.job_id, create=True)  # (its prompt is in it)
        stamp = record_timestamp()
        lines = [{"ts": stamp, "kind": REGISTERED, "job_id": job.job_id, "status": "pending"}]
        if job.status is not JobState.PENDING:
            fields: dict[str, Any] = {"previous": "pending", "status": job.status.value}
            fields["error"] = job.error
            if cause:
                fields["cause"] = cause
            lines.append({"ts": stamp, "kind": STATUS_CHANGED, "job_id": job.job_id, **fields})
        write_new(folder / EVENTS, b"".join(_dump(line) + b"\n" for line in lines))
        meta = {name: getattr(job, name) for name in _META_FIELDS}
        meta["bus"] = job.bus.get("url")
        write_new(folder / META, _dump(meta) + b"\n")
        write_new(folder / STATUS, _dump(self._status(job)) + b"\n")

    def discard(self, job_id: str) -> None:
        """Remove the folder of a job that was never registered (a plan not committed)."""
        import shutil  # only a plan a crash interrupted comes here

        shutil.rmtree(self.job_dir(job_id), ignore_errors=True)

    # --- readers -------------------------------------------------------------------------

    def read_status(self, job_id: str) -> dict[str, Any] | None:
        try:
            data = fastjson.loads((self.job_dir(job_id) / STATUS).read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def read_meta(self, job_id: str) -> dict[str, Any] | None:
        try:
            data = fastjson.loads((self.job_dir(job_id) / META).read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def events_path(self, job_id: str) -> Path:
        return self.job_dir(job_id) / EVENTS

    def read_events(self, job_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        return list(self.iter_events(job_id, kind=kind))

    def iter_events(self, job_id: str, kind: str | None = None) -> Iterator[dict[str, Any]]:
        try:
            handle = self.events_path(job_id).open("rb")
        except FileNotFoundError:
            return
        with handle:
            for number, line in enumerate(handle, 1):
                entry = parse_line(line)
                if entry is None:
                    log.warning("skipping unreadable line %d of %s events", number, job_id)
                    continue
                if kind is None or entry.get("kind") == kind:
                    yield entry


def parse_line(line: bytes) -> dict[str, Any] | None:
    if not line.endswith(b"\n"):
        return None  # a line still being written, or torn by a crash
    try:
        entry = fastjson.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None
