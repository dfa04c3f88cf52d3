"""Who may see and act on the dashboard: the start-up token, its cookie, the Host header.

Plain Python (no web framework), so the rules are checked on their own. The token is printed
once inside the URL, as Jupyter does; the first visit with it sets a cookie and redirects to
the URL without it. The cookie and the CSRF value a page sends with each POST are derived
from the token (HMAC), so the token itself is never stored in the browser, and every
comparison takes constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import socket

from delegate.core.errors import UsageError

COOKIE = "delegate_dashboard"
CSRF_HEADER = "x-delegate-csrf"
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = frozenset({"0.0.0.0", "::"})  # noqa: S104 - names of the wildcard, not a bind


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def check_bind(bind: str, *, tls_cert: str | None, tls_key: str | None, insecure: bool) -> None:
    """Refuse a listening address other than loopback without TLS or an explicit --insecure,
    and half a TLS pair."""
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together: give both or neither")
    if is_loopback(bind) or tls_cert is not None or insecure:
        return
    raise UsageError(
        f"--bind {bind} would serve the dashboard beyond this machine in clear text:"
        " give --tls-cert and --tls-key, or --insecure to do it anyway"
    )


def allowed_hosts(bind: str) -> frozenset[str]:
    """Host header names that may reach the dashboard (no others: DNS rebinding): the bound
    address, the loopback names, and this machine's names when bound to every interface."""
    names = {bind.lower(), *LOOPBACK_NAMES}
    if bind in WILDCARDS:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return frozenset(names)


def host_name(header: str) -> str:
    """The name part of a Host header (`[::1]:8080` -> `::1`, `localhost:80` -> `localhost`)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def _same(given: str | None, expected: bytes) -> bool:
    """Whether `given` is `expected`, in constant time."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), expected)


class Guard:
    """The token's checks; one per server run."""

    def __init__(self, token: str, *, bind: str, read_only: bool) -> None:
        self._token = token.encode()
        self.read_only = read_only
        self.hosts = allowed_hosts(bind)
        self.wildcard = bind in WILDCARDS
        self.session = self._derive(b"session")
        self.csrf = self._derive(b"csrf")

    @staticmethod
    def new_token() -> str:
        return secrets.token_urlsafe(32)

    def _derive(self, purpose: bytes) -> str:
        return hmac.new(self._token, purpose, hashlib.sha256).hexdigest()

    def token_ok(self, given: str | None) -> bool:
        return _same(given, self._token)

    def cookie_ok(self, given: str | None) -> bool:
        return _same(given, self.session.encode())

    def csrf_ok(self, given: str | None) -> bool:
        return _same(given, self.csrf.encode())

    def host_ok(self, header: str | None, arrived_at: str | None = None) -> bool:
        """Whether the Host header names this dashboard. Bound to every interface, the
        address a connection arrived at counts too (a request by IP: an address, never a name
        a rebinding DNS could point here)."""
        if header is None:
            return False
        name = host_name(header)
        if name in self.hosts:
            return True
        return self.wildcard and arrived_at is not None and name == arrived_at.lower()
