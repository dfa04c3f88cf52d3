"""The egress allowlist of a sandboxed job (`network = "allowlist"`): which hosts its proxy lets
through, and how a proxy request names its destination. Pure: runtime/egress serves it.

A request is the head of an HTTP proxy request: `CONNECT host:port HTTP/1.1` (a TLS tunnel) or
`GET http://host[:port]/path HTTP/1.1` (plain HTTP, forwarded in origin form). An IPv6 address
is written in brackets there (`[2001:db8::1]:443`), and is compared in its one canonical form
(`ipaddress`): `::1` and `0:0:0:0:0:0:0:1` are the same host.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple

MAX_HEAD = 16 * 1024  # a request head longer than this is refused
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_PATTERN = re.compile(
    r"(\*\.)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*"
)


class Destination(NamedTuple):
    host: str
    port: int
    tunnel: bool  # CONNECT: bytes pass untouched; else a plain request forwarded
    head: bytes = b""  # a plain request's head in origin form, to send first


class BadRequest(ValueError):
    """A proxy request that names no destination we can judge."""


def _ipv6(text: str) -> str | None:
    """`text` (bracketed or not) as an IPv6 address in its canonical form, else None."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" not in inner:
        return None
    try:
        return str(ipaddress.IPv6Address(inner))
    except ValueError:
        return None


def check_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """`allow_hosts` as given: host names, IPv4 or IPv6 addresses, or `*.` before a domain."""
    found = []
    for pattern in patterns:
        text = pattern.strip().lower().rstrip(".")
        address = _ipv6(text)
        if address is None and not _PATTERN.fullmatch(text):
            raise ValueError(f"{pattern!r} is not a host name, an address or *.domain")
        found.append(address or text)
    return tuple(found)


def allowed(host: str, patterns: Iterable[str]) -> bool:
    """Whether `host` is one the patterns name (`*.example.com`: any name below it, not the
    domain itself)."""
    name = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if name.endswith(pattern[1:]) and fnmatch.fnmatchcase(name, pattern):
                return True
        elif name == pattern:
            return True
    return False


def _host_port(text: str, default: int) -> tuple[str, int]:
    if text.startswith("["):  # an IPv6 address: [addr] or [addr]:port
        inside, bracket, after = text.partition("]")
        host, port = _ipv6(inside + bracket) or "", after[1:] if after else str(default)
        if not bracket or (after and not after.startswith(":")):
            host = ""
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            host, port = text, str(default)
        host = host.lower().rstrip(".")
        if not _HOST.fullmatch(host):
            host = ""
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadRequest(f"not a host and port: {text[:80]!r}")
    return host, int(port)


def parse_head(head: bytes) -> Destination:
    """Where a proxy request goes; BadRequest for anything else (a request that names no
    host, a host that is no plain name or address, a head too long)."""
    if len(head) > MAX_HEAD:
        raise BadRequest("request head too long")
    first, _, rest = head.partition(b"\r\n")
    try:
        method, target, version = first.decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("not an HTTP request line") from None
    if not version.startswith("HTTP/1."):
        raise BadRequest(f"not HTTP/1.x: {version[:20]!r}")
    if method == "CONNECT":
        host, port = _host_port(target, 443)
        return Destination(host, port, True)
    if not target.startswith("http://"):
        raise BadRequest("a plain request must name http://host/ (https goes by CONNECT)")
    where, slash, path = target[len("http://") :].partition("/")
    host, port = _host_port(where, 80)
    origin = f"{method} {slash}{path} {version}\r\n".encode("ascii")
    return Destination(host, port, False, origin + rest)
