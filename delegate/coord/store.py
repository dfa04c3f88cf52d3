"""`coord.db`: one SQLite file in WAL mode holding every coordination table.

Writers take the write lock at the start of their transaction (`BEGIN IMMEDIATE`), so a
check-then-act (is the lock free? then take it) is never split by another writer. Commits use
`synchronous = NORMAL`: in WAL mode that never corrupts the file and loses at most the last
commits on a power cut, when every process that held a lock or lease is gone too. Messages are
the exception: a sent message is acknowledged only once it is on disk (`synchronous = FULL`).
"""

from __future__ import annotations

import os
import sqlite3
import time

from delegate.adapters.sqlite_schema import ensure_schema, statements
from delegate.core import fastjson as json
from delegate.core.errors import DelegateError

TYPE_CHECKING = False  # `lock acquire` opens the store: no typing or contextlib on its path
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from types import TracebackType
    from typing import Any

    Clock = Callable[[], int]

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 10_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS fences (
    kind TEXT NOT NULL, name TEXT NOT NULL, last_token INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE TABLE IF NOT EXISTS leases (
    kind TEXT NOT NULL, name TEXT NOT NULL, owner TEXT NOT NULL, token INTEGER NOT NULL,
    acquired_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, name)
);
CREATE INDEX IF NOT EXISTS leases_by_owner ON leases (owner);
CREATE TABLE IF NOT EXISTS heartbeats (
    agent TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL, status TEXT NOT NULL,
    task TEXT, progress REAL
);
CREATE TABLE IF NOT EXISTS blocks (
    agent TEXT NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL, since_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, kind, target)
);
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    ts_ms INTEGER NOT NULL,
    from_agent TEXT NOT NULL,
    to_agent TEXT,
    type TEXT NOT NULL,
    correlation_id TEXT,
    in_reply_to TEXT,
    payload TEXT,
    payload_ref TEXT,
    CHECK (payload IS NULL OR payload_ref IS NULL)
);
CREATE INDEX IF NOT EXISTS messages_to ON messages (to_agent, seq);
CREATE TABLE IF NOT EXISTS cursors (
    agent TEXT PRIMARY KEY, last_acked_seq INTEGER NOT NULL, updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS exports (
    source TEXT NOT NULL, target TEXT NOT NULL, last_seq INTEGER NOT NULL,
    size INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
    PRIMARY KEY (source, target)
);
CREATE TABLE IF NOT EXISTS board (
    id TEXT PRIMARY KEY, opened_ms INTEGER NOT NULL, voters TEXT NOT NULL,
    rounds INTEGER NOT NULL, approve REAL NOT NULL, review REAL NOT NULL, reject REAL NOT NULL,
    proposal TEXT, phase TEXT NOT NULL, resolution TEXT, resolved_ms INTEGER
);
CREATE TABLE IF NOT EXISTS board_posts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, board TEXT NOT NULL, voter TEXT NOT NULL,
    step TEXT NOT NULL, round INTEGER NOT NULL, body TEXT NOT NULL, ts_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS board_posts_by_board ON board_posts (board, step, round);
CREATE TABLE IF NOT EXISTS blackboard (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, source_agent TEXT, updated_ms INTEGER NOT NULL,
    ttl_ms INTEGER, expires_ms INTEGER, version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ms INTEGER NOT NULL, kind TEXT NOT NULL,
    actor TEXT NOT NULL, subject TEXT NOT NULL, data TEXT NOT NULL
);
"""


class CoordError(DelegateError):
    """The coordination database could not be used."""

    exit_code = 74


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class CoordStore:
    """An open `coord.db`; `now` gives epoch milliseconds (injectable)."""

    def __init__(self, path: Path | str, *, now: Clock = wall_ms) -> None:
        self.path = path  # a Path, or a str on the fast path (pathlib costs ~6 ms to import)
        self.now = now
        try:
            if not os.path.exists(path):
                # pathlib, fsio: only to create the file; `lock check|release` open without them
                from pathlib import Path

                from delegate.adapters.fsio import PRIVATE_FILE, ensure_private_dir  # as pathlib

                ensure_private_dir(Path(path).parent)
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.conn.execute("PRAGMA synchronous = NORMAL")
            ensure_schema(
                self.conn, SCHEMA_VERSION, statements(_SCHEMA), timeout_s=BUSY_TIMEOUT_MS / 1000
            )
        except (OSError, sqlite3.Error) as exc:
            raise CoordError(f"cannot open the coordination database {path}: {exc}") from None

    @property
    def blob_dir(self) -> Path:
        from pathlib import Path  # pathlib: ~6 ms the lock fast path does without (see above)

        return Path(self.path).parent / "coord-blobs"

    def write(self) -> _Write:
        """One write transaction (`with store.write() as conn:`), holding the write lock from
        its first statement; an exception rolls it back."""
        return _Write(self)

    def read(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise CoordError(f"{self.path}: {exc}") from None

    def data_version(self) -> int:
        """Changes whenever another connection commits: a cheap "anything new?" for waiters."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def wait_for_change(self, until: float, *, wake_at_ms: int | None = None) -> bool:
        """Block until another process commits, `wake_at_ms` (epoch ms) passes, or the monotonic
        `until`; True when something changed. Polls `data_version`, which reads no page, from
        0.5 ms backing off to 10 ms, so a waiter notices a commit within milliseconds."""
        seen = self.data_version()
        delay = 0.0005
        while True:
            now = time.monotonic()
            if now >= until or (wake_at_ms is not None and self.now() >= wake_at_ms):
                return False
            time.sleep(min(delay, until - now))
            if self.data_version() != seen:
                return True
            delay = min(delay * 1.5, 0.01)

    def record(
        self, conn: sqlite3.Connection, kind: str, actor: str, subject: str, **data: object
    ) -> dict[str, object]:
        """Log a coordination event inside the caller's transaction: it exists exactly when the
        change it tells of does. Returns the event, for publishing on the job's bus too."""
        now = self.now()
        body = json.dumps(data)
        cur = conn.execute(
            "INSERT INTO events (ts_ms, kind, actor, subject, data) VALUES (?, ?, ?, ?, ?)",
            (now, kind, actor, subject, body),
        )
        return {
            "seq": cur.lastrowid,
            "ts_ms": now,
            "kind": kind,
            "actor": actor,
            "subject": subject,
            **data,
        }

    def close(self) -> None:
        self.conn.close()


class _Write:
    __slots__ = ("store",)

    def __init__(self, store: CoordStore) -> None:
        self.store = store

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.store.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise CoordError(f"{self.store.path}: {exc}") from None
        return self.store.conn

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn = self.store.conn
        if kind is not None:
            conn.execute("ROLLBACK")
            return
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as error:
            conn.execute("ROLLBACK")
            raise CoordError(f"{self.store.path}: {error}") from None
