"""JSONL export of what is new since an export's last run, exactly once per line in a file.

Each (source, target file) remembers in `coord.db` the last seq it wrote and the file's size
after it. A run first cuts the file back to that size (lines of a run killed before it could
record them), appends a batch, fsyncs, then records the new seq and size: a crash anywhere
leaves either the old record with a cut-back tail or the new one, so no line is written twice and
none is lost. Two exports to one file at once are serialised by a lock on the file. To stdout
the same run is at least once: a line is recorded only after it was written.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

from delegate.coord.messages import MESSAGE_COLUMNS, as_dict
from delegate.coord.store import CoordError, CoordStore
from delegate.core.errors import UsageError

BATCH = 1000

Fetch = Callable[[int, int], list[tuple[int, dict[str, Any]]]]


def _line(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _state(store: CoordStore, source: str, target: str) -> tuple[int, int]:
    rows = store.read(
        "SELECT last_seq, size FROM exports WHERE source = ? AND target = ?", (source, target)
    )
    return (int(rows[0][0]), int(rows[0][1])) if rows else (0, 0)


def _record(store: CoordStore, source: str, target: str, last_seq: int, size: int) -> None:
    with store.write() as conn:
        conn.execute(
            "INSERT INTO exports (source, target, last_seq, size, updated_ms)"
            " VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(source, target) DO UPDATE SET last_seq = excluded.last_seq,"
            " size = excluded.size, updated_ms = excluded.updated_ms",
            (source, target, last_seq, size, store.now()),
        )


def export(
    store: CoordStore, source: str, fetch: Fetch, out: Path | None, *, stream: TextIO | None = None
) -> dict[str, Any]:
    """Append what `fetch(after_seq, limit)` has beyond the last run to `out` (or `stream`)."""
    if out is None:
        return _to_stream(store, source, fetch, stream or sys.stdout)
    path = out.expanduser().absolute()
    if path.exists() and not path.is_file():
        raise UsageError(f"{path} is not a regular file")
    target = str(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot open {path}: {exc.strerror}") from None
    written = 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        last_seq, size = _state(store, source, target)
        actual = os.fstat(fd).st_size
        if actual == 0 and size > 0:
            size = 0  # the file was removed or emptied: carry on from the last seq into it
        elif actual < size:
            raise CoordError(
                f"{path} is shorter than the last export left it ({actual} < {size} bytes):"
                " it was changed by hand; export to a new file"
            )
        elif actual > size:
            os.ftruncate(fd, size)  # written by a run that died before recording it
        while batch := fetch(last_seq, BATCH):
            data = b"".join(_line(record) for _, record in batch)
            os.lseek(fd, size, os.SEEK_SET)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            size += len(data)
            last_seq = batch[-1][0]
            _record(store, source, target, last_seq, size)
            written += len(batch)
    finally:
        os.close(fd)
    return {"source": source, "out": target, "written": written, "last_seq": last_seq}


def _to_stream(store: CoordStore, source: str, fetch: Fetch, stream: TextIO) -> dict[str, Any]:
    last_seq, _ = _state(store, source, "-")
    written = 0
    while batch := fetch(last_seq, BATCH):
        for _, record in batch:
            stream.write(_line(record).decode())
        stream.flush()
        last_seq = batch[-1][0]
        _record(store, source, "-", last_seq, 0)
        written += len(batch)
    return {"source": source, "out": "-", "written": written, "last_seq": last_seq}


def message_rows(store: CoordStore) -> Fetch:
    def fetch(after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        rows = store.read(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq > ? ORDER BY seq LIMIT ?",  # noqa: S608
            (after, limit),
        )
        return [(int(r[0]), as_dict(store, r, resolve=False)) for r in rows]

    return fetch


@contextlib.contextmanager
def bus_rows(bus_db: Path) -> Iterator[Fetch]:
    """Job events of the SQLite bus at `bus_db`, opened read-only for the export's length."""
    if not bus_db.exists():  # no job has published yet: nothing to export
        yield lambda after, limit: []
        return
    try:
        conn = sqlite3.connect(f"file:{bus_db}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error as exc:
        raise CoordError(f"cannot open the bus {bus_db}: {exc}") from None
    blobs = bus_db.parent / "blobs"

    def fetch(after: int, limit: int) -> list[tuple[int, dict[str, Any]]]:
        rows = conn.execute(
            "SELECT seq, job_id, ts_ms, retain, payload, payload_ref FROM messages"
            " WHERE seq > ? ORDER BY seq LIMIT ?",
            (after, limit),
        ).fetchall()
        out = []
        for seq, job_id, ts_ms, retain, payload, ref in rows:
            record: dict[str, Any] = {
                "seq": seq,
                "job_id": job_id,
                "ts_ms": ts_ms,
                "retain": bool(retain),
            }
            raw = payload
            if ref is not None:
                record["payload_ref"] = ref
                try:
                    raw = (blobs / ref).read_bytes() if "/" not in ref else None
                except OSError:
                    raw = None
            try:
                record["event"] = json.loads(raw) if raw is not None else None
            except ValueError:
                record["event"] = None
                record["payload_error"] = "not_json"
            out.append((int(seq), record))
        return out

    try:
        yield fetch
    finally:
        conn.close()
