"""Heartbeats: each agent's last beat, and how alive that makes it.

An agent (or the wrapper, from a thread of its own, for its job's agent) beats every 10 s; the
age of the last beat classes it OK, WARN (30 s), STALE (100 s) or DEAD (5 min). Only a DEAD
holder's locks and claims may be broken by another agent.
"""

from __future__ import annotations

from delegate.config.logsetup import get_logger
from delegate.coord.store import CoordStore
from delegate.core.errors import UsageError

TYPE_CHECKING = False  # `lock acquire` runs through here: typing and dataclasses cost ~10 ms
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

STATUSES = ("idle", "working", "blocked")
BEAT_INTERVAL_S = 10.0


class Thresholds:
    """Ages (ms) from which a beat is WARN, STALE, DEAD."""

    __slots__ = ("dead_ms", "stale_ms", "warn_ms")

    def __init__(
        self, warn_ms: int = 30_000, stale_ms: int = 100_000, dead_ms: int = 300_000
    ) -> None:
        self.warn_ms, self.stale_ms, self.dead_ms = warn_ms, stale_ms, dead_ms

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thresholds) and (
            (self.warn_ms, self.stale_ms, self.dead_ms)
            == (other.warn_ms, other.stale_ms, other.dead_ms)
        )

    def __hash__(self) -> int:
        return hash((self.warn_ms, self.stale_ms, self.dead_ms))

    @classmethod
    def from_config(cls, table: Mapping[str, Any] | None) -> Thresholds:
        """`[heartbeat]` of delegate.toml: `warn`, `stale`, `dead` in seconds."""
        table = table or {}
        values = {}
        for name in ("warn", "stale", "dead"):
            if name in table:
                value = table[name]
                if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                    raise UsageError(f"[heartbeat] {name} must be a positive number of seconds")
                values[f"{name}_ms"] = int(value * 1000)
        made = cls(**values)
        if not made.warn_ms < made.stale_ms < made.dead_ms:
            raise UsageError("[heartbeat] needs warn < stale < dead")
        return made


DEFAULT = Thresholds()


def liveness(age_ms: int, thresholds: Thresholds = DEFAULT) -> str:
    if age_ms >= thresholds.dead_ms:
        return "DEAD"
    if age_ms >= thresholds.stale_ms:
        return "STALE"
    if age_ms >= thresholds.warn_ms:
        return "WARN"
    return "OK"


def beat(
    store: CoordStore,
    agent: str,
    status: str,
    *,
    task: str | None = None,
    progress: float | None = None,
) -> dict[str, Any]:
    if not agent:
        raise UsageError("an agent id is needed (--agent)")
    if status not in STATUSES:
        raise UsageError(f"--status must be one of {', '.join(STATUSES)}")
    if progress is not None and not 0 <= progress <= 100:
        raise UsageError("--progress must be between 0 and 100")
    now = store.now()
    with store.write() as conn:
        conn.execute(
            "INSERT INTO heartbeats (agent, ts_ms, status, task, progress) VALUES (?, ?, ?, ?, ?)"
            " ON CONFLICT(agent) DO UPDATE SET ts_ms = excluded.ts_ms,"
            " status = excluded.status, task = excluded.task, progress = excluded.progress",
            (agent, now, status, task, progress),
        )
    return {"agent": agent, "ts_ms": now, "status": status, "task": task, "progress": progress}


def last_beat_age_ms(store: CoordStore, agent: str) -> int | None:
    rows = store.read("SELECT ts_ms FROM heartbeats WHERE agent = ?", (agent,))
    if not rows:
        return None
    return max(0, store.now() - int(rows[0][0]))


def agents(store: CoordStore, thresholds: Thresholds = DEFAULT) -> list[dict[str, Any]]:
    now = store.now()
    rows = store.read("SELECT agent, ts_ms, status, task, progress FROM heartbeats ORDER BY agent")
    out = []
    for agent, ts_ms, status, task, progress in rows:
        age = max(0, now - int(ts_ms))
        out.append(
            {
                "agent": agent,
                "last_beat_ms": ts_ms,
                "age_s": round(age / 1000, 1),
                "liveness": liveness(age, thresholds),
                "status": status,
                "task": task,
                "progress": progress,
            }
        )
    return out


class Beater:
    """Beats for one agent every `interval` seconds from a thread of its own, with its own
    connection, so an agent busy in a long model call (or a wrapper blocked on it) is never
    taken for dead. A beat that fails is logged and tried again at the next interval."""

    def __init__(
        self, path: Path, agent: str, *, interval: float = BEAT_INTERVAL_S, task: str | None = None
    ) -> None:
        import threading  # threading: the wrapper's beater; `lock check|release` run without it

        self.path, self.agent, self.interval, self.task = path, agent, interval, task
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Beater:
        self._thread.start()
        return self

    def _run(self) -> None:
        log = get_logger(__name__)
        store = None
        while True:
            try:
                store = store or CoordStore(self.path)
                beat(store, self.agent, "working", task=self.task)
            except Exception as exc:  # a beat must never take the wrapper down
                log.warning("heartbeat of %s failed: %s", self.agent, exc)
            if self._stop.wait(self.interval):
                break
        try:
            beat(store or CoordStore(self.path), self.agent, "idle", task=self.task)
        except Exception as exc:
            log.warning("last heartbeat of %s failed: %s", self.agent, exc)
        if store is not None:
            store.close()

    def stop(self) -> None:
        """One last beat (`idle`: the agent has exited), then the thread ends."""
        self._stop.set()
        self._thread.join(timeout=5)
