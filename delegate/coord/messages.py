"""Addressed messages between agents, with cursors moved only by acknowledgement.

`send` stores a message (idempotent by its id; payloads over 4 KiB go to content-addressed blobs
under `coord-blobs/`) and is durable when it returns. `receive` returns what an agent has not yet
acknowledged, addressed to it or to everyone, in seq order; `ack` moves its cursor forward only.
So delivery is at least once: a receiver that dies before acking gets the same messages again.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from delegate.adapters.fsio import atomic_write, ensure_private_dir
from delegate.coord.store import CoordError, CoordStore
from delegate.core.errors import UsageError

BLOB_THRESHOLD = 4096
MAX_PAYLOAD = 16 << 20
MAX_FIELD = 256
MESSAGE_COLUMNS = (
    "seq, id, ts_ms, from_agent, to_agent, type, correlation_id, in_reply_to, payload, payload_ref"
)


def _field(name: str, value: str | None, *, required: bool = False) -> None:
    if value is None:
        if required:
            raise UsageError(f"--{name} is needed")
        return
    if not value or len(value) > MAX_FIELD or not value.isprintable():
        raise UsageError(f"--{name} is 1 to {MAX_FIELD} printable characters")


def send(
    store: CoordStore,
    *,
    sender: str,
    type_: str,
    to: str | None = None,
    data: Any = None,
    correlation_id: str | None = None,
    reply_to: str | None = None,
    message_id: str | None = None,
) -> dict[str, Any]:
    """Store one message; sending the same id again returns the first one's seq."""
    _field("from", sender, required=True)
    _field("type", type_, required=True)
    _field("to", to)
    _field("correlation", correlation_id)
    _field("reply-to", reply_to)
    _field("id", message_id)
    message_id = message_id or str(uuid.uuid4())
    payload = ref = None
    if data is not None:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        raw = text.encode()
        if len(raw) > MAX_PAYLOAD:
            raise UsageError(f"a message payload is at most {MAX_PAYLOAD} bytes")
        if len(raw) > BLOB_THRESHOLD:
            ref = _store_blob(store, raw)
        else:
            payload = text
    store.conn.execute("PRAGMA synchronous = FULL")  # acknowledged only once on disk
    try:
        with store.write() as conn:
            row = conn.execute("SELECT seq FROM messages WHERE id = ?", (message_id,)).fetchone()
            if row is not None:
                return {"id": message_id, "seq": row[0], "duplicate": True}
            cur = conn.execute(
                "INSERT INTO messages (id, ts_ms, from_agent, to_agent, type, correlation_id,"
                " in_reply_to, payload, payload_ref) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    message_id,
                    store.now(),
                    sender,
                    to,
                    type_,
                    correlation_id,
                    reply_to,
                    payload,
                    ref,
                ),
            )
            return {"id": message_id, "seq": cur.lastrowid, "duplicate": False}
    finally:
        store.conn.execute("PRAGMA synchronous = NORMAL")


def _store_blob(store: CoordStore, raw: bytes) -> str:
    ref = "sha256-" + hashlib.sha256(raw).hexdigest()
    ensure_private_dir(store.blob_dir)
    target = store.blob_dir / ref
    if not target.exists():  # content-addressed: an existing blob is this very content
        atomic_write(target, raw)
    return ref


def _load_blob(store: CoordStore, ref: str) -> Any:
    if not ref.startswith("sha256-") or "/" in ref:
        raise CoordError(f"bad blob reference {ref!r}")
    raw = (store.blob_dir / ref).read_bytes()
    if "sha256-" + hashlib.sha256(raw).hexdigest() != ref:
        raise CoordError(f"blob {ref} does not match its content")
    return json.loads(raw)


def as_dict(store: CoordStore, row: tuple[Any, ...], *, resolve: bool = True) -> dict[str, Any]:
    seq, id_, ts_ms, sender, to, type_, corr, reply, payload, ref = row
    out: dict[str, Any] = {
        "seq": seq,
        "id": id_,
        "ts_ms": ts_ms,
        "from": sender,
        "to": to,
        "type": type_,
        "correlation_id": corr,
        "in_reply_to": reply,
    }
    if ref is not None:
        out["payload_ref"] = ref
        if resolve:
            try:
                out["data"] = _load_blob(store, ref)
            except (OSError, ValueError, CoordError):
                out["data"] = None
                out["payload_error"] = "blob_missing"
    else:
        out["data"] = None if payload is None else json.loads(payload)
    return out


def cursor(store: CoordStore, agent: str) -> int:
    rows = store.read("SELECT last_acked_seq FROM cursors WHERE agent = ?", (agent,))
    return int(rows[0][0]) if rows else 0


def pending(store: CoordStore, agent: str, limit: int = 100) -> list[dict[str, Any]]:
    rows = store.read(
        f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE seq > ?"  # noqa: S608 (a constant column list)
        " AND (to_agent = ? OR (to_agent IS NULL AND from_agent != ?)) ORDER BY seq LIMIT ?",
        (cursor(store, agent), agent, agent, limit),
    )
    return [as_dict(store, r) for r in rows]


def receive(
    store: CoordStore, agent: str, *, wait_s: float = 0.0, limit: int = 100
) -> list[dict[str, Any]]:
    """What `agent` has not acknowledged; waits up to `wait_s` for the first if there is none."""
    _field("agent", agent, required=True)
    if limit < 1:
        raise UsageError("--limit is 1 or more")
    until = time.monotonic() + max(0.0, wait_s)
    while True:
        found = pending(store, agent, limit)
        if found or not store.wait_for_change(until):
            return found


def ack(store: CoordStore, agent: str, seq: int) -> int:
    """Everything up to `seq` is acknowledged by `agent`; the cursor never moves back."""
    _field("agent", agent, required=True)
    with store.write() as conn:
        top = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM messages").fetchone()[0]
        if seq < 1 or seq > top:
            raise UsageError(f"no message {seq} (the last one is {top})")
        conn.execute(
            "INSERT INTO cursors (agent, last_acked_seq, updated_ms) VALUES (?, ?, ?)"
            " ON CONFLICT(agent) DO UPDATE SET"
            " last_acked_seq = MAX(last_acked_seq, excluded.last_acked_seq),"
            " updated_ms = excluded.updated_ms",
            (agent, seq, store.now()),
        )
        return int(
            conn.execute("SELECT last_acked_seq FROM cursors WHERE agent = ?", (agent,)).fetchone()[
                0
            ]
        )
