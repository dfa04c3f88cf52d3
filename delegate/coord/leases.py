"""Locks on resources and claims on tasks: leases with an owner, an expiry and a fencing token.

Both are one table (`kind` 'lock' or 'claim'). A grant takes the write lock first, then looks,
then writes, in one transaction: two agents can never both see a resource free. Every grant hands
out the next fencing token of its resource (`fences`, which only grows, even across release and
expiry), so a writer downstream can refuse a holder that paused past its lease while another
took over (`check`). Expiry compares integer epoch milliseconds.
"""

from __future__ import annotations

import time

from delegate.coord.heartbeats import Thresholds, last_beat_age_ms, liveness
from delegate.coord.store import CoordError
from delegate.core.errors import UsageError

TYPE_CHECKING = False  # the fast path of `lock acquire` imports this: no typing at run time
if TYPE_CHECKING:
    from typing import Any

    from delegate.coord.store import CoordStore

KINDS = ("lock", "claim")
DEFAULT_THRESHOLDS = Thresholds()
MAX_NAME = 512


class Held(CoordError):
    """Someone else holds it (and the caller would not or could not wait)."""

    exit_code = 75

    def __init__(self, kind: str, name: str, owner: str, expires_ms: int, token: int) -> None:
        self.kind, self.name, self.owner = kind, name, owner
        super().__init__(
            f"{kind} {name!r} is held by {owner} until {iso_ms(expires_ms)} (token {token})"
        )


class NotHolder(CoordError):
    """Only the owner of a live grant may renew or release it."""

    exit_code = 77


class Grant:
    """One lease: who holds `name` (of `kind`), its fencing token, and until when."""

    __slots__ = ("acquired_ms", "expires_ms", "kind", "name", "owner", "token")

    def __init__(
        self, kind: str, name: str, owner: str, token: int, acquired_ms: int, expires_ms: int
    ) -> None:
        self.kind, self.name, self.owner = kind, name, owner
        self.token, self.acquired_ms, self.expires_ms = token, acquired_ms, expires_ms

    def row(self) -> tuple[str, str, str, int, int, int]:
        return (self.kind, self.name, self.owner, self.token, self.acquired_ms, self.expires_ms)

    def extended(self, expires_ms: int) -> Grant:
        return Grant(self.kind, self.name, self.owner, self.token, self.acquired_ms, expires_ms)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grant) and self.row() == other.row()

    def __hash__(self) -> int:
        return hash(self.row())

    def __repr__(self) -> str:
        return f"Grant{self.row()!r}"

    def to_dict(self, now_ms: int | None = None) -> dict[str, Any]:
        field = "resource" if self.kind == "lock" else "task"
        out: dict[str, Any] = {
            field: self.name,
            "owner": self.owner,
            "token": self.token,
            "acquired_at": iso_ms(self.acquired_ms),
            "expires_at": iso_ms(self.expires_ms),
            "expires_ms": self.expires_ms,
        }
        if now_ms is not None:
            out["expired"] = self.expires_ms <= now_ms
        return out


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds (no datetime import needed)."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _check_args(kind: str, name: str, owner: str) -> None:
    if kind not in KINDS:
        raise UsageError(f"unknown lease kind {kind!r}")
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise UsageError(f"a {kind} name is 1 to {MAX_NAME} printable characters")
    if not owner or len(owner) > MAX_NAME or not owner.isprintable():
        raise UsageError("an owner id (--owner) is 1 to 512 printable characters")


def _ttl_ms(seconds: float) -> int:
    if not 0 < seconds <= 366 * 86400:
        raise UsageError("a lease lasts more than 0 s and at most a year")
    return int(seconds * 1000)


def _current(conn: Any, kind: str, name: str) -> Grant | None:
    row = conn.execute(
        "SELECT owner, token, acquired_ms, expires_ms FROM leases WHERE kind = ? AND name = ?",
        (kind, name),
    ).fetchone()
    return Grant(kind, name, *row) if row else None


def acquire(
    store: CoordStore,
    kind: str,
    name: str,
    owner: str,
    *,
    ttl_s: float,
    wait_s: float = 0.0,
    break_dead: bool = False,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[Grant, list[dict[str, Any]]]:
    """Take `name` for `owner`; returns the grant and the events it made.

    The owner asking again while it holds a live grant gets that grant back, extended: a retry
    after a lost answer keeps its token. Held by another: wait up to `wait_s` for a release or
    the expiry, else raise Held. With `break_dead`, a holder whose heartbeat is DEAD (by
    `thresholds`) loses it. The one wait-and-retry loop of every lock and claim.
    """
    _check_args(kind, name, owner)
    ttl = _ttl_ms(ttl_s)
    if wait_s < 0:
        raise UsageError("--wait is a number of seconds, 0 or more")
    asked_ms = store.now()
    until = time.monotonic() + wait_s
    while True:
        with store.write() as conn:
            outcome = _attempt(
                store, conn, kind, name, owner, ttl, asked_ms, thresholds if break_dead else None
            )
        if not isinstance(outcome, Grant):
            return outcome
        changed = store.wait_for_change(until, wake_at_ms=outcome.expires_ms)
        if not changed and time.monotonic() >= until:
            raise Held(kind, name, outcome.owner, outcome.expires_ms, outcome.token)


def _attempt(
    store: CoordStore,
    conn: Any,
    kind: str,
    name: str,
    owner: str,
    ttl: int,
    asked_ms: int,
    break_by: Thresholds | None,
) -> Grant | tuple[Grant, list[dict[str, Any]]]:
    """One try inside the write transaction: the grant and its events, or the live grant of
    another that blocks it."""
    now = store.now()
    held = _current(conn, kind, name)
    events: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    if held is not None and held.expires_ms > now:
        if held.owner == owner:
            return _extend(conn, held, now + ttl), []
        broken = _break_if_dead(store, conn, held, owner, now, break_by)
        if broken is None:
            return held
        events.append(broken)
        previous = {"owner": held.owner, "token": held.token, "broken": True}
    elif held is not None:  # expired: whoever asks may take it
        previous = {
            "owner": held.owner,
            "token": held.token,
            "expired_ms": held.expires_ms,
            "held_ms": held.expires_ms - held.acquired_ms,
        }
    grant = _grant(conn, kind, name, owner, now, ttl)
    events.append(
        store.record(
            conn,
            f"{kind}_acquired",
            owner,
            name,
            token=grant.token,
            ttl_ms=ttl,
            waited_ms=now - asked_ms,
            previous=previous,
        )
    )
    return grant, events


def _break_if_dead(
    store: CoordStore,
    conn: Any,
    held: Grant,
    breaker: str,
    now: int,
    thresholds: Thresholds | None,
) -> dict[str, Any] | None:
    """The `_broken` event when `thresholds` are given and `held`'s owner's heartbeat is DEAD
    by them; None when the holder keeps it."""
    if thresholds is None:
        return None
    age = last_beat_age_ms(store, held.owner)
    if age is None or liveness(age, thresholds) != "DEAD":
        return None
    return store.record(
        conn,
        f"{held.kind}_broken",
        breaker,
        held.name,
        previous_owner=held.owner,
        previous_token=held.token,
        beat_age_ms=age,
        held_ms=now - held.acquired_ms,
    )


def _grant(conn: Any, kind: str, name: str, owner: str, now: int, ttl: int) -> Grant:
    """A new lease with the next fencing token of `name` (the fence only ever grows)."""
    token = conn.execute(
        "INSERT INTO fences (kind, name, last_token) VALUES (?, ?, 1)"
        " ON CONFLICT(kind, name) DO UPDATE SET last_token = last_token + 1"
        " RETURNING last_token",
        (kind, name),
    ).fetchone()[0]
    grant = Grant(kind, name, owner, token, now, now + ttl)
    conn.execute(
        "INSERT OR REPLACE INTO leases (kind, name, owner, token, acquired_ms, expires_ms)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        grant.row(),
    )
    return grant


def _extend(conn: Any, held: Grant, expires_ms: int) -> Grant:
    """The same grant (same token), lasting until `expires_ms`."""
    grant = held.extended(expires_ms)
    conn.execute(
        "UPDATE leases SET expires_ms = ? WHERE kind = ? AND name = ?",
        (grant.expires_ms, held.kind, held.name),
    )
    return grant


def renew(store: CoordStore, kind: str, name: str, owner: str, *, ttl_s: float) -> Grant:
    """Extend the owner's live grant; an expired one is gone (acquire again, for a new token)."""
    _check_args(kind, name, owner)
    ttl = _ttl_ms(ttl_s)
    with store.write() as conn:
        now = store.now()
        held = _current(conn, kind, name)
        _must_hold(kind, name, owner, held, now)
        assert held is not None
        return _extend(conn, held, now + ttl)


def release(store: CoordStore, kind: str, name: str, owner: str) -> dict[str, Any]:
    """Give it back. Only the owner may; a grant that expired untouched is released quietly."""
    _check_args(kind, name, owner)
    with store.write() as conn:
        now = store.now()
        held = _current(conn, kind, name)
        if held is None or held.owner != owner:
            _must_hold(kind, name, owner, held, now)
        assert held is not None
        conn.execute("DELETE FROM leases WHERE kind = ? AND name = ?", (kind, name))
        return store.record(
            conn,
            f"{kind}_released",
            owner,
            name,
            token=held.token,
            held_ms=min(now, held.expires_ms) - held.acquired_ms,
            expired=held.expires_ms <= now,
        )


def _must_hold(kind: str, name: str, owner: str, held: Grant | None, now: int) -> None:
    if held is None:
        raise NotHolder(f"{kind} {name!r} is not held")
    if held.owner != owner:
        raise NotHolder(f"{kind} {name!r} is held by {held.owner}, not {owner}")
    if held.expires_ms <= now:
        raise NotHolder(
            f"{owner}'s {kind} on {name!r} expired at {iso_ms(held.expires_ms)}; acquire it again"
        )


def check(store: CoordStore, kind: str, name: str, token: int) -> tuple[bool, str]:
    """Whether `token` is the live grant of `name` now: what a fenced writer asks."""
    now = store.now()
    rows = store.read(
        "SELECT owner, token, acquired_ms, expires_ms FROM leases WHERE kind = ? AND name = ?",
        (kind, name),
    )
    fence = store.read("SELECT last_token FROM fences WHERE kind = ? AND name = ?", (kind, name))
    last = int(fence[0][0]) if fence else 0
    if not rows:
        return False, f"token {token} is stale: {kind} {name!r} is not held (last token {last})"
    held = Grant(kind, name, *rows[0])
    if held.token != token:
        return False, f"token {token} is stale: {held.owner} holds {name!r} with token {held.token}"
    if held.expires_ms <= now:
        return False, f"token {token} is stale: its lease expired at {iso_ms(held.expires_ms)}"
    return True, f"token {token} is current ({held.owner} until {iso_ms(held.expires_ms)})"


def listing(store: CoordStore, kind: str) -> list[Grant]:
    rows = store.read(
        "SELECT owner, token, acquired_ms, expires_ms, name FROM leases WHERE kind = ?"
        " ORDER BY name",
        (kind,),
    )
    return [Grant(kind, r[4], r[0], r[1], r[2], r[3]) for r in rows]


def holders(store: CoordStore) -> dict[str, str]:
    """Name -> owner of every live lock and claim (for the wait-for graph)."""
    now = store.now()
    rows = store.read("SELECT name, owner FROM leases WHERE expires_ms > ?", (now,))
    return {str(name): str(owner) for name, owner in rows}
