"""MQTT settings, errors, and the publishing side of the broker bus, on the standard library.

Publishing is one synchronous exchange: CONNECT/CONNACK once, then PUBLISH (QoS 1) and wait for
its PUBACK, on a connection kept for the next message. Importing paho costs ~40 ms (it loads
urllib.request and http.client for websockets), more than a whole `delegate publish` may take,
so paho is used only by subscribers, which need its sessions, reconnects and acknowledgements.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

from delegate.config.settings import (
    DEFAULT_MQTT_PREFIX,
    MQTT_CA_CERTS_ENV,
    MQTT_CERTFILE_ENV,
    MQTT_KEYFILE_ENV,
    MQTT_PASSWORD_ENV,
    MQTT_PREFIX_ENV,
    MQTT_USERNAME_ENV,
    settings,
)
from delegate.core.errors import BusError, ConfigError

DEFAULT_PREFIX = DEFAULT_MQTT_PREFIX
CONNECT_TIMEOUT_S = 10.0
PUBLISH_TIMEOUT_S = 5.0

# MQTT 5 reason codes we explain; anything >= 0x80 is a failure.
_REASONS = {
    0x80: "unspecified error",
    0x84: "unsupported protocol version",
    0x85: "client identifier not valid",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8A: "banned",
    0x90: "topic name invalid",
    0x95: "packet too large",
    0x97: "quota exceeded",
}


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

    def who(self) -> str:
        return f"user {self.username!r}" if self.username else "an anonymous client"


def settings_from(url: str, env: Mapping[str, str] | None = None) -> MqttSettings:
    """Settings from the URL, completed from the environment; raise ConfigError when unusable."""
    env = settings().env if env is None else env
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
        raise ConfigError(f"bus URL {url!r} is not mqtt://host[:port] or mqtts://host[:port]")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = query.keys() - {"prefix", "ca", "cert", "key"}
    if unknown:
        raise ConfigError(f"bus URL has unknown parameter(s): {', '.join(sorted(unknown))}")
    prefix = query.get("prefix", env.get(MQTT_PREFIX_ENV, DEFAULT_PREFIX)).strip("/")
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
        username=unquote(parts.username) if parts.username else env.get(MQTT_USERNAME_ENV) or None,
        password=unquote(parts.password) if parts.password else env.get(MQTT_PASSWORD_ENV) or None,
        ca_certs=query.get("ca") or env.get(MQTT_CA_CERTS_ENV) or None,
        certfile=query.get("cert") or env.get(MQTT_CERTFILE_ENV) or None,
        keyfile=query.get("key") or env.get(MQTT_KEYFILE_ENV) or None,
    )


def topic_for(prefix: str, job_id: str | None) -> str:
    return f"{prefix}/jobs/{job_id or '+'}/events"


LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def connect_error(settings: MqttSettings, exc: BaseException) -> BusError:
    """One clear error for a failed connection, naming what is wrong."""
    import ssl  # ssl: tens of ms; a plain mqtt:// publish that connects never loads it

    where = settings.where
    if isinstance(exc, ssl.SSLCertVerificationError):
        return BrokerTlsError(
            f"TLS: cannot verify the certificate of {where} ({exc.verify_message}); "
            "check MQTT_CA_CERTS"
        )
    if isinstance(exc, ssl.SSLError):
        return BrokerTlsError(f"TLS handshake with {where} failed: {exc.reason or exc}")
    if isinstance(exc, ConnectionRefusedError):
        if settings.host in LOCAL_HOSTS:  # most often none installed (`make demo` installs none)
            return BrokerUnreachable(
                f"broker {where} refused the connection: no MQTT broker runs here; install one"
                " with `apt-get install mosquitto` (configuration: examples/mosquitto/)"
                " or start yours"
            )
        return BrokerUnreachable(f"broker {where} refused the connection (is it running?)")
    if isinstance(exc, socket.timeout | TimeoutError):
        return BrokerUnreachable(f"broker {where} did not answer within {CONNECT_TIMEOUT_S:g} s")
    if isinstance(exc, socket.gaierror):
        return BrokerUnreachable(f"cannot resolve broker host {settings.host!r}")
    return BrokerUnreachable(f"cannot reach broker {where}: {exc}")


def tls_context(settings: MqttSettings) -> Any:
    import ssl  # ssl: only for mqtts:// (see connect_error)

    try:
        context = ssl.create_default_context(cafile=settings.ca_certs)
        if settings.certfile:
            context.load_cert_chain(settings.certfile, settings.keyfile)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise BrokerTlsError(f"TLS settings for {settings.where} are unusable: {exc}") from None
    return context


# --- MQTT 5 encoding (only what a QoS 1 publisher needs) ---------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return struct.pack("!H", len(data)) + data


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def connect_packet(client_id: str, username: str | None, password: str | None) -> bytes:
    flags = 0x02  # clean start: a publisher keeps no session
    payload = _string(client_id)
    if username is not None:
        flags |= 0x80
        payload += _string(username)
        if password is not None:
            flags |= 0x40
            secret = password.encode("utf-8")
            payload += struct.pack("!H", len(secret)) + secret
    # keep-alive 0: the broker never drops an idle publisher; a dead link shows on next send
    variable = _string("MQTT") + bytes([5, flags]) + struct.pack("!H", 0) + _varint(0)
    return _packet(0x10, variable + payload)


def publish_packet(topic: str, payload: bytes, packet_id: int, *, retain: bool) -> bytes:
    first = 0x30 | 0x02 | (0x01 if retain else 0)
    return _packet(first, _string(topic) + struct.pack("!H", packet_id) + _varint(0) + payload)


DISCONNECT = b"\xe0\x00"


class SyncPublisher:
    """One connection to the broker for publishing; every publish waits for its PUBACK."""

    def __init__(self, settings: MqttSettings, client_id: str) -> None:
        self.settings = settings
        self._packet_id = 0
        try:
            raw = socket.create_connection((settings.host, settings.port), CONNECT_TIMEOUT_S)
        except OSError as exc:
            raise connect_error(settings, exc) from None
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = raw
            if settings.tls:
                sock = tls_context(settings).wrap_socket(raw, server_hostname=settings.host)
            sock.settimeout(CONNECT_TIMEOUT_S)
            sock.sendall(connect_packet(client_id, settings.username, settings.password))
            first, body = self._read(sock)
        except BusError:
            raw.close()
            raise
        except OSError as exc:
            raw.close()
            raise connect_error(settings, exc) from None
        if first >> 4 != 2 or len(body) < 2:
            sock.close()
            raise BrokerUnreachable(f"broker {settings.where} did not answer CONNECT with CONNACK")
        if body[1] >= 0x80:
            sock.close()
            reason = _REASONS.get(body[1], f"reason code {body[1]:#x}")
            raise BrokerAuthError(f"broker {settings.where} refused {settings.who()}: {reason}")
        self._sock = sock
        sock.settimeout(PUBLISH_TIMEOUT_S)

    def _read(self, sock: socket.socket) -> tuple[int, bytes]:
        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = sock.recv(n - len(data))
                if not chunk:
                    raise BrokerUnreachable(f"broker {self.settings.where} closed the connection")
                data += chunk
            return data

        first = exactly(1)[0]
        length, shift = 0, 0
        while True:
            byte = exactly(1)[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
            if shift > 21:
                raise BrokerUnreachable(f"broker {self.settings.where} sent a malformed packet")
        return first, exactly(length)

    def publish(self, topic: str, payload: bytes, *, retain: bool) -> None:
        """Send one QoS 1 message and return once the broker acknowledged it."""
        self._packet_id = self._packet_id % 65535 + 1
        packet_id = self._packet_id
        try:
            self._sock.sendall(publish_packet(topic, payload, packet_id, retain=retain))
            while True:
                first, body = self._read(self._sock)
                if (
                    first >> 4 == 4
                    and len(body) >= 2
                    and struct.unpack("!H", body[:2])[0] == packet_id
                ):
                    break  # our PUBACK; anything else (a stray packet) is not for a publisher
        except TimeoutError:
            raise BrokerUnreachable(
                f"broker {self.settings.where} did not acknowledge within {PUBLISH_TIMEOUT_S:g} s"
            ) from None
        except OSError as exc:
            raise BrokerUnreachable(f"publish to {self.settings.where} failed: {exc}") from None
        reason = body[2] if len(body) >= 3 else 0
        if reason >= 0x80:  # 0x10 "no matching subscribers" is a success
            text = _REASONS.get(reason, f"reason code {reason:#x}")
            error = BrokerAuthError if reason == 0x87 else BusError
            raise error(f"broker {self.settings.where} refused the message: {text}")

    def close(self) -> None:
        try:
            self._sock.sendall(DISCONNECT)
        except OSError:
            pass  # closing anyway
        finally:
            self._sock.close()
