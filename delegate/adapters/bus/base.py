"""What every bus transport shares: the delivered `Message`, and the `Bus` and `Subscription`
protocols the transports implement (the contract tests check them on each transport).

Kept apart from `delegate.adapters.bus`, which chooses a transport by URL, so that a transport never
imports the module that imports it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms (see core.records)
if TYPE_CHECKING:
    from typing import Any, NamedTuple, Protocol
else:
    from delegate.core.records import NamedTuple

    Protocol = object  # Bus and Subscription are for the type checker; nothing checks them


class Message(NamedTuple):
    """One delivered message; `handle` is the transport's own delivery token for `ack`."""

    job_id: str
    payload: bytes
    handle: Any = None
    problem: str | None = None  # set when the transport could not deliver the payload itself


class Subscription(Protocol):
    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to `timeout` seconds (None: forever)."""
        ...

    def ack(self, message: Message) -> None:
        """Mark `message` processed; a durable consumer will not get it again."""
        ...

    def close(self) -> None: ...


class Bus(Protocol):
    url: str

    def publish(self, job_id: str, payload: bytes, *, retain: bool = False) -> None: ...

    def subscribe(
        self, job_id: str | None = None, *, consumer: str | None = None, live_only: bool = False
    ) -> Subscription:
        """Subscribe to one job's events (or every job's when job_id is None).

        `live_only`: no retained outcomes of past jobs, only what is published from now on.
        """
        ...

    def probe(self) -> None:
        """Reach the transport once (connect, authenticate); raise BusError saying what failed."""
        ...

    def close(self) -> None: ...
