"""Publishing through the state dir's warm publish server (runtime/publish_server), for the jobs
no wrapper serves.

A job in a pane has its wrapper serve its publishes (adapters/publish_socket). A job registered
for a script that runs outside tmux (`delegate register`), or published for after its wrapper
ended, has none: each fresh `delegate publish` would load the registry, the audit log, SQLite
and HMAC again, about three times a bare Python's start. So the first such publish starts a
server for the state dir, which keeps them loaded, and publishes by itself meanwhile; the next
ones hand their request to the server. It ends after `$DELEGATE_PUBLISH_WARM_S` idle seconds
(`0`: no server is started).

- It serves `started`, `progress` and `permission_required`. A job's last event (`completed`,
  `error`) is published by its own process: ending a job may start queued ones, which must get
  the environment of whoever ended it, not the server's.
- One server per state dir: a client whose publish went through by itself, and found no server
  listening, takes the state dir's `publish-server.lock` (flock) and starts one, handing the
  lock down to it, which holds it for its life; a client that cannot take the lock starts
  none. No client waits for a server to start.
- The server gets only the settings publishing reads (and Python's own), the state dir and
  relative paths made absolute, and works in `/`: it is nobody's job's process, and holds no
  folder of anyone's. It runs with `python -P`, so a `delegate/` folder where the first
  publish ran is not imported in its place.
- A request carries a fingerprint: the Python and the package folder, and that environment. A
  server of another fingerprint, or whose own code changed on disk since it started, answers
  `{"stale": true}` without publishing and ends; the client publishes by itself.
- Broker passwords never go on a socket: a client that has one in its environment (or in its
  bus URL) publishes by itself. Linux only (the server checks its peer's uid).

Nothing here imports more than the publish client already has: the client's whole point is
not to load what the server keeps loaded.
"""

from __future__ import annotations

import os
import sys

import delegate
from delegate.adapters.detached import spawn_holding, take_lock
from delegate.adapters.publish_socket import request, socket_path_text
from delegate.config.settings import (
    AGENT_MQTT_PASSWORD_ENV,
    BUS_ENV,
    CONFIG_ENV,
    HOME_ENV,
    LOG_LEVEL_ENV,
    MQTT_CA_CERTS_ENV,
    MQTT_CERTFILE_ENV,
    MQTT_KEYFILE_ENV,
    MQTT_PASSWORD_ENV,
    MQTT_PREFIX_ENV,
    MQTT_USERNAME_ENV,
    PUBLISH_WARM_ENV,
    XDG_STATE_ENV,
    publish_warm_s,
)
from delegate.config.statefiles import (
    PUBLISH_SERVER_LOCK,
    PUBLISH_SERVER_LOG,
    PUBLISH_SERVER_SOCKET,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fresh publish milliseconds
    from collections.abc import Mapping
    from typing import Any

SERVER_MODULE = "delegate.runtime.publish_server"
SERVED_EVENTS = ("started", "progress", "permission_required")  # not a job's last (module doc)
PACKAGE_FOLDER = os.path.dirname(os.path.dirname(os.path.abspath(delegate.__file__)))
# What the server's publishing reads (besides Python's own PYTHON* settings and HOME, for `~`).
_SERVER_VARS = (
    XDG_STATE_ENV,
    BUS_ENV,
    CONFIG_ENV,
    LOG_LEVEL_ENV,
    MQTT_PREFIX_ENV,
    MQTT_USERNAME_ENV,
    MQTT_CA_CERTS_ENV,
    MQTT_CERTFILE_ENV,
    MQTT_KEYFILE_ENV,
    "HOME",
)
_PATHS = (CONFIG_ENV, MQTT_CA_CERTS_ENV, MQTT_CERTFILE_ENV, MQTT_KEYFILE_ENV)
_PASSWORDS = (MQTT_PASSWORD_ENV, AGENT_MQTT_PASSWORD_ENV)
_LOG_LIMIT = 1 << 20  # a server log past this is started afresh


def server_env(home: str, env: Mapping[str, str]) -> dict[str, str]:
    """The environment a server of the state dir `home` runs with, from a client's `env`."""
    kept = {name: env[name] for name in _SERVER_VARS if env.get(name)}
    kept.update((name, value) for name, value in env.items() if name.startswith("PYTHON"))
    for name in _PATHS:
        if name in kept:
            kept[name] = os.path.abspath(kept[name])
    kept[HOME_ENV] = home
    if env.get(PUBLISH_WARM_ENV):
        kept[PUBLISH_WARM_ENV] = env[PUBLISH_WARM_ENV]
    return kept


def fingerprint(home: str, env: Mapping[str, str]) -> list[Any]:
    """What a server must share with a client to publish for it (see the module doc)."""
    settings = [
        [name, value]
        for name, value in sorted(server_env(home, env).items())
        if name != PUBLISH_WARM_ENV  # the server's own life, not how it publishes
    ]
    return [sys.executable, PACKAGE_FOLDER, settings]  # lists, as they come back from JSON


def server_socket(home: str) -> str | None:
    """Where the publish server of the state dir `home` listens (None: no safe place)."""
    import zlib  # zlib: a key for a private socket, only when `home` is too deep for one

    key = f"publish-{zlib.crc32(os.fsencode(home)):08x}"
    return socket_path_text(home, key, PUBLISH_SERVER_SOCKET)


class WarmClient:
    """One publish's side of the state dir's server: ask it, else start it afterwards."""

    def __init__(self, home: str, env: Mapping[str, str]) -> None:
        self.home = os.path.normpath(home)
        self.env = server_env(self.home, env)
        self.path = server_socket(self.home)
        self.none_listening = False  # no server answered: start one once the publish is out

    def publish(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The server's answer to a publish; None when no server took it (none listens, or it
        runs for another fingerprint): the caller publishes by itself."""
        if self.path is None:
            return None
        asked = {**args, "fingerprint": fingerprint(self.home, self.env)}
        # One attempt: a retry could reach a server started since, which would publish it
        # again; an answer lost after sending is an error (exit 69), never a second event.
        answer = request(self.path, asked, attempts=1)
        if answer is None:
            self.none_listening = True
            return None
        return None if answer.get("stale") or answer.get("direct") else answer

    def start_server(self) -> bool:
        """Start the server unless one runs or starts (its lock is taken); True when one was
        started. It is not waited for."""
        path = self.path
        if path is None:
            return False
        lock = take_lock(os.path.join(self.home, PUBLISH_SERVER_LOCK))
        if lock is None:
            return False  # a server runs, or is starting (or there is no state dir)
        try:
            # detached, its output to the state dir's publish-server.log, holding the lock
            argv = [sys.executable, "-P", "-m", SERVER_MODULE, path, str(lock)]
            log = os.path.join(self.home, PUBLISH_SERVER_LOG)
            pid = spawn_holding(argv, self.env, lock=lock, log_path=log, log_limit=_LOG_LIMIT)
            return pid is not None
        finally:
            os.close(lock)  # the server holds the lock through its own copy of the descriptor


def client(home: str, env: Mapping[str, str]) -> WarmClient | None:
    """A client for the server of `home`, or None when publishes of this environment do not go
    through one: `$DELEGATE_PUBLISH_WARM_S` is 0 (ConfigError when it is no number of
    seconds), a broker password is in the environment or the bus URL, or not on Linux."""
    if publish_warm_s(env) == 0 or not sys.platform.startswith("linux"):
        return None
    if any(env.get(name) for name in _PASSWORDS) or "@" in env.get(BUS_ENV, ""):
        return None
    return WarmClient(home, env)


def stop(home: str) -> bool:
    """Ask the publish server of the state dir `home` to end; True when one was there and
    said so (it ends once it answered what it took)."""
    path = server_socket(os.path.normpath(home))
    answer = None if path is None else request(path, {"op": "stop"}, attempts=1)
    return bool(answer and answer.get("ok"))
