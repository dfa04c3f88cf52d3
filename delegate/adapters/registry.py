"""The job registry: one JSON record per job under `jobs/`, changed only under one lock.

Layout inside the registry folder:
  <job_id>.json         the record (0600), rewritten atomically
  .lock                 the registry lock (flock)
  pending/<job_id>      an empty marker per pending job, so `pick` never scans all history
  open/<job_id>         an empty marker per open job (queued, pending, running): what the
                        monitor, the supervisors and `ps` read instead of the whole history
  finished.log          one job id per line, appended as each job ends: the recent ones for `ps`
  changes.log           one job id per line, appended as each record is written (emptied past
                        CHANGES_MAX): a monitor re-reads only the records that changed
  keys/<sha256>         idempotency key -> job id
  follow-up/<job_id>    an empty marker per ended job a next attempt may follow, until it is
                        made or found not due: the monitor makes what a dying ender could not
  quarantine/           records that did not parse, moved aside and never rewritten
  .plan/                a plan's records while it is committed (`commit_plan`): with its
                        COMMITTED file in it, the plan is moved in (again) by whoever opens
                        the registry next; without, it is thrown away

Every change runs under the lock and calls `on_change(job, previous_status)` before the lock is
released, so the audit trail (status.json) is written in the same order as the records.
"""

from __future__ import annotations

import binascii
import builtins
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from delegate.adapters.fsio import (
    FileLock,
    atomic_write,
    ensure_private_dir,
    fsync_dir,
    write_new,
)
from delegate.adapters.registry_keys import KEYS_DIR, job_id_for_key, key_path
from delegate.config.logsetup import get_logger
from delegate.core import fastjson
from delegate.core.errors import (
    CorruptRecord,
    DelegateError,
    IllegalTransition,
    JobNotFound,
    LockTimeout,
    PublishRefused,
    UsageError,
)
from delegate.core.model import (
    EVENT_TARGET_STATE,
    OPEN_JOB_STATES,
    EventType,
    Job,
    JobState,
    check_transition,
    is_legal_transition,
    publish_refusal,
    validate_job_id,
)
from delegate.core.timefmt import local_time, parse_timestamp, record_timestamp

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms
if TYPE_CHECKING:
    from typing import Any

log = get_logger(__name__)

# (job, previous status, cause): the cause says where a state change came from (core/why)
OnChange = Callable[[Job, "JobState | None", "dict[str, Any] | None"], None]
FINISHED_LOG = "finished.log"
FOLLOW_UP_DIR = "follow-up"
# A non-state event refreshes `last_event_at` only when the stored value is older than this:
# idle limits are seconds to minutes, and every progress line need not rewrite the record.
LAST_EVENT_RESOLUTION_S = 1.0
CHANGES_LOG = "changes.log"
CHANGES_MAX = 4 << 20  # bytes; then the log starts over (its readers read everything again)
FOLLOW_RESCAN_S = 30.0  # a follower of the changes reads every open record this often anyway
CACHE_SETTLED_NS = 1_000_000_000  # a record is cached once its file is a second old
CACHE_MAX = 50_000  # records kept parsed (a monitor's open jobs and their dependencies)
PLAN_DIR = ".plan"
QUEUED_DETAIL = "waits for a slot, its dependencies or its group"  # a queued job's first line
PLAN_COMMITTED = "COMMITTED"


def _parsed(raw: bytes) -> Any:
    """A record's JSON, or ValueError("not valid JSON")."""
    try:
        return fastjson.loads(raw)
    except ValueError:
        raise ValueError("not valid JSON") from None


def _check_plain(changes: Mapping[str, Any]) -> None:
    """ValueError unless `changes` are plain fields of a job record (never its status, token,
    id, seq or creation time: those change only through their own transitions)."""
    forbidden = {"status", "auth_token", "job_id", "last_seq", "created_at"} & changes.keys()
    if forbidden:
        raise ValueError(f"cannot update {', '.join(sorted(forbidden))} directly")
    unknown = changes.keys() - set(Job._fields)
    if unknown:
        raise ValueError(f"job records have no field {', '.join(sorted(unknown))}")


def _file_key(seen: os.stat_result) -> tuple[int, int, int]:
    return (seen.st_ino, seen.st_mtime_ns, seen.st_size)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def url_token(nbytes: int) -> str:
    """`secrets.token_urlsafe(nbytes)`, the same text from the same source (os.urandom),
    without importing `secrets` (with hmac, random and base64, ~10 ms of every submit)."""
    encoded = binascii.b2a_base64(os.urandom(nbytes), newline=False)
    return encoded.rstrip(b"=").translate(_URLSAFE).decode("ascii")


class Registry:
    def __init__(
        self,
        root: Path,
        *,
        on_change: OnChange | None = None,
        on_discard: Callable[[str], None] | None = None,
        lock_timeout_s: float = 30.0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.root = root
        self._root_text = os.fspath(root)
        self._cache: dict[str, tuple[tuple[int, int, int], Job]] = {}
        self._follow: _Follow | None = None
        self.on_change = on_change
        # a job of a plan that was never committed: what was written for it beside its
        # record (its audit folder) goes too
        self.on_discard = on_discard
        self._now = now or (lambda: datetime.now(UTC))
        self._lock = FileLock(root / ".lock", lock_timeout_s)
        ensure_private_dir(root)
        self.pending_dir = ensure_private_dir(root / "pending")
        self.open_dir = root / "open"
        if not self.open_dir.is_dir():
            self._build_open_index()
        self.keys_dir = ensure_private_dir(root / KEYS_DIR)
        self.quarantine_dir = root / "quarantine"
        if os.path.isdir(f"{self._root_text}/{PLAN_DIR}"):
            self._recover_plan()

    # --- paths and raw records -----------------------------------------------------------

    def path_for(self, job_id: str) -> Path:
        return self.root / f"{validate_job_id(job_id)}.json"

    def exists(self, job_id: str) -> bool:
        return self.path_for(job_id).exists()

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def _load(self, job_id: str, *, quarantine: bool) -> Job:
        """The record, parsed; one read before (its file unchanged since) comes from the cache:
        a monitor pass over 10,000 queued jobs reads each with one stat, not a parse."""
        path = f"{self._root_text}/{validate_job_id(job_id)}.json"  # str: pathlib costs µs
        try:
            seen = os.stat(path)
        except FileNotFoundError:
            raise JobNotFound(job_id) from None
        cached = self._cache.get(job_id)
        if cached is not None and cached[0] == _file_key(seen):
            return cached[1]
        try:
            with open(path, "rb") as handle:
                read = os.fstat(handle.fileno())
                raw = handle.read()
        except FileNotFoundError:
            raise JobNotFound(job_id) from None
        try:
            job = Job.from_dict(_parsed(raw))
            if job.job_id != job_id:
                raise ValueError(f"record names job {job.job_id}")
            self._remember(job, read)
            return job
        except (ValueError, TypeError) as exc:
            reason = str(exc)
            if not quarantine:
                raise CorruptRecord(job_id, "(not moved)", reason) from None
            moved = self._quarantine(Path(path), reason)
            raise CorruptRecord(job_id, str(moved), reason) from None

    def _note_change(self, job_id: str) -> None:
        """Append the id to changes.log (under the lock, as every write): what followers of
        the open jobs re-read. Past CHANGES_MAX a new file replaces it (a new inode, which
        its followers notice and read everything again)."""
        path = self.root / CHANGES_LOG
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size > CHANGES_MAX:
                os.close(fd)
                fd = -1
                atomic_write(path, b"")
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(fd, f"{job_id}\n".encode("ascii"))
        finally:
            if fd >= 0:
                os.close(fd)

    def _remember(self, job: Job, read: os.stat_result) -> None:
        """Cache a record read from a file last written over CACHE_SETTLED_NS ago. A rewrite
        makes a new file (atomic_write), whose inode may reuse the old one's and whose mtime
        may fall in the same clock tick: only a record that has settled is cached, so a
        rewrite after it always differs in its mtime."""
        if time.time_ns() - read.st_mtime_ns < CACHE_SETTLED_NS:
            return
        if len(self._cache) >= CACHE_MAX:
            self._cache.clear()
        self._cache[job.job_id] = (_file_key(read), job)

    def _quarantine(self, path: Path, reason: str) -> Path:
        """Move a record that does not parse aside; called under the lock."""
        ensure_private_dir(self.quarantine_dir)
        stamp = self._now().strftime("%Y%m%dT%H%M%S%fZ")
        target = self.quarantine_dir / f"{path.name}.{stamp}"
        os.replace(path, target)
        fsync_dir(self.root)
        log.warning("quarantined corrupt job record %s (%s) to %s", path.name, reason, target)
        return target

    def _save(
        self,
        job: Job,
        previous: JobState | None,
        cause: dict[str, Any] | None = None,
        *,
        stamp: bool = True,
        durable: bool = True,
    ) -> Job:
        """Write `job`'s record (`durable=False`: without its fsyncs, see `next_seq`)."""
        if stamp:
            job = job._replace(updated_at=record_timestamp(self._now()))
        # fastjson: json's own text (indented, keys sorted) without importing json (~2 ms of a
        # fresh publish, whose record this writes)
        text = fastjson.dumps(job.to_dict(), indent=2, sort_keys=True)
        data = text.encode("utf-8") + b"\n"
        atomic_write(self.path_for(job.job_id), data, durable=durable)
        self._note_change(job.job_id)
        if self.on_change is not None and previous != job.status:
            self.on_change(job, previous, cause)
        return job

    @staticmethod
    def _set_marker(folder: Path, job_id: str, present: bool) -> None:
        marker = folder / job_id
        if present:
            marker.touch(mode=0o600)
        else:
            marker.unlink(missing_ok=True)
        fsync_dir(folder)

    def _set_pending_marker(self, job_id: str, present: bool) -> None:
        self._set_marker(self.pending_dir, job_id, present)

    def _set_open_marker(self, job_id: str, present: bool) -> None:
        self._set_marker(self.open_dir, job_id, present)

    def _build_open_index(self) -> None:
        """Create `open/` from the records once (a state dir from before the index existed)."""
        with self.locked():
            if self.open_dir.is_dir():
                return
            staging = ensure_private_dir(self.root / ".open.new")
            for path in self.root.glob("*.json"):
                try:
                    job = self._load(path.stem, quarantine=False)
                except DelegateError:
                    continue
                if job.status in OPEN_JOB_STATES:
                    (staging / job.job_id).touch(mode=0o600)
            os.replace(staging, self.open_dir)
            fsync_dir(self.root)

    def _get_locked(self, job_id: str) -> Job:
        return self._load(job_id, quarantine=True)

    # --- queries -------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        """The current record. Records are replaced atomically, so reading needs no lock;
        a record that does not parse is re-read under the lock and then quarantined."""
        try:
            return self._load(job_id, quarantine=False)
        except CorruptRecord:
            with self.locked():
                return self._get_locked(job_id)

    def list(self, status: JobState | None = None) -> list[Job]:
        """All parseable jobs, oldest first; corrupt records are quarantined and skipped."""
        jobs = []
        for path in self.root.glob("*.json"):
            job_id = path.stem
            try:
                job = self.get(job_id)
            except DelegateError:
                continue  # not a job id, gone meanwhile, or quarantined and logged by get()
            if status is None or job.status is status:
                jobs.append(job)
        jobs.sort(key=lambda j: (j.created_at, j.job_id))
        return jobs

    def open_jobs(self) -> builtins.list[Job]:
        """Queued, pending and running jobs, oldest first, from the open index only.

        A marker left by a crash (its record already ended, or gone) is dropped here.
        """
        jobs = []
        for name in os.listdir(self.open_dir):
            try:
                job = self.get(name)
            except JobNotFound:
                self._drop_orphan_marker(self.open_dir / name)
                continue
            except DelegateError:
                continue  # not a job id, or quarantined and logged by get()
            if job.status in OPEN_JOB_STATES:
                jobs.append(job)
            else:
                (self.open_dir / name).unlink(missing_ok=True)
        jobs.sort(key=lambda j: (j.created_at, j.job_id))
        return jobs

    def _drop_orphan_marker(self, marker: Path) -> None:
        """Drop an open marker whose record is missing, once sure it is a crash's leftover:
        `register` sets the marker and then writes the record, both under the lock, so a
        reader that came between the two looks again under the lock."""
        with self.locked():
            if not self.path_for(marker.name).exists():
                marker.unlink(missing_ok=True)

    def followed_open_jobs(self, *, ordered: bool = True) -> builtins.list[Job]:
        """`open_jobs()` for a caller that asks again every few seconds (the monitor): after a
        first full read, only the records changes.log names since are read again; a log that
        started over, and every FOLLOW_RESCAN_S (a writer that died between its record and
        its line), read everything again."""
        follow = self._followed()
        if not ordered:  # (`ordered=False`: a caller that only looks for some, unsorted)
            return list(follow.jobs.values())
        return sorted(follow.jobs.values(), key=lambda j: (j.created_at, j.job_id))

    def followed_sub_jobs(self, parent_id: str) -> builtins.list[Job]:
        """The open sub-jobs of job `parent_id`, as `followed_open_jobs` knows them: a look-up,
        not a scan (a supervisor asks at every ending, beside 10,000 queued jobs)."""
        follow = self._followed()
        return [
            follow.jobs[i] for i in sorted(follow.children.get(parent_id, ())) if i in follow.jobs
        ]

    def _followed(self) -> _Follow:
        """The follower of changes.log, brought up to date."""
        follow = self._follow
        if follow is None or time.monotonic() - follow.since > FOLLOW_RESCAN_S:
            follow = self._follow = _Follow.start(self.root / CHANGES_LOG)
            for job in self.open_jobs():
                follow.put(job)
            return follow
        changed = follow.read_changes()
        if changed is None:  # the log started over
            self._follow = None
            return self._followed()
        for job_id in changed:
            try:
                job = self.get(job_id)
            except DelegateError:
                follow.drop(job_id)
                continue
            if job.status in OPEN_JOB_STATES:
                follow.put(job)
            else:
                follow.drop(job_id)
        return follow

    def _open_locked(self) -> builtins.list[Job]:
        jobs = []
        for name in os.listdir(self.open_dir):
            try:
                job = self._get_locked(name)
            except DelegateError:
                continue
            if job.status in OPEN_JOB_STATES:
                jobs.append(job)
        return jobs

    def recent_finished(self, limit: int) -> builtins.list[Job]:
        """The `limit` jobs that ended last, newest first, from the tail of finished.log."""
        if limit <= 0:
            return []
        path = self.root / FINISHED_LOG
        want = limit * 9 + 9
        try:
            with path.open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - want * 2))
                tail = handle.read().split(b"\n")
        except FileNotFoundError:
            return []
        seen: set[str] = set()
        jobs: builtins.list[Job] = []
        for raw in reversed(tail):
            job_id = raw.decode("ascii", "replace").strip()
            if job_id in seen:
                continue
            seen.add(job_id)
            try:
                jobs.append(self.get(job_id))
            except DelegateError:
                continue
            if len(jobs) >= limit:
                break
        return jobs

    # --- ended jobs a next attempt may follow ----------------------------------------------

    def mark_follow_up(self, job_id: str) -> None:
        """Note that a next attempt may follow job `job_id`. Its ender calls this under the
        lock before the end is written, so an ender that dies before it made the attempt
        leaves the note for the monitor, however many jobs end after it."""
        self._set_marker(ensure_private_dir(self.root / FOLLOW_UP_DIR), job_id, True)

    def follow_ups(self) -> builtins.list[str]:
        """The ended jobs noted by `mark_follow_up` and not yet settled, by id."""
        try:
            names = os.listdir(self.root / FOLLOW_UP_DIR)
        except FileNotFoundError:
            return []
        return sorted(name for name in names if not name.startswith("."))

    def follow_up_settled(self, job_id: str) -> None:
        """Job `job_id`'s next attempt was made, or none is due: drop its note."""
        folder = self.root / FOLLOW_UP_DIR
        if (folder / job_id).exists():
            self._set_marker(folder, job_id, False)

    def quarantined(self) -> builtins.list[Path]:
        if not self.quarantine_dir.is_dir():
            return []
        return sorted(self.quarantine_dir.iterdir())

    def stale_temp_files(self) -> builtins.list[Path]:
        return sorted(self.root.glob(".*.tmp"))

    # --- changes -------------------------------------------------------------------------

    def register(
        self,
        *,
        agent: str | None = None,
        command: str | None = None,
        workdir: str | None = None,
        session: str | None = None,
        wall_timeout_s: float | None = None,
        idle_timeout_s: float | None = None,
        bus: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        launch: dict[str, Any] | None = None,
        job_id: str | None = None,
        token_for: Callable[[str], str] | None = None,
        host: str | None = None,
        launcher: dict[str, Any] | None = None,
        parent: str | None = None,
    ) -> tuple[Job, bool]:
        """Create a pending job; return (job, created). `launcher`: the process that will
        start it (a remote job is claimed from birth: it is admitted by no one else).

        With an idempotency key already used, return that job and created=False. The key file
        is written before the record, so a crash in between is completed by the next call with
        the same key instead of creating a second job.
        """
        given = job_id  # an agent host registers the id its delegator chose
        if given is not None:
            validate_job_id(given)
        with self.locked():
            key_file = None
            job_id = None
            if idempotency_key is not None:
                key_file = Path(key_path(self.root, idempotency_key))
                try:
                    job_id = validate_job_id(job_id_for_key(self.root, idempotency_key))
                    return self._get_locked(job_id), False
                except FileNotFoundError:
                    job_id = None
                except JobNotFound:
                    pass  # key written, record not: finish what a crashed call started
            if job_id is None and given is not None:
                if self.path_for(given).exists():
                    return self._get_locked(given), False
                job_id = given
            while job_id is None:
                candidate = os.urandom(4).hex()  # as secrets.token_hex(4)
                if not self.path_for(candidate).exists():
                    job_id = candidate
            if key_file is not None and not key_file.exists():
                atomic_write(key_file, job_id.encode("ascii"))
            job = self.new_record(
                job_id,
                # a remote job's token is derived from its host's key on both sides
                auth_token=token_for(job_id) if token_for else None,
                agent=agent,
                command=command,
                workdir=workdir,
                session=session,
                wall_timeout_s=wall_timeout_s,
                idle_timeout_s=idle_timeout_s,
                bus=dict(bus or {}),
                idempotency_key=idempotency_key,
                launch=dict(launch or {}),
                host=host,
                launcher=launcher,
                parent=parent,
            )
            self._set_open_marker(job_id, True)
            self._set_pending_marker(job_id, True)
            return self._save(job, None), True

    def new_record(self, job_id: str, *, auth_token: str | None = None, **fields: Any) -> Job:
        """A pending job's first record (not yet written): stamped now, with a new token."""
        stamp = record_timestamp(self._now())
        token = auth_token or url_token(32)
        return Job(
            job_id=job_id, status=JobState.PENDING, created_at=stamp, updated_at=stamp,
            auth_token=token, **fields,
        )  # fmt: skip

    def new_ids(self, count: int) -> builtins.list[str]:
        """`count` job ids no record has yet (`commit_plan` checks again under its lock)."""
        ids: dict[str, None] = {}
        while len(ids) < count:
            candidate = os.urandom(4).hex()
            if candidate not in ids and not self.path_for(candidate).exists():
                ids[candidate] = None
        return list(ids)

    def commit_plan(
        self,
        records: builtins.list[Job],
        decide_for: Callable[[builtins.list[Job]], Callable[[Job], bool]],
        write_beside: Callable[[Job], None],
    ) -> builtins.list[Job]:
        """Register many new pending jobs (each with its launch spec) in one transaction
        under one lock: all of them, or after a crash none. `decide_for(open jobs)` gives the
        cap policy for the plan, asked job by job in order (a job let start counts for the
        next): a job it lets start stays pending, the others are queued. `write_beside(job)`
        writes what goes beside each record (its audit, its prompt), not yet durably.

        A plan of 10,000 jobs costs one sync of the file system, not two fsyncs per file:
        the records are written into .plan/, everything is synced once, COMMITTED marks the
        plan whole, and only then are the records moved in (`_move_plan_in`)."""
        staging = Path(self._root_text) / PLAN_DIR
        with self.locked():
            self._recover_plan_locked()
            decide = decide_for(self._open_locked())
            ensure_private_dir(staging)
            made: builtins.list[Job] = []
            begun: builtins.list[str] = []  # ids whose files beside were (being) written
            try:
                for job in records:
                    if self.path_for(job.job_id).exists():
                        raise ValueError(f"job {job.job_id} exists already")
                    if not decide(job):
                        job = job._replace(status=JobState.QUEUED, launcher=None)
                    begun.append(job.job_id)
                    write_beside(job)
                    if job.idempotency_key is not None:
                        self._claim_key(job.idempotency_key, job.job_id)
                    text = fastjson.dumps(job.to_dict(), indent=2, sort_keys=True)
                    write_new(staging / f"{job.job_id}.json", text.encode("utf-8") + b"\n")
                    made.append(job)
                os.sync()  # every record and every file beside it, in one go
                atomic_write(staging / PLAN_COMMITTED, b"")
            except BaseException:
                self._recover_plan_locked()  # not committed: thrown away, all of it
                for job in made:
                    if job.idempotency_key is not None:
                        Path(key_path(self.root, job.idempotency_key)).unlink(missing_ok=True)
                for job_id in begun:  # (one whose record was not staged yet too)
                    if self.on_discard is not None:
                        self.on_discard(job_id)
                raise
            self._move_plan_in(staging)
            return made

    def _claim_key(self, idempotency_key: str, job_id: str) -> None:
        """A plan's job's key -> its id (synced with the plan). A key that names a job
        already was taken meanwhile (the plan's caller looked before the lock): refused, so
        the plan is not committed and one job per key stays true."""
        key_file = Path(key_path(self.root, idempotency_key))
        if key_file.exists():
            raise UsageError(
                f"the idempotency key {idempotency_key!r} was used meanwhile: submit the plan again"
            )
        atomic_write(key_file, job_id.encode("ascii"), durable=False)

    def _recover_plan(self) -> None:
        """A plan found half committed on opening: finish it, or throw it away, unless its
        committer holds the lock right now (it finishes it itself)."""
        try:
            with FileLock(Path(self._root_text) / ".lock", 0.0):
                self._recover_plan_locked()
        except LockTimeout:
            pass  # its committer, or another opener: whoever takes the lock next finishes it

    def _recover_plan_locked(self) -> None:
        staging = Path(self._root_text) / PLAN_DIR
        if not staging.is_dir():
            return
        if (staging / PLAN_COMMITTED).exists():
            self._move_plan_in(staging)
            return
        for name in os.listdir(staging):
            if name.endswith(".json") and self.on_discard is not None:
                self.on_discard(name[: -len(".json")])
            os.unlink(staging / name)
        staging.rmdir()
        fsync_dir(Path(self._root_text))

    def _move_plan_in(self, staging: Path) -> None:
        """Move a committed plan's records in: each one's markers first, then the record
        (the index never trails a record), then the names on disk, once per folder."""
        changed = []
        for name in sorted(os.listdir(staging)):
            if not name.endswith(".json"):
                continue
            job_id = name[: -len(".json")]
            status = Job.from_dict(_parsed((staging / name).read_bytes())).status
            (self.open_dir / job_id).touch(mode=0o600)
            if status is JobState.PENDING:
                (self.pending_dir / job_id).touch(mode=0o600)
            os.replace(staging / name, Path(self._root_text) / name)
            changed.append(job_id)
        for folder in (self.open_dir, self.pending_dir, Path(self._root_text)):
            fsync_dir(folder)
        if changed:
            fd = os.open(self.root / CHANGES_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, "".join(f"{job_id}\n" for job_id in changed).encode("ascii"))
            finally:
                os.close(fd)
        (staging / PLAN_COMMITTED).unlink()
        staging.rmdir()
        fsync_dir(Path(self._root_text))

    def find_by_key(self, idempotency_key: str) -> Job | None:
        """The job an idempotency key names, or None when the key is unused."""
        try:
            return self.get(validate_job_id(job_id_for_key(self.root, idempotency_key)))
        except (FileNotFoundError, JobNotFound):
            return None

    def transition(self, job_id: str, target: JobState, *, reason: str | None = None) -> Job:
        """Move a job to an open state `target`; raise IllegalTransition when the table forbids
        it, and ValueError for a terminal `target`: a job ends only through `record_end`."""
        with self.locked():
            job = self._get_locked(job_id)
            check_transition(job_id, job.status, target)
            if target.terminal:
                raise ValueError(f"{target.value} ends the job: only Registry.record_end ends one")
            return self._move(job, target, reason)

    def _move(
        self, job: Job, target: JobState, reason: str | None, cause: dict[str, Any] | None = None
    ) -> Job:
        """Change state under the lock, keeping the indexes true: a marker is added before the
        record says so and removed after, so a crash leaves at worst a stale marker, which the
        readers of the index drop."""
        previous = job.status
        job = job._replace(status=target)
        if target is JobState.ERROR:
            job = job._replace(error=reason or "error")
        elif target is JobState.CANCELLED and reason:
            job = job._replace(error=reason)  # why it was cancelled (a session stop's mode)
        if target is JobState.RUNNING and job.started_at is None:
            job = job._replace(started_at=record_timestamp(self._now()))
        if target is JobState.PENDING:
            self._set_pending_marker(job.job_id, True)
        job = self._save(job, previous, cause)
        if previous is JobState.PENDING and target is not JobState.PENDING:
            self._set_pending_marker(job.job_id, False)
        if target.terminal:
            self._set_open_marker(job.job_id, False)
            fd = os.open(self.root / FINISHED_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, f"{job.job_id}\n".encode("ascii"))
            finally:
                os.close(fd)
        return job

    def record_end(
        self,
        job_id: str,
        target: JobState,
        *,
        reason: str | None = None,
        by_event: bool = False,
        before: Callable[[Job], None] | None = None,
        cause: dict[str, Any] | None = None,
    ) -> tuple[Job, bool]:
        """The one terminal write: move an open job to `target` (completed, error, cancelled);
        return (job, changed). Only services/jobs/finish.py calls it (tests/test_one_ending.py).

        First terminal wins: a job that has ended already is left as it is and (job, False)
        returned, so of callers racing to end it (a publisher, a subscriber, a monitor, a
        cancel) exactly one sees changed=True. `before(job)` runs under the lock only for that
        one, just before the record is written: its reason line is never behind the status.
        `by_event`: the job's own `completed`/`error`, which also moves its idle clock; one
        seen while the job is still queued or pending (its `started` was lost) passes through
        pending and running, so each move is legal and recorded. Otherwise a move the table
        forbids raises IllegalTransition. `cause`: where the ending came from, for its
        `status_changed` line (core/why).
        """
        if not target.terminal:
            raise ValueError(f"{target.value} does not end a job; use transition()")
        seen = self.get(job_id)
        if seen.status.terminal:  # an ending is final: no need to wait for the lock to know
            return seen, False
        with self.locked():
            job = self._get_locked(job_id)
            if job.status.terminal:
                return job, False
            if by_event:
                job = job._replace(last_event_at=record_timestamp(self._now()))
                if job.status is JobState.QUEUED:
                    job = self._move(job, JobState.PENDING, None, cause)
                if not is_legal_transition(job.status, target):
                    job = self._move(job, JobState.RUNNING, None, cause)
            check_transition(job_id, job.status, target)
            if before is not None:
                before(job)
            return self._move(job, target, reason, cause), True

    def apply_event(
        self, job_id: str, event: EventType, *, detail: str = "", actor: str = ""
    ) -> tuple[Job, bool]:
        """Apply what a non-terminal accepted event implies; return (job, changed).

        `started` moves the job to running; `progress` and `permission_required` only move the
        idle clock. Idempotent: the same event twice, or any event after the job ended, changes
        nothing. A terminal event is refused (ValueError): a job ends only through `record_end`.
        """
        target = EVENT_TARGET_STATE.get(event)
        if target is not None and target.terminal:
            raise ValueError(f"{event.value} ends the job: only Registry.record_end ends one")
        if target is None:  # progress, permission_required: only the idle clock moves
            job = self.get(job_id)
            if job.status.terminal or not self._stale_last_event(job):
                return job, False
            try:  # not worth a wait: idle limits are minutes, and its next event tries again
                with FileLock(self._lock.path, 0.0):
                    job = self._get_locked(job_id)
                    if job.status.terminal:
                        return job, False
                    stamp = record_timestamp(self._now())
                    moved = job._replace(last_event_at=stamp)  # (unsynced: as `next_seq`)
                    return self._save(moved, job.status, durable=False), False
            except LockTimeout:
                return job, False
        seen = self.get(job_id)  # its publisher applied it already, mostly: no lock to wait for
        if seen.status is target or seen.status.terminal:
            return seen, False
        with self.locked():
            job = self._get_locked(job_id)
            if job.status is target or job.status.terminal:
                return job, False
            job = job._replace(last_event_at=record_timestamp(self._now()))
            cause = {"source": "agent", "event": event.value, "observed": True}
            if actor:
                cause["actor"] = actor
            if job.status is JobState.QUEUED:
                job = self._move(job, JobState.PENDING, None, cause)
            return self._move(job, target, None, cause), True

    def _stale_last_event(self, job: Job) -> bool:
        if job.last_event_at is None:
            return True
        age = (self._now() - parse_timestamp(job.last_event_at)).total_seconds()
        return age >= LAST_EVENT_RESOLUTION_S

    def next_seq(self, job_id: str, event: EventType) -> tuple[Job, int]:
        """Allocate the next seq for `event` and store it as `last_seq`.

        Refuses (PublishRefused) when the job may not take this event, decided under the lock
        so a concurrent terminal event cannot slip in between the check and the allocation.

        The seq of a `progress` or `permission_required` is written without fsyncs: a process
        that dies leaves it in the page cache, and only a machine that stops could lose it,
        which stops the job's agent with it (a job on an agent host has its seqs counted
        there). Synced, 200 agents' progress kept the registry lock busy all the time.
        """
        with self.locked():
            job = self._get_locked(job_id)
            refusal = publish_refusal(job, event)
            if refusal:
                raise PublishRefused(job_id, refusal)
            stamp = record_timestamp(self._now())
            job = self._save(
                job._replace(last_seq=job.last_seq + 1, last_event_at=stamp),
                job.status,
                durable=event in EVENT_TARGET_STATE,
            )
            return job, job.last_seq

    def pick(self, agent_session: str) -> Job | None:
        """Claim the oldest pending job for `agent_session`, or return None."""
        with self.locked():
            candidates = []
            for marker in self.pending_dir.iterdir():
                try:
                    job = self._get_locked(marker.name)
                except (JobNotFound, CorruptRecord, ValueError):
                    marker.unlink(missing_ok=True)
                    continue
                if job.status is JobState.PENDING and not job.launch:
                    candidates.append(job)  # a job with a launch spec is tmux's, not a picker's
                else:
                    marker.unlink(missing_ok=True)  # left by a crash after the record moved on
            if not candidates:
                return None
            job = min(candidates, key=lambda j: (j.created_at, j.job_id))
            return self._move(job._replace(picked_by=agent_session), JobState.RUNNING, None)

    def update(self, job_id: str, *, stamp: bool = True, **changes: Any) -> Job:
        """Set plain fields (session name, bus overrides); never the status or the token.
        `stamp=False` keeps `updated_at`: an ended job's stays the time it ended."""
        _check_plain(changes)
        with self.locked():
            job = self._get_locked(job_id)
            return self._save(job._replace(**changes), job.status, stamp=stamp)

    def add_sub_jobs_spent(self, job_id: str, tokens: int, cost_usd: float) -> Job:
        """Add a sub-job's new spending to `job_id`'s counter of what its sub-jobs spent, under
        the lock (two sub-jobs count at once); an ended job's `updated_at` stays its end."""
        with self.locked():
            job = self._get_locked(job_id)
            job = job._replace(
                sub_jobs_tokens=(job.sub_jobs_tokens or 0) + tokens,
                sub_jobs_cost_usd=round((job.sub_jobs_cost_usd or 0.0) + cost_usd, 6),
            )
            return self._save(job, job.status, stamp=not job.status.terminal)

    def admit(
        self,
        job_id: str,
        launch: dict[str, Any],
        may_start: Callable[[Job, builtins.list[Job]], bool],
        launcher: dict[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
    ) -> Job:
        """Give a pending job its launch spec (and the plain fields in `changes`, as `update`
        sets them, in the same write) and decide, under the lock, whether it may start now (it
        stays pending, claimed by `launcher`) or waits for a slot (queued).

        `may_start(job, open_jobs)` is the cap policy; deciding under the lock is what keeps two
        submits from both taking the last slot.
        """
        changes = dict(changes or {})
        _check_plain(changes)
        with self.locked():
            job = self._get_locked(job_id)
            if job.status is not JobState.PENDING:
                raise IllegalTransition(job_id, job.status.value, JobState.QUEUED.value)
            job = job._replace(**changes, launch=dict(launch), launcher=launcher)
            others = [j for j in self._open_locked() if j.job_id != job_id]
            if may_start(job, others):
                return self._save(job, job.status)
            detail = QUEUED_DETAIL
            if job.not_before:
                detail = f"waits out its retry backoff until {local_time(job.not_before)}"
            cause = {"source": "queue", "observed": True, "detail": detail}
            return self._move(job._replace(launcher=None), JobState.QUEUED, None, cause)

    def claim_launch(
        self,
        job_id: str,
        launcher: dict[str, Any],
        *,
        expected_launcher: dict[str, Any] | None,
        may_start: Callable[[Job, builtins.list[Job]], bool],
    ) -> Job | None:
        """Claim the launch of a queued job (when a slot is free) or of a pending job whose
        launcher is still `expected_launcher` (it died); return the job, or None when someone
        else claimed it first or no slot is free. Two monitors never launch the same job."""
        with self.locked():
            job = self._get_locked(job_id)
            if job.status is JobState.QUEUED:
                others = [j for j in self._open_locked() if j.job_id != job_id]
                if not may_start(job, others):
                    return None
                cause = {"source": "queue", "observed": True, "detail": "its turn came"}
                return self._move(job._replace(launcher=launcher), JobState.PENDING, None, cause)
            if job.status is JobState.PENDING and job.launcher == expected_launcher:
                return self._save(job._replace(launcher=launcher), job.status)
            return None


class _Follow:
    """Where a follower of changes.log is: the open jobs it knows, the log's file and how far
    it has read it (whole lines only), and when it last read everything."""

    def __init__(self, path: Path, inode: int, offset: int) -> None:
        self.path, self.inode, self.offset = path, inode, offset
        self.since = time.monotonic()
        self.jobs: dict[str, Job] = {}
        self.children: dict[str, set[str]] = {}  # parent id -> its open sub-jobs' ids

    def put(self, job: Job) -> None:
        self.jobs[job.job_id] = job
        if job.parent:
            self.children.setdefault(job.parent, set()).add(job.job_id)

    def drop(self, job_id: str) -> None:
        job = self.jobs.pop(job_id, None)
        if job is not None and job.parent and (kids := self.children.get(job.parent)):
            kids.discard(job_id)
            if not kids:
                del self.children[job.parent]

    @classmethod
    def start(cls, path: Path) -> _Follow:
        """Begin at the log's end, before the full read: a change made meanwhile is read
        again on the next call, never missed."""
        try:
            seen = os.stat(path)
        except FileNotFoundError:
            return cls(path, 0, 0)
        return cls(path, seen.st_ino, seen.st_size)

    def read_changes(self) -> set[str] | None:
        """The ids written since; None when the log started over (or was replaced)."""
        try:
            with open(self.path, "rb") as handle:
                seen = os.fstat(handle.fileno())
                if self.inode and (seen.st_ino != self.inode or seen.st_size < self.offset):
                    return None
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return set() if not self.inode else None
        self.inode = seen.st_ino
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return {line.decode("ascii", "replace") for line in whole.split(b"\n") if line}
