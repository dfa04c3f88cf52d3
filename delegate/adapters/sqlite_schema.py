"""Bring a SQLite file to its schema once, however many processes open it for the first time
at the same moment (eight agents taking their first lock, twenty submits on a new state dir).

SQLite's busy handler does not cover every step of that: switching a new file to WAL, or
reading it while another opener does, can fail at once with "database is locked". Those steps
are retried (tenacity, imported only then: a database already at its schema costs one
`PRAGMA user_version`, which keeps the fast paths fast).
"""

from __future__ import annotations

import sqlite3

TYPE_CHECKING = False  # on the lock fast path: no typing or collections imports
if TYPE_CHECKING:
    from collections.abc import Callable

    # (connection, the version found) -> None: creates or migrates the tables, inside the
    # transaction that then records the new version
    Migrate = Callable[[sqlite3.Connection, int], None]


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def is_busy(exc: BaseException) -> bool:
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def ensure_schema(
    conn: sqlite3.Connection, version: int, migrate: Migrate, *, timeout_s: float
) -> None:
    """Make `conn`'s database WAL at `version`: one opener migrates under a write lock, the
    others find it done. `conn` must be in autocommit mode (isolation_level=None)."""
    try:
        if user_version(conn) == version:
            return
    except sqlite3.OperationalError as exc:
        if not is_busy(exc):
            raise
    # tenacity: ~10 ms, paid only when the schema is missing or busy, not on every open
    from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

    @retry(
        retry=retry_if_exception(is_busy),
        stop=stop_after_delay(timeout_s),
        wait=wait_exponential(multiplier=0.001, max=0.05),
        reraise=True,
    )
    def attempt() -> None:
        if user_version(conn) == version:
            return  # another opener did it while we waited
        conn.execute("PRAGMA journal_mode = WAL")  # persistent; never inside a transaction
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = user_version(conn)
            if found != version:
                migrate(conn, found)
                conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    attempt()


def statements(schema: str) -> Migrate:
    """A migration that runs each statement of `schema` (CREATE ... IF NOT EXISTS). Not
    executescript: that would commit the caller's transaction first."""

    def run(conn: sqlite3.Connection, found: int) -> None:
        for statement in filter(str.strip, schema.split(";")):
            conn.execute(statement)

    return run
