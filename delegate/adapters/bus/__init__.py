"""The bus: one interface, several transports, chosen by URL.

`open_bus("sqlite:///path/bus.db")` gives the embedded transport; `mqtt://` and `mqtts://` give
the broker transport (imported only when asked for, since paho is slow to import).

Semantics every transport keeps (and the contract tests check):
- `publish` returns only after the transport acknowledged the message, or raises BusError.
- Messages of one job reach a subscriber in publish order; a subscriber that names a
  `consumer` resumes after the last message it acknowledged (at-least-once).
- A subscriber of one job that arrives late still learns the job's terminal event.
"""

from __future__ import annotations

from collections.abc import Mapping

from delegate.adapters.bus.base import Bus, Message, Subscription
from delegate.core.errors import BusError

__all__ = ["Bus", "Message", "Subscription", "keeps_history", "open_bus"]


def keeps_history(url: str) -> bool:
    """Whether a one-job subscriber that arrives late still gets every event the job published
    before it subscribed: SQLite keeps them all (a subscription reads the job's history from its
    first message); a broker keeps only the retained terminal outcome."""
    return url.split("://", 1)[0].lower() == "sqlite" if "://" in url else False


def open_bus(url: str, env: Mapping[str, str] | None = None) -> Bus:
    """Open the transport named by `url`; raise BusError for an unknown or broken URL."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        # sqlite3, hashlib: only when a bus is opened (`ps --json` loads this package, no bus)
        from delegate.adapters.bus.sqlite import SqliteBus

        return SqliteBus.from_url(url)
    if scheme in ("mqtt", "mqtts"):
        try:
            # socket, urllib and the MQTT wire code: only for a broker's URL
            from delegate.adapters.bus.mqtt import MqttBus
        except ImportError as exc:
            raise BusError(f"the MQTT transport is not available: {exc}") from None
        bus: Bus = MqttBus.from_url(url, env=env)
        return bus
    raise BusError(f"unsupported bus URL {url!r}; use sqlite:///path or mqtt(s)://host:port")
