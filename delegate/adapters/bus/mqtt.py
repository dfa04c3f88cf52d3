"""The broker bus: MQTT 5, QoS 1, topic `<prefix>/jobs/<job_id>/events`.

- `publish` (mqtt_wire.SyncPublisher, standard library only) returns after PUBACK, within a
  timeout, retrying connection failures with exponential back-off (0.5 s, x2, at most 8 s,
  3 attempts). Terminal events are published retained.
- Subscribers use paho-mqtt 2.x (imported only here, when subscribing): a broker session
  (clean_start false, a session expiry), a manual acknowledgement after each message is
  processed, and paho's own reconnect with back-off, so a subscriber that drops off, or a broker
  that restarts with persistence, still delivers what was missed.
- Settings: the URL (`mqtts://user:pass@host:8883?prefix=delegate`) and the environment
  (MQTT_USERNAME, MQTT_PASSWORD, MQTT_CA_CERTS, MQTT_CERTFILE, MQTT_KEYFILE), URL first.
"""

from __future__ import annotations

import _thread
import os
import time
from collections.abc import Mapping
from typing import Any

from delegate.adapters.bus.base import Message
from delegate.adapters.bus.mqtt_wire import (
    CONNECT_TIMEOUT_S,
    BrokerAuthError,
    BrokerTlsError,
    BrokerUnreachable,
    MqttSettings,
    SyncPublisher,
    connect_error,
    settings_from,
    tls_context,
    topic_for,
)
from delegate.config.logsetup import get_logger
from delegate.core.errors import BusError

__all__ = ["BrokerAuthError", "BrokerTlsError", "BrokerUnreachable", "MqttBus", "settings_from"]

log = get_logger(__name__)

RETRY_ATTEMPTS = 3
RETRY_BASE_S = 0.5
RETRY_FACTOR = 2.0
RETRY_CAP_S = 8.0
DURABLE_SESSION_S = 7 * 24 * 3600
EPHEMERAL_SESSION_S = 600


def _client_suffix() -> str:
    return os.urandom(6).hex()


def _session_props(expiry_s: int) -> Any:
    from paho.mqtt.packettypes import PacketTypes  # paho: subscribers only (module doc)
    from paho.mqtt.properties import Properties  # paho: subscribers only

    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = expiry_s
    return props


def _new_client(settings: MqttSettings, client_id: str) -> Any:
    import paho.mqtt.client as mqtt  # paho: subscribers only; a publish never loads it
    from paho.mqtt.enums import CallbackAPIVersion  # paho: subscribers only

    client = mqtt.Client(
        CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5, manual_ack=True
    )
    client.connect_timeout = CONNECT_TIMEOUT_S
    client.reconnect_delay_set(min_delay=1, max_delay=int(RETRY_CAP_S))
    if settings.username:
        client.username_pw_set(settings.username, settings.password)
    if settings.tls:
        client.tls_set_context(tls_context(settings))
    return client


class Connection:
    """One connected paho client with its network thread; CONNACK awaited before use."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        clean_start: bool,
        expiry_s: int,
        on_connected: Any = None,
        on_message: Any = None,
        on_subscribe: Any = None,
        will: tuple[str, bytes] | None = None,
    ) -> None:
        import threading  # threading: a subscriber's; an MQTT publish loads this module without it

        self.settings = settings
        self.connected = threading.Event()
        self.refused: str | None = None
        self.client = _new_client(settings, client_id)
        self._on_connected = on_connected

        self.client.on_connect = self._handle_connect
        self.client.on_disconnect = self._handle_disconnect
        if on_message is not None:
            self.client.on_message = on_message
        if on_subscribe is not None:
            self.client.on_subscribe = on_subscribe
        if will is not None:  # retained: whoever subscribes later learns it went away
            self.client.will_set(will[0], will[1], qos=1, retain=True)
        self._connect(clean_start=clean_start, expiry_s=expiry_s)

    def _handle_connect(
        self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        """paho's on_connect (network thread): a refusal noted, else `on_connected` first."""
        if reason.is_failure:
            self.refused = str(reason)
            self.connected.set()
            return
        self.refused = None
        if self._on_connected is not None:
            self._on_connected(client)
        self.connected.set()

    def _handle_disconnect(
        self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        self.connected.clear()

    def _connect(self, *, clean_start: bool, expiry_s: int) -> None:
        """Connect, start the network thread and wait for the broker's CONNACK: connect_error's
        error when it cannot be reached, BrokerUnreachable when it does not answer in time,
        BrokerAuthError when it refuses."""
        settings = self.settings
        try:
            self.client.connect(
                settings.host,
                settings.port,
                keepalive=30,
                clean_start=clean_start,
                properties=_session_props(expiry_s),
            )
        except OSError as exc:  # ssl.SSLError is an OSError too
            raise connect_error(settings, exc) from None
        self.client.loop_start()
        if not self.connected.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerUnreachable(f"broker {settings.where} did not acknowledge the connection")
        reason = self.refusal()
        if reason is not None:
            self.close()
            raise BrokerAuthError(f"broker {settings.where} refused {settings.who()}: {reason}")

    def refusal(self) -> str | None:
        """Why the broker refused the connection (set by the network thread), or None."""
        return self.refused

    def close(self, properties: Any = None) -> None:
        try:
            self.client.disconnect(properties=properties)
        finally:
            self.client.loop_stop()


class MqttBus:
    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings
        self.url = f"{'mqtts' if settings.tls else 'mqtt'}://{settings.where}"
        self._publisher: SyncPublisher | None = None
        # _thread, secrets-free ids, queue and threading only in subscriptions: the publish path
        # of a fresh `delegate publish` process has a 60 ms budget.
        self._lock = _thread.allocate_lock()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, env: Mapping[str, str] | None = None) -> MqttBus:
        return cls(settings_from(url, env))

    def _live(self) -> None:
        if self._closed:
            raise BusError("the bus is closed")

    def _drop_publisher(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            publisher.close()

    def probe(self) -> None:
        """Connect once: BrokerUnreachable, BrokerTlsError or BrokerAuthError say what failed."""
        self._live()
        SyncPublisher(self.settings, f"delegate-probe-{_client_suffix()}").close()

    def publish(self, job_id: str, payload: bytes, *, retain: bool = False) -> None:
        """Publish at QoS 1 and return once the broker acknowledged (PUBACK)."""
        self._live()
        topic = topic_for(self.settings.prefix, job_id)
        delay = RETRY_BASE_S
        with self._lock:
            for attempt in range(1, RETRY_ATTEMPTS + 1):
                try:
                    if self._publisher is None:
                        self._publisher = SyncPublisher(
                            self.settings, f"delegate-pub-{_client_suffix()}"
                        )
                    self._publisher.publish(topic, payload, retain=retain)
                    return
                except (BrokerAuthError, BrokerTlsError):
                    self._drop_publisher()
                    raise  # retrying cannot fix credentials or certificates
                except BusError as exc:
                    error = exc
                self._drop_publisher()
                if attempt < RETRY_ATTEMPTS:
                    log.warning("publish to %s failed (%s); retrying", self.settings.where, error)
                    time.sleep(delay)
                    delay = min(delay * RETRY_FACTOR, RETRY_CAP_S)
        raise error

    def subscribe(
        self, job_id: str | None = None, *, consumer: str | None = None, live_only: bool = False
    ) -> MqttSubscription:
        self._live()
        return MqttSubscription(self.settings, job_id, consumer, live_only=live_only)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._drop_publisher()


class MqttSubscription:
    """A subscriber with a broker session; returns once the broker granted the subscription."""

    def __init__(
        self,
        settings: MqttSettings,
        job_id: str | None,
        consumer: str | None,
        *,
        live_only: bool = False,
    ) -> None:
        self.topic = topic_for(settings.prefix, job_id)
        # live_only: MQTT 5 retain handling 2, the broker sends no retained message when we
        # (re)subscribe; a monitor must not get one outcome per past job on every reconnect.
        retain_handling = 2 if live_only else 0
        import queue  # queue, threading: a subscriber's; a publish loads this module without them
        import threading  # as queue

        self.durable = consumer is not None
        self._queue: queue.Queue[Any] = queue.Queue()
        self._empty = queue.Empty
        self._subscribed = threading.Event()
        self._granted: str | None = None
        self._closed = False

        def resubscribe(client: Any) -> None:
            from paho.mqtt.subscribeoptions import SubscribeOptions  # paho: subscribers only

            # Every (re)connection subscribes again; with a resumed session it changes nothing.
            client.subscribe(
                self.topic, options=SubscribeOptions(qos=1, retainHandling=retain_handling)
            )

        def handle_subscribe(
            client: Any, userdata: Any, mid: int, reasons: Any, props: Any
        ) -> None:
            failures = [str(r) for r in reasons if r.is_failure]
            self._granted = failures[0] if failures else None
            self._subscribed.set()

        def handle_message(client: Any, userdata: Any, message: Any) -> None:
            self._queue.put(message)

        client_id = consumer or f"delegate-sub-{_client_suffix()}"
        self._connection = Connection(
            settings,
            client_id,
            clean_start=False,
            expiry_s=DURABLE_SESSION_S if self.durable else EPHEMERAL_SESSION_S,
            on_connected=resubscribe,
            on_message=handle_message,
            on_subscribe=handle_subscribe,
        )
        if not self._subscribed.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerUnreachable(f"broker {settings.where} did not confirm the subscription")
        reason = self.refusal()
        if reason is not None:
            self.close()
            raise BrokerAuthError(
                f"broker {settings.where} refused to subscribe to {self.topic}: {reason}"
            )

    def refusal(self) -> str | None:
        """Why the broker refused the subscription (set by the network thread), or None."""
        return self._granted

    @property
    def connected(self) -> bool:
        """Whether the broker is reached now (paho reconnects by itself meanwhile)."""
        return self._connection.connected.is_set()

    def get(self, timeout: float | None = None) -> Message | None:
        if self._closed:
            raise BusError("the subscription is closed")
        try:
            message = self._queue.get(timeout=timeout) if timeout != 0 else self._queue.get_nowait()
        except self._empty:
            return None
        parts = message.topic.split("/")
        job_id = parts[-2] if len(parts) >= 3 else ""
        return Message(job_id, bytes(message.payload), handle=(message.mid, message.qos))

    def ack(self, message: Message) -> None:
        mid, qos = message.handle
        if qos > 0:
            self._connection.client.ack(mid, qos)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        props = None
        if not self.durable:  # nobody will resume this session: let the broker drop it now
            from paho.mqtt.packettypes import PacketTypes  # paho: subscribers only
            from paho.mqtt.properties import Properties  # paho: subscribers only

            props = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = 0
        self._connection.close(properties=props)
