"""The broker bus: MQTT 5 through paho-mqtt 2.x (imported only when an mqtt:// URL is used).

- Topic `<prefix>/jobs/<job_id>/events`, QoS 1; terminal events are published retained.
- `publish` returns only after PUBACK, within a timeout, retrying connection failures with
  exponential back-off (0.5 s, x2, at most 8 s, 3 attempts).
- Subscribers keep a broker session (clean_start false, a session expiry) and acknowledge each
  message themselves after processing, so a subscriber that drops off, or a broker that restarts
  with persistence, delivers what was missed; paho reconnects with back-off by itself.
- Settings: the URL (`mqtts://user:pass@host:8883?prefix=delegate`) and the environment
  (MQTT_USERNAME, MQTT_PASSWORD, MQTT_CA_CERTS, MQTT_CERTFILE, MQTT_KEYFILE), URL first.
"""

from __future__ import annotations

import os
import queue
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from .._logging import get_logger
from ..errors import BusError, ConfigError
from . import Message

log = get_logger(__name__)

DEFAULT_PREFIX = "delegate"
CONNECT_TIMEOUT_S = 10.0
PUBLISH_TIMEOUT_S = 5.0
RETRY_ATTEMPTS = 3
RETRY_BASE_S = 0.5
RETRY_FACTOR = 2.0
RETRY_CAP_S = 8.0
DURABLE_SESSION_S = 7 * 24 * 3600
EPHEMERAL_SESSION_S = 600


class BrokerUnreachable(BusError):
    kind = "unreachable"


class BrokerTlsError(BusError):
    kind = "tls"


class BrokerAuthError(BusError):
    kind = "credentials"


class MqttSettings(NamedTuple):
    host: str
    port: int
    tls: bool
    prefix: str = DEFAULT_PREFIX
    username: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    certfile: str | None = None
    keyfile: str | None = None

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def settings_from(url: str, env: Mapping[str, str] | None = None) -> MqttSettings:
    """Settings from the URL, completed from the environment; raise ConfigError when unusable."""
    env = os.environ if env is None else env
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(f"bus URL {url!r} is not mqtt://host[:port] or mqtts://host[:port]")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = query.keys() - {"prefix", "ca", "cert", "key"}
    if unknown:
        raise ConfigError(f"bus URL has unknown parameter(s): {', '.join(sorted(unknown))}")
    prefix = query.get("prefix", env.get("DELEGATE_MQTT_PREFIX", DEFAULT_PREFIX)).strip("/")
    if not prefix or any(c in prefix for c in "+#\x00"):
        raise ConfigError(f"MQTT topic prefix {prefix!r} must be non-empty, without + or #")
    tls = parts.scheme == "mqtts"
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError:
        raise ConfigError(f"bus URL {url!r} has a bad port") from None
    return MqttSettings(
        host=parts.hostname,
        port=port,
        tls=tls,
        prefix=prefix,
        username=unquote(parts.username) if parts.username else env.get("MQTT_USERNAME") or None,
        password=unquote(parts.password) if parts.password else env.get("MQTT_PASSWORD") or None,
        ca_certs=query.get("ca") or env.get("MQTT_CA_CERTS") or None,
        certfile=query.get("cert") or env.get("MQTT_CERTFILE") or None,
        keyfile=query.get("key") or env.get("MQTT_KEYFILE") or None,
    )


def topic_for(prefix: str, job_id: str | None) -> str:
    return f"{prefix}/jobs/{job_id or '+'}/events"


def _session_props(expiry_s: int) -> Properties:
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
    props.SessionExpiryInterval = expiry_s
    return props


def _new_client(settings: MqttSettings, client_id: str, *, manual_ack: bool) -> mqtt.Client:
    client = mqtt.Client(
        CallbackAPIVersion.VERSION2,
        client_id=client_id,
        protocol=mqtt.MQTTv5,
        manual_ack=manual_ack,
    )
    client.connect_timeout = CONNECT_TIMEOUT_S
    client.reconnect_delay_set(min_delay=1, max_delay=int(RETRY_CAP_S))
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    if settings.username:
        client.username_pw_set(settings.username, settings.password)
    if settings.tls:
        try:
            client.tls_set(
                ca_certs=settings.ca_certs,
                certfile=settings.certfile,
                keyfile=settings.keyfile,
                cert_reqs=ssl.CERT_REQUIRED,
            )
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise BrokerTlsError(f"TLS settings for {settings.where} are unusable: {exc}") from None
    return client


def _connect_error(settings: MqttSettings, exc: BaseException) -> BusError:
    where = settings.where
    if isinstance(exc, ssl.SSLCertVerificationError):
        return BrokerTlsError(
            f"TLS: cannot verify the certificate of {where} ({exc.verify_message}); "
            "check MQTT_CA_CERTS"
        )
    if isinstance(exc, ssl.SSLError):
        return BrokerTlsError(f"TLS handshake with {where} failed: {exc.reason or exc}")
    if isinstance(exc, ConnectionRefusedError):
        return BrokerUnreachable(f"broker {where} refused the connection (is it running?)")
    if isinstance(exc, socket.timeout | TimeoutError):
        return BrokerUnreachable(f"broker {where} did not answer within {CONNECT_TIMEOUT_S:g} s")
    if isinstance(exc, socket.gaierror):
        return BrokerUnreachable(f"cannot resolve broker host {settings.host!r}")
    return BrokerUnreachable(f"cannot reach broker {where}: {exc}")


class _Connection:
    """One connected paho client with its network thread; CONNACK awaited before use."""

    def __init__(
        self,
        settings: MqttSettings,
        client_id: str,
        *,
        manual_ack: bool,
        clean_start: bool,
        expiry_s: int,
        on_connected: Any = None,
        on_message: Any = None,
        on_subscribe: Any = None,
    ) -> None:
        self.settings = settings
        self.connected = threading.Event()
        self.refused: str | None = None
        self.client = _new_client(settings, client_id, manual_ack=manual_ack)
        self._on_connected = on_connected

        def handle_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
            if reason.is_failure:
                self.refused = str(reason)
                self.connected.set()
                return
            self.refused = None
            if self._on_connected is not None:
                self._on_connected(client)
            self.connected.set()

        def handle_disconnect(
            client: Any, userdata: Any, flags: Any, reason: Any, props: Any
        ) -> None:
            self.connected.clear()

        self.client.on_connect = handle_connect
        self.client.on_disconnect = handle_disconnect
        if on_message is not None:
            self.client.on_message = on_message
        if on_subscribe is not None:
            self.client.on_subscribe = on_subscribe
        try:
            self.client.connect(
                settings.host,
                settings.port,
                keepalive=30,
                clean_start=clean_start,
                properties=_session_props(expiry_s),
            )
        except (OSError, ssl.SSLError) as exc:
            raise _connect_error(settings, exc) from None
        self.client.loop_start()
        if not self.connected.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise BrokerUnreachable(f"broker {settings.where} did not acknowledge the connection")
        reason = self.refusal()
        if reason is not None:
            self.close()
            who = f"user {settings.username!r}" if settings.username else "an anonymous client"
            raise BrokerAuthError(f"broker {settings.where} refused {who}: {reason}")

    def refusal(self) -> str | None:
        """Why the broker refused the connection (set by the network thread), or None."""
        return self.refused

    def close(self, properties: Properties | None = None) -> None:
        try:
            self.client.disconnect(properties=properties)
        finally:
            self.client.loop_stop()


class MqttBus:
    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings
        self.url = f"{'mqtts' if settings.tls else 'mqtt'}://{settings.where}"
        self._publisher: _Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def from_url(cls, url: str, env: Mapping[str, str] | None = None) -> MqttBus:
        return cls(settings_from(url, env))

    def _live(self) -> None:
        if self._closed:
            raise BusError("the bus is closed")

    def _publisher_connection(self) -> _Connection:
        if self._publisher is None or not self._publisher.connected.is_set():
            if self._publisher is not None:
                self._drop_publisher()
            self._publisher = _Connection(
                self.settings,
                f"delegate-pub-{secrets.token_hex(6)}",
                manual_ack=False,
                clean_start=True,
                expiry_s=0,
            )
        return self._publisher

    def _drop_publisher(self) -> None:
        if self._publisher is not None:
            publisher, self._publisher = self._publisher, None
            try:
                publisher.close()
            except Exception as exc:
                log.debug("closing a broken publisher connection: %s", exc)

    def publish(self, job_id: str, payload: bytes, *, retain: bool = False) -> None:
        """Publish at QoS 1 and return once the broker acknowledged (PUBACK)."""
        self._live()
        topic = topic_for(self.settings.prefix, job_id)
        delay = RETRY_BASE_S
        with self._lock:
            for attempt in range(1, RETRY_ATTEMPTS + 1):
                try:
                    connection = self._publisher_connection()
                    info = connection.client.publish(topic, payload, qos=1, retain=retain)
                    if (
                        info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS
                        and info.rc != MQTTErrorCode.MQTT_ERR_NO_CONN
                    ):
                        raise BusError(f"paho refused the message: {mqtt.error_string(info.rc)}")
                    info.wait_for_publish(timeout=PUBLISH_TIMEOUT_S)
                    if info.is_published():
                        return
                    error: BusError = BrokerUnreachable(
                        f"broker {self.settings.where} did not acknowledge within "
                        f"{PUBLISH_TIMEOUT_S:g} s"
                    )
                except (BrokerAuthError, BrokerTlsError):
                    raise  # retrying cannot fix credentials or certificates
                except BusError as exc:
                    error = exc
                except (RuntimeError, ValueError, OSError) as exc:
                    error = BrokerUnreachable(f"publish to {self.settings.where} failed: {exc}")
                self._drop_publisher()
                if attempt < RETRY_ATTEMPTS:
                    time.sleep(delay)
                    delay = min(delay * RETRY_FACTOR, RETRY_CAP_S)
        raise error

    def subscribe(
        self, job_id: str | None = None, *, consumer: str | None = None
    ) -> MqttSubscription:
        self._live()
        return MqttSubscription(self.settings, job_id, consumer)

    def close(self) -> None:
        self._closed = True
        with self._lock:
            self._drop_publisher()


class MqttSubscription:
    """A subscriber with a broker session; returns once the broker granted the subscription."""

    def __init__(self, settings: MqttSettings, job_id: str | None, consumer: str | None) -> None:
        self.topic = topic_for(settings.prefix, job_id)
        self.durable = consumer is not None
        self._queue: queue.Queue[mqtt.MQTTMessage] = queue.Queue()
        self._subscribed = threading.Event()
        self._granted: str | None = None
        self._closed = False

        def resubscribe(client: mqtt.Client) -> None:
            # Every (re)connection subscribes again; with a resumed session it changes nothing.
            client.subscribe(self.topic, options=SubscribeOptions(qos=1))

        def handle_subscribe(
            client: Any, userdata: Any, mid: int, reasons: Any, props: Any
        ) -> None:
            failures = [str(r) for r in reasons if r.is_failure]
            self._granted = failures[0] if failures else None
            self._subscribed.set()

        def handle_message(client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
            self._queue.put(message)

        client_id = consumer or f"delegate-sub-{secrets.token_hex(6)}"
        self._connection = _Connection(
            settings,
            client_id,
            manual_ack=True,
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

    def get(self, timeout: float | None = None) -> Message | None:
        if self._closed:
            raise BusError("the subscription is closed")
        try:
            message = self._queue.get(timeout=timeout) if timeout != 0 else self._queue.get_nowait()
        except queue.Empty:
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
            props = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = 0
        self._connection.close(properties=props)
