"""The dashboard's live table: one thread follows every job's events on the bus and the
registry's changes, and hands each listener the rows that changed.

The table is built once (`services.ps`, as `delegate ps` lists it: the open jobs and the latest
that ended) and then kept up to date a row at a time, never rebuilt whole:

- an event heard on the bus for job J (verified with J's token) changes J's row only: its last
  event, and its state when the event moves it (started: running; completed, error: ended).
  An event's own line reaches the audit log a moment after the bus has it, so the event
  overlays the row until the log (and the record) catch up;
- a registry change (a record is replaced by a rename, so `jobs/` gets a new mtime, as do
  `jobs/open/` and `finished.log`) reloads only the records that changed: the entries of
  `jobs/open/` and each open record's inode and mtime are compared with what the table was
  built from, and the growth of `finished.log` names the jobs that ended since;
- queue positions and what queued jobs wait for are recomputed only when the open jobs
  changed state or membership;
- tmux facts (the LIVE column) are asked again on the monitor's 5 s rhythm, or at once when a
  job started, ended or arrived.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple

from delegate.adapters.bus import Bus, Subscription
from delegate.core.errors import DelegateError
from delegate.core.model import EVENT_TARGET_STATE, EventType, Job, JobState, validate_job_id
from delegate.core.protocol import parse_envelope, verify
from delegate.runtime.dashboard.snapshot import row_dict
from delegate.services import ps
from delegate.services.state import State

log = logging.getLogger(__name__)

WAIT_S = 0.05  # how long one bus wait lasts before the registry's mtimes are looked at
TMUX_REFRESH_S = 5.0  # tmux facts (the LIVE column) on the monitor's rhythm
DRAIN = 512  # messages taken in one go before the registry is looked at again

Listener = Callable[[dict[str, Any]], None]


# Fields that grow with the clock: a row whose other fields are the same has not changed (the
# page adds the time since `as_of` to them itself; `note`'s countdown it says again from the
# row's `agent_retry`).
CLOCK_FIELDS = frozenset({"age_s", "duration_s", "as_of", "note"})


def _same(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    if old is None:
        return False
    return all(old.get(k) == v for k, v in new.items() if k not in CLOCK_FIELDS)


def _seq_of(last_event: str) -> int:
    head = last_event.split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


# A file as last seen: inode, mtime, size. A record is replaced by a rename, so a rewrite is a
# new inode even within one tick of the file system's coarse clock (mtime alone can miss it).
Seen = tuple[int, int, int] | None


def _seen(path: str) -> Seen:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)


def _size(path: os.PathLike[str] | str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class Heard(NamedTuple):
    """A verified event of a job, as the bus brought it."""

    job_id: str
    seq: int
    event: str
    detail: str


def _moved_by(job: Job, event: str) -> Job:
    """`job` as its verified `event` leaves it, before its record says so."""
    try:
        target = EVENT_TARGET_STATE.get(EventType(event))
    except ValueError:
        return job
    if target is None or job.status.terminal or job.status is target:
        return job
    if target is JobState.RUNNING and job.status is not JobState.RUNNING:
        return job._replace(status=target, started_at=job.started_at or job.updated_at)
    return job._replace(status=target) if target.terminal else job


def _caught_up(job: Job, event: str) -> bool:
    """Whether `job`'s record says what its `event` moved it to."""
    return _moved_by(job, event).status is job.status


def _place(job: Job, row: dict[str, Any]) -> tuple[bool, str, str]:
    """Where `ps` lists a row: the open jobs, then those that ended, each oldest first."""
    return (JobState(row["state"]).terminal, job.created_at, job.job_id)


class LiveTable:
    """The current table, kept up to date by `run` on its own thread."""

    def __init__(self, state: State, bus: Bus, *, recent: int = 100) -> None:
        self.state = state
        self.recent = recent
        self._bus = bus
        self._subscription: Subscription | None = None
        self._lock = threading.Lock()  # the rows and listeners, as listeners see them
        self._busy = threading.Lock()  # held while the rows are worked on (`refresh` may come
        # from a request's thread while the follower works)
        self._order: dict[str, tuple[bool, str, str]] = {}  # job id -> its place in `ps`
        self._listeners: set[Listener] = set()
        self._rows: dict[str, dict[str, Any]] = {}
        self._note: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # tmux is asked on a thread of its own, so that no event waits behind a slow answer
        self._tmux_wanted = threading.Event()
        self._tmux_thread: threading.Thread | None = None
        self.version = 0
        # what the rows were built from (touched only by the thread that keeps them)
        self._jobs: dict[str, Job] = {}  # listed job id -> its record as last read
        self._open_seen: dict[str, Seen] = {}  # open job id -> its record as last seen
        self._events: dict[str, tuple[str, str]] = {}  # job id -> (last event, detail)
        self._event_sizes: dict[str, int] = {}  # open job id -> its events file's size then
        self._overlay: dict[str, Heard] = {}  # job id -> an event its log and record lack yet
        self._ended: list[str] = []  # the latest ended jobs listed, the newest last
        # ended jobs whose retry was registered before its link (`retried_by`) was written:
        # their records are watched until it is, and the row then leaves as in `ps`
        self._linking: dict[str, Seen] = {}
        self._finished_size = 0  # how much of finished.log was read
        self._marks: tuple[Seen, ...] = ()
        self._settling = False  # the registry moved at the last look: look again once
        self._synced_at = 0.0
        self._context: ps.RowContext | None = None
        self._memory: dict[str, int] = {}  # running job id -> its agent's memory, as last read

    # --- what listeners see ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._full()

    def listen(self, listener: Listener) -> dict[str, Any]:
        """Add `listener` (called on this object's thread with each change) and return the
        snapshot it starts from, taken under the same lock so no change falls between."""
        with self._lock:
            self._listeners.add(listener)
            return self._full()

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)

    def _full(self) -> dict[str, Any]:
        rows = [self._rows[key] for key in sorted(self._rows, key=self._order.__getitem__)]
        return {"version": self.version, "rows": rows, "note": self._note, "full": True}

    # --- the thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self.rebuild()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="dashboard-live", daemon=True
        )
        self._thread.start()
        self._tmux_thread = threading.Thread(target=self._ask_tmux, name="live-tmux", daemon=True)
        self._tmux_thread.start()
        ready.wait(5)

    def stop(self) -> None:
        self._stop.set()
        self._tmux_wanted.set()
        for thread in (self._thread, self._tmux_thread):
            if thread is not None:
                thread.join(timeout=2)

    def _run(self, ready: threading.Event) -> None:
        # every job's events from now on (what came before is in the first table), on a
        # connection of this thread's own: SQLite's may not cross threads
        self._subscription = self._bus.subscribe(None, live_only=True)
        ready.set()
        try:
            self._follow()
        finally:
            self._subscription.close()

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                heard = self._take_messages()
                with self._busy:
                    # the events of listed jobs first: a registry sync may read a later event
                    # from the log, and each event heard is to be shown before it is passed
                    known = [h for h in heard if h.job_id in self._jobs]
                    new = [h for h in heard if h.job_id not in self._jobs]
                    self._apply_heard(known)
                    if self._registry_due():
                        self._sync_registry(tmux_now=False)
                    self._apply_heard(new)
            except DelegateError as exc:  # a bus or registry hiccup: say so, keep serving
                log.warning("dashboard: live table not refreshed: %s", exc)
                time.sleep(WAIT_S)

    def _take_messages(self) -> list[Heard]:
        assert self._subscription is not None
        message = self._subscription.get(timeout=WAIT_S)
        heard: list[Heard] = []
        while message is not None:
            verified = self._verified(message.job_id, message.payload)
            if verified is not None:
                heard.append(verified)
            if len(heard) >= DRAIN:
                break
            message = self._subscription.get(timeout=0)
        return heard

    def _verified(self, job_id: str, payload: bytes) -> Heard | None:
        envelope = parse_envelope(payload)
        if not isinstance(envelope, dict) or envelope.get("job_id") != job_id:
            return None
        job = self._jobs.get(job_id)
        try:
            token = (
                job.auth_token if job is not None else self.state.registry.get(job_id).auth_token
            )
        except DelegateError:
            return None
        if not verify(envelope, token):
            return None
        return Heard(job_id, envelope["seq"], envelope["event"], str(envelope["detail"] or ""))

    def _registry_due(self) -> bool:
        """Whether to look at the registry's records: its folders or finished.log moved, or
        moved at the last look (a second change within the same tick of the file system's
        clock leaves a folder's mtime as it was), or on the tmux rhythm in any case."""
        moved = self._registry_moved()
        due = moved or self._settling or time.monotonic() - self._synced_at >= TMUX_REFRESH_S
        self._settling = moved
        if due:
            self._synced_at = time.monotonic()
        return due

    def _registry_moved(self) -> bool:
        jobs = self.state.registry.root
        marks = tuple(_seen(str(p)) for p in (jobs, jobs / "open", jobs / "finished.log"))
        if marks == self._marks:
            return False
        self._marks = marks
        return True

    # --- building and keeping the rows --------------------------------------------------------

    def rebuild(self) -> None:
        """Build the whole table from the registry (at start)."""
        with self._busy:
            self._registry_moved()
            registry = self.state.registry
            self._finished_size = _size(registry.root / "finished.log")
            self._open_seen = {
                name: _seen(str(registry.root / f"{name}.json"))
                for name in os.listdir(registry.open_dir)
            }
            open_jobs = registry.open_jobs()
            latest = registry.recent_finished(self.recent)  # newest first
            ended = sorted(latest, key=lambda j: (j.created_at, j.job_id))
            self._jobs = {j.job_id: j for j in open_jobs + ended}
            self._ended = [j.job_id for j in reversed(latest)]
            self._events = {}
            for job in open_jobs + ended:
                self._read_events(job.job_id)
            self._context = ps.row_context(self.state, open_jobs + ended)
            self._publish(list(self._jobs), self._context.tmux.note)

    def refresh(self) -> None:
        """Bring the table up to the registry now (after an action of this process's own)."""
        with self._busy:
            self._registry_moved()
            self._sync_registry(tmux_now=True)

    def _read_events(self, job_id: str) -> None:
        self._event_sizes[job_id] = _size(self.state.audit.events_path(job_id))
        self._events[job_id] = ps.last_event_detail(self.state, job_id)

    def _sync_registry(self, *, tmux_now: bool) -> None:
        """Reload the records that changed since the table was built from them; when one
        arrived, left or changed state, ask tmux again: now (`tmux_now`), or on its thread."""
        changed = self._changed_records()
        if not changed:
            return
        moved = False  # a job arrived, left or changed state: the queue and tmux may differ
        gone = []
        for job_id in changed:
            reloaded = self._reload(job_id)
            if reloaded is None:
                gone.append(job_id)  # vanished, or open but out of the index: `ps` skips it
            moved = moved or reloaded is not False
        gone += self._trim_ended()
        if moved or gone:
            self._refresh_queue()
            # the changed rows at once, from the tmux facts as last asked (a new job's LIVE
            # reads "-" for that moment): asking tmux takes 10-200 ms on a busy machine
            self._publish(sorted(changed & self._jobs.keys()), self._note)
            if tmux_now:
                self._refresh_tmux()  # every row again, with the new facts
            else:
                self._tmux_wanted.set()
        else:
            self._publish(sorted(changed & self._jobs.keys()), self._note)
        if gone:
            self._publish([], self._note, removed=gone)

    def _reload(self, job_id: str) -> bool | None:
        """Read one changed record again: None when it is to leave the table, True when the
        job arrived or changed state, False when only its record was rewritten."""
        old = self._jobs.get(job_id)
        try:
            job = self.state.registry.get(job_id)
        except DelegateError:
            job = None
        if job is None or not (job.status.terminal or job_id in self._open_seen):
            self._forget(job_id)
            return None
        self._jobs[job_id] = job
        moved = old is None or old.status is not job.status
        if moved:
            # a record rewritten by a `progress` brings no event the bus does not (its log
            # may be ahead of the bus: read now, it would pass over an event not yet shown);
            # a log grown without the bus is read on the tmux rhythm
            self._read_events(job_id)
        if job.status.terminal:
            self._open_seen.pop(job_id, None)
            self._event_sizes.pop(job_id, None)
            if job_id in self._ended:
                self._ended.remove(job_id)
            self._ended.append(job_id)
        self._watch_link(job)
        return moved

    def _changed_records(self) -> set[str]:
        """Open jobs whose record is new or rewritten, jobs that left the open index, and the
        jobs finished.log names since it was last read."""
        registry = self.state.registry
        root = str(registry.root)
        try:
            open_now = set(os.listdir(registry.open_dir))
        except FileNotFoundError:
            open_now = set()
        changed = set()
        for name in open_now:
            seen = _seen(f"{root}/{name}.json")
            if name not in self._open_seen or self._open_seen[name] != seen:
                try:
                    validate_job_id(name)
                except DelegateError:
                    continue
                self._open_seen[name] = seen
                changed.add(name)
        left = [j for j in self._open_seen if j not in open_now]
        for job_id in left:
            del self._open_seen[job_id]
        changed.update(left)
        changed.update(self._newly_ended())
        for job_id, before in list(self._linking.items()):
            seen = _seen(f"{root}/{job_id}.json")
            if seen != before:
                self._linking[job_id] = seen
                changed.add(job_id)
        return changed

    def _watch_link(self, job: Job) -> None:
        """A new attempt of a listed job: watch that job until its record names it."""
        earlier = self._jobs.get(job.retry_of or "")
        if earlier is not None and not earlier.retried_by:  # (its end may not be read yet)
            self._linking[earlier.job_id] = None
        if job.retried_by:
            self._linking.pop(job.job_id, None)

    def _newly_ended(self) -> list[str]:
        path = self.state.registry.root / "finished.log"
        try:
            with path.open("rb") as handle:
                handle.seek(self._finished_size)
                grown = handle.read()
        except FileNotFoundError:
            return []
        whole = grown[: grown.rfind(b"\n") + 1]  # a line still being written: next time
        self._finished_size += len(whole)
        return [line.decode("ascii", "replace") for line in whole.split(b"\n") if line]

    def _trim_ended(self) -> list[str]:
        """Drop the ended jobs beyond the `recent` latest; return their ids."""
        if len(self._ended) <= self.recent:
            return []
        cut = len(self._ended) - self.recent
        gone, self._ended = self._ended[:cut], self._ended[cut:]
        for job_id in gone:
            self._forget(job_id)
        return gone

    def _forget(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._events.pop(job_id, None)
        self._overlay.pop(job_id, None)
        self._open_seen.pop(job_id, None)
        self._event_sizes.pop(job_id, None)
        self._linking.pop(job_id, None)
        if job_id in self._ended:
            self._ended.remove(job_id)

    def _open_jobs(self) -> list[Job]:
        return sorted(
            (j for j in self._jobs.values() if not j.status.terminal),
            key=lambda j: (j.created_at, j.job_id),
        )

    def _refresh_queue(self) -> None:
        assert self._context is not None
        open_jobs = self._open_jobs()
        self._context = self._context._replace(
            positions=ps.queue_positions(open_jobs),
            waiting=ps.waiting_reasons(self.state, open_jobs, open_jobs),
        )

    def _ask_tmux(self) -> None:
        """The tmux thread: ask tmux on its rhythm, or at once when the jobs moved, without
        holding the rows while it answers; then redo the rows with its facts."""
        while not self._stop.is_set():
            self._tmux_wanted.wait(TMUX_REFRESH_S)
            self._tmux_wanted.clear()  # (a move from now on asks again)
            if self._stop.is_set():
                return
            with self._busy:
                jobs = list(self._jobs.values())
            try:
                facts = ps.tmux_facts(self.state, jobs)
            except DelegateError as exc:
                log.warning("dashboard: tmux not asked: %s", exc)
                continue
            memory = ps.live_memory(jobs, facts)  # (read outside the rows' lock, as tmux)
            with self._busy:
                self._memory = memory
                self._apply_tmux(facts)

    def _refresh_tmux(self) -> None:
        """Ask tmux again now (and read the agents' memory) and redo every row with its facts."""
        jobs = list(self._jobs.values())
        facts = ps.tmux_facts(self.state, jobs)
        self._memory = ps.live_memory(jobs, facts)
        self._apply_tmux(facts)

    def _apply_tmux(self, facts: ps.TmuxFacts) -> None:
        """Every row again with tmux's `facts` (and any event a bus did not bring: an events
        file that grew)."""
        assert self._context is not None
        self._context = self._context._replace(now=datetime.now(UTC), tmux=facts)
        for job_id in list(self._event_sizes):
            if _size(self.state.audit.events_path(job_id)) != self._event_sizes[job_id]:
                self._read_events(job_id)
        self._publish(list(self._jobs), facts.note)

    def _apply_heard(self, heard: list[Heard]) -> None:
        """Each event changes its job's row; a job heard twice in one go is shown twice."""
        batch: list[str] = []
        for event in heard:
            shown = self._overlay.get(event.job_id)
            if event.job_id not in self._jobs or (shown is not None and shown.seq >= event.seq):
                continue
            known = _seq_of(self._events.get(event.job_id, ("", ""))[0]) >= event.seq
            if known and _caught_up(self._jobs[event.job_id], event.event):
                continue  # (a log read ahead of the record still needs the event's state)
            if event.job_id in batch:
                self._publish(batch, self._note)
                batch = []
            self._overlay[event.job_id] = event
            batch.append(event.job_id)
        if batch:
            self._publish(batch, self._note)

    def _row(self, job_id: str) -> dict[str, Any]:
        """A job's row, from its record and last event with any event heard ahead of them."""
        assert self._context is not None
        job = self._jobs[job_id]
        event = self._events.get(job_id, ("", ""))
        heard = self._overlay.get(job_id)
        if heard is not None:
            if _seq_of(event[0]) >= heard.seq and _caught_up(job, heard.event):
                del self._overlay[job_id]  # the log and the record have it now
            else:
                if _seq_of(event[0]) < heard.seq:
                    event = (f"{heard.seq} {heard.event}", heard.detail)
                job = _moved_by(job, heard.event)
        context = self._context._replace(now=datetime.now(UTC))
        row = ps.row_for(self.state, job, context, event)
        # memory: a running agent's now (as the tmux thread last read it), an ended one's peak
        # (kept only for a job with limits: runtime/limited)
        memory = job.peak_memory_bytes if job.status.terminal else self._memory.get(job_id)
        return row_dict(row, job.cost_usd if job.status.terminal else None, memory)

    def _publish(
        self, job_ids: list[str], note: str | None, removed: list[str] | None = None
    ) -> None:
        """Hand listeners the rows of `job_ids` that differ from what they have; an attempt
        that was retried is shown by its latest attempt, as `ps` does."""
        listed = [j for j in job_ids if j in self._jobs]
        retried = [j for j in listed if self._jobs[j].retried_by]
        built = {j: self._row(j) for j in listed if not self._jobs[j].retried_by}
        removed = [*(removed or ()), *retried]
        now = time.time()
        with self._lock:
            changed = []
            for key, row in built.items():
                if not _same(self._rows.get(key), row):
                    row["as_of"] = now
                    self._rows[key] = row
                    self._order[key] = _place(self._jobs[key], row)
                    changed.append(row)
            removed = [key for key in removed if self._rows.pop(key, None) is not None]
            for key in removed:
                self._order.pop(key, None)
            note_changed = note != self._note
            self._note = note
            if not (changed or removed or note_changed):
                return
            self.version += 1
            delta = {
                "version": self.version,
                "rows": changed,
                "removed": removed,
                "note": self._note,
                "full": False,
            }
            listeners = list(self._listeners)
        for listener in listeners:
            listener(delta)
