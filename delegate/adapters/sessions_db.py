"""The session inventory: `sessions.db` (SQLite, WAL).

A session is a tmux session the toolkit started. It may host several jobs one after the other;
`job_id` is the one it hosts now. Every change of state is also a row in `session_history`, so
"what was this session doing at 03:12" has an answer.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import _thread
import builtins
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from delegate.adapters.fsio import PRIVATE_FILE
from delegate.adapters.sqlite_schema import ensure_schema, statements
from delegate.core.errors import DelegateError
from delegate.core.model import SESSION_TRANSITIONS, Session, SessionState
from delegate.core.timefmt import record_timestamp

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    job_id TEXT,
    agent TEXT,
    workdir TEXT,
    pane_pid INTEGER,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    socket TEXT
);
CREATE TABLE IF NOT EXISTS session_history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    job_id TEXT,
    previous TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS session_history_by_name ON session_history (name, id);
CREATE INDEX IF NOT EXISTS session_history_by_job ON session_history (job_id, id);
CREATE INDEX IF NOT EXISTS sessions_by_state ON sessions (state);
CREATE TABLE IF NOT EXISTS unseen_sockets (
    socket TEXT PRIMARY KEY,
    since TEXT NOT NULL,
    reason TEXT
);
"""
# Version 2 added `socket` (the tmux server the session lives on) and the indexes by state/job;
# version 3 `unseen_sockets` (tmux servers that could not be asked, since when).
SCHEMA_VERSION = 3
_COLUMNS = "name, state, job_id, agent, workdir, pane_pid, created_at, updated_at, socket"
# Rows a monitor pass looks at: the session may still exist in tmux, or is kept on purpose.
LIVE_STATES = ("running", "stopped", "archived")


class SessionError(DelegateError):
    exit_code = 67


class HistoryEntry(NamedTuple):
    name: str
    job_id: str | None
    previous: str | None
    state: str
    reason: str | None
    at: str


def _migrate(conn: sqlite3.Connection, found: int) -> None:
    if found == 1:
        conn.execute("ALTER TABLE sessions ADD COLUMN socket TEXT")
    statements(_SCHEMA)(conn, found)


# One connection per database file, process and thread, kept for the process's life: opening
# and closing one per call cost a connect, a schema check and, at each last close, a WAL
# checkpoint with its fsyncs (a submit made a dozen). Keyed by the file's identity too, so a
# file replaced or removed underneath is opened afresh. (A thread's id may be reused by a later
# thread: that one takes over the connection, which the first no longer uses.)
_OPEN: dict[tuple[str, int, int], tuple[tuple[int, int], sqlite3.Connection]] = {}
KEPT_PER_THREAD = 4  # files a thread keeps open (a test process opens hundreds in turn)
_INHERITED: list[sqlite3.Connection] = []  # a forked child's copies: never used, never closed


def _after_fork_in_child() -> None:
    _INHERITED.extend(conn for _, conn in _OPEN.values())
    _OPEN.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return (found.st_dev, found.st_ino)


def _open(path: Path) -> tuple[tuple[int, int], sqlite3.Connection]:
    """A connection to the inventory at `path` (made when missing), at its schema."""
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE))
    conn = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        # A commit is atomic and survives a crash of the process without an fsync of its own
        # (WAL, NORMAL): only a power cut may lose the last changes, and tmux, whose sessions
        # these rows mirror, does not survive one either (the registry keeps each job's record
        # durably; the monitor finds its session gone). A submit saves four fsyncs.
        conn.execute("PRAGMA synchronous = NORMAL")
        ensure_schema(conn, SCHEMA_VERSION, _migrate, timeout_s=10)
        identity = _identity(path)
        assert identity is not None
    except BaseException:
        conn.close()
        raise
    return identity, conn


def _forget_oldest(thread: tuple[int, int]) -> None:
    """Close this thread's oldest kept connections beyond KEPT_PER_THREAD - 1."""
    mine = [key for key in _OPEN if key[1:] == thread]
    for key in mine[: max(0, len(mine) - KEPT_PER_THREAD + 1)]:
        _OPEN.pop(key)[1].close()


class SessionInventory:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            with self._connect():
                pass  # opens it, made at its schema, or says why not
        except sqlite3.Error as exc:
            raise SessionError(f"cannot open the session inventory {path}: {exc}") from None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        key = (str(self.path), os.getpid(), _thread.get_ident())
        kept = _OPEN.get(key)
        if kept is None or kept[0] != _identity(self.path):
            if kept is not None:
                kept[1].close()
                del _OPEN[key]
            _forget_oldest(key[1:])
            kept = _open(self.path)
            _OPEN[key] = kept
        yield kept[1]

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @staticmethod
    def _row(row: tuple[object, ...]) -> Session:
        name, state, job_id, agent, workdir, pane_pid, created, updated, socket = row
        return Session(
            str(name),
            SessionState(str(state)),
            None if job_id is None else str(job_id),
            None if agent is None else str(agent),
            None if workdir is None else str(workdir),
            None if pane_pid is None else int(str(pane_pid)),
            str(created),
            str(updated),
            None if socket is None else str(socket),
        )

    def record_start(
        self,
        name: str,
        *,
        job_id: str,
        agent: str | None,
        workdir: str | None,
        pane_pid: int | None,
        socket: str | None = None,
        reason: str = "started",
        replacing: str | None = None,
    ) -> Session:
        """A session starts running a job (a new session, or one that hosted jobs before).

        Raises SessionError while the session runs another job; the same job may be recorded
        again (a launch that a crash interrupted is retried). `replacing` names a job the
        caller saw ended, which its row may still show running (a job its own report ended:
        the event path moves no session row).
        """
        now = record_timestamp()
        with self._write() as conn:
            old = conn.execute(
                "SELECT state, job_id FROM sessions WHERE name = ?", (name,)
            ).fetchone()
            running = old is not None and old[0] == SessionState.RUNNING.value
            if running and old[1] not in (job_id, replacing):
                raise SessionError(f"session {name} is already running job {old[1]}")
            conn.execute(
                "INSERT INTO sessions (name, state, job_id, agent, workdir, pane_pid, created_at,"
                " updated_at, socket) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO"
                " UPDATE SET state = excluded.state, job_id = excluded.job_id,"
                " agent = excluded.agent, workdir = excluded.workdir,"
                " pane_pid = excluded.pane_pid, updated_at = excluded.updated_at,"
                " socket = excluded.socket",
                (
                    name,
                    SessionState.RUNNING.value,
                    job_id,
                    agent,
                    workdir,
                    pane_pid,
                    now,
                    now,
                    socket,
                ),
            )
            conn.execute(
                "INSERT INTO session_history (name, job_id, previous, state, reason, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, job_id, old[0] if old else None, SessionState.RUNNING.value, reason, now),
            )
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE name = ?",
                (name,),
            ).fetchone()
        return self._row(row)

    def set_pane_pid(self, name: str, pane_pid: int) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE sessions SET pane_pid = ?, updated_at = ? WHERE name = ?",
                (pane_pid, record_timestamp(), name),
            )

    def set_state(
        self,
        name: str,
        state: SessionState,
        *,
        reason: str,
        job_id: str | None = None,
        strict: bool = False,
    ) -> tuple[Session, bool]:
        """Move a session to `state`; return (session, changed). Idempotent for the same state;
        a move the table (model.SESSION_TRANSITIONS) does not allow changes nothing, or raises
        SessionError with `strict`; so does a move meant for `job_id` once the session hosts
        another job. The move is decided inside
        one transaction, so of two callers exactly one sees changed=True."""
        now = record_timestamp()
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE name = ?",
                (name,),
            ).fetchone()
            if row is None:
                raise SessionError(f"no session {name} in the inventory")
            current = self._row(row)
            if job_id is not None and current.job_id != job_id:
                return current, False
            if current.state is state:
                return current, False
            if state not in SESSION_TRANSITIONS[current.state]:
                if strict:  # a person asked for it: say why it cannot be
                    raise SessionError(
                        f"session {name} is {current.state.value}; it cannot become {state.value}"
                    )
                return current, False  # a reconcile pass saw an older state: nothing to do
            conn.execute(
                "UPDATE sessions SET state = ?, updated_at = ? WHERE name = ?",
                (state.value, now, name),
            )
            conn.execute(
                "INSERT INTO session_history (name, job_id, previous, state, reason, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (name, current.job_id, current.state.value, state.value, reason, now),
            )
        return current._replace(state=state, updated_at=now), True

    # --- tmux servers that could not be asked ----------------------------------------------

    def begin_unseen(self, socket: str, reason: str, at: str) -> bool:
        """Record that tmux on `socket` could not be asked, from `at`; True only for the caller
        that began this episode (of two at once, one), so it is reported once."""
        with self._write() as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO unseen_sockets (socket, since, reason) VALUES (?, ?, ?)",
                (socket, at, reason),
            )
            return cursor.rowcount == 1

    def end_unseen(self, socket: str) -> bool:
        """tmux on `socket` answered again; True only for the caller that ended the episode."""
        with self._write() as conn:
            cursor = conn.execute("DELETE FROM unseen_sockets WHERE socket = ?", (socket,))
            return cursor.rowcount == 1

    def unseen(self) -> dict[str, str]:
        """Socket -> when it was first not seen, for every episode not over."""
        with self._connect() as conn:
            rows = conn.execute("SELECT socket, since FROM unseen_sockets").fetchall()
        return {str(socket): str(since) for socket, since in rows}

    def get(self, name: str) -> Session | None:
        with self._connect() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE name = ?",
                (name,),
            ).fetchone()
        return None if row is None else self._row(row)

    def for_job(self, job_id: str) -> Session | None:
        prefixed = ", ".join(f"s.{c.strip()}" for c in _COLUMNS.split(","))
        with self._connect() as conn:
            row = conn.execute(
                f"SELECT {prefixed} FROM sessions s JOIN session_history h ON h.name = s.name"
                " WHERE h.job_id = ? ORDER BY h.id DESC LIMIT 1",
                (job_id,),
            ).fetchone()
        return None if row is None else self._row(row)

    def list(self) -> list[Session]:
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions ORDER BY created_at, name"
            ).fetchall()
        return [self._row(r) for r in rows]

    def _where(
        self, clause: str, params: tuple[object, ...] | builtins.list[str]
    ) -> builtins.list[Session]:
        with self._connect() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM sessions WHERE {clause}", params
            ).fetchall()
        return [self._row(r) for r in rows]

    def live(self) -> builtins.list[Session]:
        """Rows whose tmux session may still exist (running, stopped) or is kept (archived):
        what a reconcile pass needs, without the closed history."""
        marks = ", ".join("?" for _ in LIVE_STATES)
        return sorted(self._where(f"state IN ({marks})", LIVE_STATES), key=lambda s: s.name)

    def by_names(self, names: builtins.list[str]) -> dict[str, Session]:
        if not names:
            return {}
        marks = ", ".join("?" for _ in names)
        return {s.name: s for s in self._where(f"name IN ({marks})", names)}

    def history(self, name: str | None = None) -> builtins.list[HistoryEntry]:
        query = "SELECT name, job_id, previous, state, reason, at FROM session_history"
        with self._connect() as conn:
            if name is None:
                rows = conn.execute(query + " ORDER BY id").fetchall()
            else:
                rows = conn.execute(query + " WHERE name = ? ORDER BY id", (name,)).fetchall()
        return [HistoryEntry(*r) for r in rows]
