"""The dashboard's live table: one thread follows every job's events on the bus and the
registry's changes, rebuilds the table when something changed, and hands each listener the
rows that differ.

Events come from the bus (an all-jobs subscription wakes as a message lands). Registry changes
(a job registered, ended, cancelled; a record rewritten) show as a new mtime of `jobs/` (each
record is replaced by a rename), `jobs/open/` and `finished.log`, checked between bus waits.
An event's own line may reach the audit log a moment after the bus has it, so a verified
event overlays the row's last event until the log catches up.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from delegate.adapters.bus import Bus, Subscription
from delegate.core.errors import DelegateError
from delegate.core.protocol import parse_envelope, verify
from delegate.runtime.dashboard.snapshot import CostBook, table
from delegate.services.state import State

log = logging.getLogger(__name__)

WAIT_S = 0.05  # how long one bus wait lasts before the registry's mtimes are looked at
TMUX_REFRESH_S = 5.0  # tmux facts (the LIVE column) on the monitor's rhythm
DRAIN = 512  # messages taken in one go before the table is rebuilt once for all of them

Listener = Callable[[dict[str, Any]], None]


# Fields that grow with the clock: a row whose other fields are the same has not changed (the
# page adds the time since `as_of` to them itself).
CLOCK_FIELDS = frozenset({"age_s", "duration_s", "as_of"})


def _same(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    if old is None:
        return False
    return all(old.get(k) == v for k, v in new.items() if k not in CLOCK_FIELDS)


def _seq_of(last_event: str) -> int:
    head = last_event.split(" ", 1)[0]
    return int(head) if head.isdigit() else 0


class LiveTable:
    """The current table, kept up to date by `run` on its own thread."""

    def __init__(self, state: State, bus: Bus, *, recent: int = 100) -> None:
        self.state = state
        self.recent = recent
        self._bus = bus
        self._subscription: Subscription | None = None
        self._costs = CostBook(state)
        self._lock = threading.Lock()
        self._listeners: set[Listener] = set()
        self._rows: dict[str, dict[str, Any]] = {}
        self._note: str | None = None
        self._overlay: dict[str, tuple[int, str, str]] = {}  # job -> (seq, event, detail)
        self._marks: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.version = 0

    # --- what listeners see ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            rows = list(self._rows.values())
            return {"version": self.version, "rows": rows, "note": self._note, "full": True}

    def listen(self, listener: Listener) -> dict[str, Any]:
        """Add `listener` (called on this object's thread with each change) and return the
        snapshot it starts from, taken under the same lock so no change falls between."""
        with self._lock:
            self._listeners.add(listener)
            rows = list(self._rows.values())
            return {"version": self.version, "rows": rows, "note": self._note, "full": True}

    def unlisten(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)

    # --- the thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self.refresh()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="dashboard-live", daemon=True
        )
        self._thread.start()
        ready.wait(5)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

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
        last_full = time.monotonic()
        while not self._stop.is_set():
            try:
                heard = self._take_messages()
                moved = self._registry_moved()
                due = time.monotonic() - last_full >= TMUX_REFRESH_S
                if heard or moved or due:
                    self.refresh()
                    last_full = time.monotonic()
            except DelegateError as exc:  # a bus or registry hiccup: say so, keep serving
                log.warning("dashboard: live table not refreshed: %s", exc)
                time.sleep(WAIT_S)

    def _take_messages(self) -> bool:
        assert self._subscription is not None
        message = self._subscription.get(timeout=WAIT_S)
        taken = 0
        while message is not None:
            self._note_event(message.job_id, message.payload)
            taken += 1
            if taken >= DRAIN:
                break
            message = self._subscription.get(timeout=0)
        return taken > 0

    def _note_event(self, job_id: str, payload: bytes) -> None:
        """Overlay a verified event on its job's row (its audit line may not be written yet)."""
        envelope = parse_envelope(payload)
        if not isinstance(envelope, dict) or envelope.get("job_id") != job_id:
            return
        try:
            token = self.state.registry.get(job_id).auth_token
        except DelegateError:
            return
        if verify(envelope, token):
            seq, event, detail = envelope["seq"], envelope["event"], envelope["detail"]
            if seq > self._overlay.get(job_id, (0, "", ""))[0]:
                self._overlay[job_id] = (seq, event, detail)

    def _registry_moved(self) -> bool:
        jobs = self.state.registry.root
        marks = []
        for path in (jobs, jobs / "open", jobs / "finished.log"):
            try:
                marks.append(os.stat(path).st_mtime_ns)
            except FileNotFoundError:
                marks.append(0)
        if tuple(marks) == self._marks:
            return False
        self._marks = tuple(marks)
        return True

    # --- rebuilding ----------------------------------------------------------------------------

    def refresh(self) -> None:
        built = table(self.state, self._costs, recent=self.recent)
        rows: dict[str, dict[str, Any]] = built["rows"]
        self._apply_overlay(rows)
        now = time.time()
        with self._lock:
            changed = []
            for key, row in rows.items():
                old = self._rows.get(key)
                if old is not None and _same(old, row):
                    rows[key] = old  # keep the times the page already counts from
                else:
                    row["as_of"] = now
                    changed.append(row)
            removed = [key for key in self._rows if key not in rows]
            note_changed = built["note"] != self._note
            self._rows, self._note = rows, built["note"]
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

    def _apply_overlay(self, rows: dict[str, dict[str, Any]]) -> None:
        for job_id, (seq, event, detail) in list(self._overlay.items()):
            row = rows.get(job_id)
            if row is None or _seq_of(row["last_event"]) >= seq:
                del self._overlay[job_id]  # the audit log has it now (or the row is gone)
                continue
            row["last_event"], row["last_detail"] = f"{seq} {event}", detail
