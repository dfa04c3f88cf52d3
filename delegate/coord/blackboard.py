"""The blackboard: a shared key/value board with TTL, source agent, versions and prefixes.

A value is JSON when the text parses as JSON, else a string. Versions start at 1 and grow by one
per write; `if_version` makes a write conditional (0: only if absent). Expired entries are
invisible to every read and removed by the next write. Keys group by prefix (`task:`, `cache:`,
`signal:`, `trace:`, `result:`, `lock:`), and `render` lays them out as the swarm blackboard.
"""

from __future__ import annotations

import json
from typing import Any

from delegate.coord.leases import iso_ms
from delegate.coord.store import CoordError, CoordStore
from delegate.core.errors import UsageError

PREFIXES = ("task:", "cache:", "signal:", "trace:", "result:", "lock:")
MAX_KEY = 512
MAX_VALUE = 1 << 20


class VersionConflict(CoordError):
    exit_code = 75


def parse_value(text: str) -> Any:
    """JSON when it parses as JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _prefix_rank(key: str) -> tuple[int, str]:
    for rank, prefix in enumerate(PREFIXES):
        if key.startswith(prefix):
            return rank, key
    return len(PREFIXES), key


def _entry(row: tuple[Any, ...]) -> dict[str, Any]:
    key, value, agent, updated_ms, ttl_ms, expires_ms, version = row
    return {
        "key": key,
        "value": json.loads(value),
        "source_agent": agent,
        "timestamp": iso_ms(updated_ms),
        "ttl": None if ttl_ms is None else ttl_ms / 1000,
        "expires_at": None if expires_ms is None else iso_ms(expires_ms),
        "version": version,
    }


_COLUMNS = "key, value, source_agent, updated_ms, ttl_ms, expires_ms, version"


def write(
    store: CoordStore,
    key: str,
    value: Any,
    *,
    ttl_s: float | None = None,
    agent: str | None = None,
    if_version: int | None = None,
) -> dict[str, Any]:
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise UsageError(f"a blackboard key is 1 to {MAX_KEY} printable characters")
    if ttl_s is not None and ttl_s <= 0:
        raise UsageError("--ttl is a number of seconds above 0")
    text = json.dumps(value, ensure_ascii=False)
    if len(text.encode()) > MAX_VALUE:
        raise UsageError(f"a blackboard value is at most {MAX_VALUE} bytes of JSON")
    with store.write() as conn:
        now = store.now()
        conn.execute(  # lazily, as the reference does: expired entries go with the next write
            "DELETE FROM blackboard WHERE expires_ms IS NOT NULL AND expires_ms <= ?", (now,)
        )
        row = conn.execute("SELECT version FROM blackboard WHERE key = ?", (key,)).fetchone()
        current = int(row[0]) if row else 0
        if if_version is not None and if_version != current:
            raise VersionConflict(
                f"blackboard {key!r} is at version {current}, not {if_version}; read it again"
            )
        ttl_ms = None if ttl_s is None else int(ttl_s * 1000)
        conn.execute(
            f"INSERT OR REPLACE INTO blackboard ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",  # noqa: S608 (a constant column list)
            (key, text, agent, now, ttl_ms, None if ttl_ms is None else now + ttl_ms, current + 1),
        )
        return _entry(
            (key, text, agent, now, ttl_ms, None if ttl_ms is None else now + ttl_ms, current + 1)
        )


def read(store: CoordStore, key: str) -> dict[str, Any] | None:
    rows = store.read(
        f"SELECT {_COLUMNS} FROM blackboard WHERE key = ?"  # noqa: S608 (a constant column list)
        " AND (expires_ms IS NULL OR expires_ms > ?)",
        (key, store.now()),
    )
    return _entry(rows[0]) if rows else None


def delete(store: CoordStore, key: str) -> bool:
    with store.write() as conn:
        cur = conn.execute(
            "DELETE FROM blackboard WHERE key = ? AND (expires_ms IS NULL OR expires_ms > ?)",
            (key, store.now()),
        )
        return cur.rowcount > 0


def entries(store: CoordStore, prefix: str = "") -> list[dict[str, Any]]:
    """Live entries, grouped by prefix in the conventional order, then by key."""
    rows = store.read(
        f"SELECT {_COLUMNS} FROM blackboard WHERE (expires_ms IS NULL OR expires_ms > ?)"  # noqa: S608 (a constant column list)
        " AND substr(key, 1, ?) = ?",
        (store.now(), len(prefix), prefix),
    )
    return sorted((_entry(r) for r in rows), key=lambda e: _prefix_rank(e["key"]))


def render(store: CoordStore) -> str:
    """Markdown in the shape of the swarm blackboard."""
    live = entries(store)
    by = {p: [e for e in live if e["key"].startswith(p)] for p in PREFIXES}
    out = ["# Swarm Blackboard", f"Last Updated: {iso_ms(store.now())}", "", "## Active Tasks"]
    out += ["| TaskID | Agent | Status | Started | Description |", "|---|---|---|---|---|"]
    for e in by["task:"]:
        v = e["value"] if isinstance(e["value"], dict) else {"description": e["value"]}
        cells = [
            e["key"][len("task:") :],
            v.get("assigned_to") or v.get("agent") or e["source_agent"] or "",
            v.get("status", ""),
            v.get("started_at") or e["timestamp"],
            v.get("description") or v.get("for") or "",
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    out += ["", "## Knowledge Cache"]
    for e in by["cache:"] + by["result:"]:
        out += [f"### {e['key']}", "```json", json.dumps(e, indent=2, ensure_ascii=False), "```"]
    out += ["", "## Coordination Signals"]
    for e in by["signal:"] + by["lock:"]:
        out.append(
            f"- `{e['key']}`: {_cell(json.dumps(e['value'], ensure_ascii=False))}"
            f" ({e['source_agent'] or 'unknown'}, {e['timestamp']})"
        )
    out += ["", "## Execution History"]
    for e in by["trace:"]:
        out.append(
            f"- `{e['key']}`: {_cell(json.dumps(e['value'], ensure_ascii=False))}"
            f" ({e['timestamp']})"
        )
    others = [e for e in live if _prefix_rank(e["key"])[0] == len(PREFIXES)]
    if others:
        out += ["", "## Other Entries"]
        for e in others:
            out.append(f"- `{e['key']}`: {_cell(json.dumps(e['value'], ensure_ascii=False))}")
    return "\n".join(out) + "\n"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
