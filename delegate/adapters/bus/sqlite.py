"""The embedded bus: one SQLite file in WAL mode, no server.

Every message gets a monotonic `seq` (AUTOINCREMENT; commits are serialised, so readers never
see a gap fill in later). Payloads over 4 KiB go to content-addressed files under `blobs/`.
A durable consumer's cursor is stored only when it acknowledges, so delivery is at-least-once.
Waiting readers poll `PRAGMA data_version`, which costs no disk read, with a back-off that stays
at a millisecond or two while messages flow and relaxes to 25 ms when the bus is quiet.
"""

from __future__ import annotations

import _thread
import os
import sqlite3
import time
from collections import deque
from pathlib import Path

from delegate.adapters.bus.base import Message
from delegate.adapters.fsio import PRIVATE_FILE, atomic_write, ensure_private_dir
from delegate.adapters.sqlite_schema import ensure_schema, statements
from delegate.core.errors import BusError

BLOB_THRESHOLD = 4096
SCHEMA_VERSION = 2
BUSY_TIMEOUT_MS = 10_000
BATCH = 256

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    retain INTEGER NOT NULL DEFAULT 0,
    payload BLOB,
    payload_ref TEXT,
    CHECK ((payload IS NULL) <> (payload_ref IS NULL))
);
CREATE INDEX IF NOT EXISTS messages_by_job ON messages (job_id, seq);
CREATE TABLE IF NOT EXISTS cursors (
    consumer TEXT PRIMARY KEY,
    last_seq INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
INSERT OR IGNORE INTO cursors (consumer, last_seq, updated_ms)
    SELECT 'supervisor', COALESCE(MAX(seq), 0), 0 FROM messages;
"""
# (the state dir's supervisor's cursor: on a new bus from its first message, so no event is
# missed by a supervisor that starts late; on a bus of an older version, from its end)


def _connect(path: Path, *, shared: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=not shared
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA synchronous = FULL")  # a publish is acknowledged only once durable
    return conn


class SqliteBus:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.url = f"sqlite://{path}"
        self.blob_dir = path.parent / "blobs"
        self._conn: sqlite3.Connection | None = None
        # _thread, not threading: the same lock without threading's import on the publish path
        self._publish_lock = _thread.allocate_lock()
        try:
            ensure_private_dir(path.parent)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
            # Publishing may come from any thread (a monitor's workers); calls are serialised.
            conn = _connect(path, shared=True)
            ensure_schema(
                conn, SCHEMA_VERSION, statements(_SCHEMA), timeout_s=BUSY_TIMEOUT_MS / 1000
            )
        except (OSError, sqlite3.Error) as exc:
            raise BusError(f"cannot open the SQLite bus at {path}: {exc}") from None
        self._conn = conn

    @classmethod
    def from_url(cls, url: str) -> SqliteBus:
        raw = url.split("://", 1)[1]
        path = Path(raw.split("?", 1)[0])
        if not path.is_absolute():
            raise BusError(f"SQLite bus URL {url!r} needs an absolute path (sqlite:///abs/bus.db)")
        return cls(path)

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BusError("the bus is closed")
        return self._conn

    def publish(self, job_id: str, payload: bytes, *, retain: bool = False) -> None:
        conn = self._live()
        inline: bytes | None = payload
        ref = None
        if len(payload) > BLOB_THRESHOLD:
            ref = self._store_blob(payload)
            inline = None
        try:
            with self._publish_lock:
                conn.execute(
                    "INSERT INTO messages (job_id, ts_ms, retain, payload, payload_ref)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (job_id, time.time_ns() // 1_000_000, int(retain), inline, ref),
                )
        except sqlite3.Error as exc:
            raise BusError(f"the SQLite bus did not take the message: {exc}") from None

    def _store_blob(self, payload: bytes) -> str:
        import hashlib  # OpenSSL's _hashlib (~4 ms): only for a payload stored as a blob

        ref = "sha256-" + hashlib.sha256(payload).hexdigest()
        ensure_private_dir(self.blob_dir)
        target = self.blob_dir / ref
        if not target.exists():
            atomic_write(target, payload)
        return ref

    def load_blob(self, ref: str) -> bytes | None:
        if not ref.startswith("sha256-") or "/" in ref:
            return None
        try:
            return (self.blob_dir / ref).read_bytes()
        except FileNotFoundError:
            return None

    def subscribe(
        self, job_id: str | None = None, *, consumer: str | None = None, live_only: bool = False
    ) -> SqliteSubscription:
        """`live_only` changes nothing here: an all-jobs listener without a consumer name
        starts from now anyway, and nothing is retained apart from the history."""
        self._live()
        return SqliteSubscription(self, job_id, consumer)

    def probe(self) -> None:
        try:
            self._live().execute("SELECT COUNT(*) FROM cursors").fetchone()
        except sqlite3.Error as exc:
            raise BusError(f"the SQLite bus at {self.path} does not answer: {exc}") from None

    def cursor(self, consumer: str) -> int | None:
        """Where `consumer` read up to (None: it never read here)."""
        row = (
            self._live()
            .execute("SELECT last_seq FROM cursors WHERE consumer = ?", (consumer,))
            .fetchone()
        )
        return None if row is None else int(row[0])

    def set_cursor(self, consumer: str, seq: int) -> None:
        """Begin `consumer`'s cursor at `seq` (it reads what comes after), unless it has one."""
        try:
            self._live().execute(
                "INSERT OR IGNORE INTO cursors (consumer, last_seq, updated_ms) VALUES (?, ?, ?)",
                (consumer, seq, time.time_ns() // 1_000_000),
            )
        except sqlite3.Error as exc:
            raise BusError(f"could not store the cursor of {consumer}: {exc}") from None

    def last_seq(self) -> int:
        row = self._live().execute("SELECT COALESCE(MAX(seq), 0) FROM messages").fetchone()
        return int(row[0])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class SqliteSubscription:
    """Reads one job's messages (or all) in seq order; see the module docstring for waiting."""

    def __init__(self, bus: SqliteBus, job_id: str | None, consumer: str | None) -> None:
        self._bus = bus
        self._job_id = job_id
        self._consumer = consumer
        self._conn: sqlite3.Connection | None = _connect(bus.path)
        self._buffer: deque[Message] = deque()
        self._last_delivery = time.monotonic()
        self._data_version = -1
        self._more = False  # the last fetch filled a whole batch: read on without a change
        if consumer is not None:
            row = self._conn.execute(
                "SELECT last_seq FROM cursors WHERE consumer = ?", (consumer,)
            ).fetchone()
            self._position = int(row[0]) if row else 0
        elif job_id is None:
            self._position = bus.last_seq()  # a passing all-jobs listener starts from now
        else:
            self._position = 0  # one job's whole history: a late subscriber misses nothing

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise BusError("the subscription is closed")
        return self._conn

    def _fetch(self) -> None:
        conn = self._live()
        if self._job_id is None:
            rows = conn.execute(
                "SELECT seq, job_id, payload, payload_ref FROM messages"
                " WHERE seq > ? ORDER BY seq LIMIT ?",
                (self._position, BATCH),
            ).fetchall()
        else:
            rows = conn.execute(
                "SELECT seq, job_id, payload, payload_ref FROM messages"
                " WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (self._job_id, self._position, BATCH),
            ).fetchall()
        self._more = len(rows) == BATCH
        for seq, job_id, payload, ref in rows:
            problem = None
            if ref is not None:
                payload = self._bus.load_blob(ref)
                if payload is None:
                    payload, problem = b"", "blob_missing"
            self._buffer.append(Message(job_id, bytes(payload), handle=seq, problem=problem))
            self._position = seq

    def _changed(self) -> bool:
        version = self._live().execute("PRAGMA data_version").fetchone()[0]
        changed = bool(version != self._data_version)
        self._data_version = version
        return changed

    def get(self, timeout: float | None = None) -> Message | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.0005
        while True:
            if not self._buffer and (self._more or self._changed()):
                self._fetch()
            if self._buffer:
                self._last_delivery = time.monotonic()
                return self._buffer.popleft()
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return None
            quiet_for = now - self._last_delivery
            cap = 0.002 if quiet_for < 1.0 else 0.010 if quiet_for < 10.0 else 0.025
            pause = min(pause * 1.5, cap)
            time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - now)))

    # an ack moves the cursor past every message before it too (its last_seq only grows)
    acks_up_to = True

    def ack(self, message: Message) -> None:
        if self._consumer is None:
            return
        try:
            self._live().execute(
                "INSERT INTO cursors (consumer, last_seq, updated_ms) VALUES (?, ?, ?)"
                " ON CONFLICT(consumer) DO UPDATE SET"
                " last_seq = MAX(cursors.last_seq, excluded.last_seq),"
                " updated_ms = excluded.updated_ms",
                (self._consumer, int(message.handle), time.time_ns() // 1_000_000),
            )
        except sqlite3.Error as exc:
            raise BusError(f"could not store the cursor of {self._consumer}: {exc}") from None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
