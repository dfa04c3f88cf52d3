"""Publishing through the state dir's warm publish server (runtime/publish_server), for the jobs
no wrapper serves.

A job in a pane has its wrapper serve its publishes (adapters/publish_socket). A job registered
for a script that runs outside tmux (`delegate register`), or published for after its wrapper
ended, has none: each fresh `delegate publish` would load the registry, the audit log, SQLite
and HMAC again, about three times a bare Python's start. So the first such publish starts a
server for the state dir, which keeps them loaded, and publishes by itself meanwhile; the next
ones hand their request to the server. It ends after `$DELEGATE_PUBLISH_WARM_S` idle seconds
(`0`: no server is started).

- One server per state dir: the client that takes the state dir's `publish-server.lock` (flock)
  starts it and hands the lock down to it, which holds it for its life; a client that cannot
  take the lock starts none. No client waits for a server to start.
- A request carries a fingerprint: the Python, the state dir, and every setting publishing
  reads. A server of another fingerprint, or whose own code changed on disk since it started,
  answers `{"stale": true}` without publishing and ends; the client publishes by itself.
- Broker passwords never go on a socket: a client that has one in its environment publishes by
  itself.

Nothing here imports more than the publish client already has: the client's whole point is
not to load what the server keeps loaded.
"""

from __future__ import annotations

import os
import sys

from delegate.adapters.publish_socket import request, socket_path_text
from delegate.config.settings import (
    AGENT_MQTT_PASSWORD_ENV,
    COLUMNS_ENV,
    CONFIG_ENV,
    ENV_VARS,
    HOME_ENV,
    JOB_ENV,
    MQTT_CA_CERTS_ENV,
    MQTT_CERTFILE_ENV,
    MQTT_KEYFILE_ENV,
    MQTT_PASSWORD_ENV,
    PUBLISH_SOCKET_ENV,
    PUBLISH_WARM_ENV,
    REPORT_WARM_ENV,
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
# Read by no publish: the terminal's, the job's (the request names it), the servers' own.
_NOT_PUBLISHING = frozenset(
    (COLUMNS_ENV, "TERM", JOB_ENV, PUBLISH_SOCKET_ENV, REPORT_WARM_ENV, PUBLISH_WARM_ENV)
)
_PASSWORDS = (MQTT_PASSWORD_ENV, AGENT_MQTT_PASSWORD_ENV)
# Paths that mean another file from another folder when they are relative.
_PATHS = (HOME_ENV, CONFIG_ENV, MQTT_CA_CERTS_ENV, MQTT_CERTFILE_ENV, MQTT_KEYFILE_ENV)


def fingerprint(home: str, env: Mapping[str, str]) -> list[Any]:
    """What a server must share with a client to publish for it (see the module doc)."""
    relative = any(env.get(name) and not os.path.isabs(env[name]) for name in _PATHS)
    settings = [
        [var.name, env[var.name]]
        for var in ENV_VARS
        if var.name in env and var.name not in _NOT_PUBLISHING
    ]
    return [sys.executable, home, os.getcwd() if relative else "", settings]


def server_socket(home: str) -> str | None:
    """Where the publish server of the state dir `home` listens (None: no safe place)."""
    import zlib  # zlib: a key for a private socket, only when `home` is too deep for one

    key = f"publish-{zlib.crc32(os.fsencode(home)):08x}"
    return socket_path_text(home, key, PUBLISH_SERVER_SOCKET)


def wanted(env: Mapping[str, str]) -> bool:
    """Whether publishes of this environment may go through a server: not when none is to be
    kept (`$DELEGATE_PUBLISH_WARM_S` 0; ConfigError when it is no number of seconds), nor when
    the environment holds a broker password."""
    return publish_warm_s(env) > 0 and not any(env.get(name) for name in _PASSWORDS)


def publish(home: str, env: Mapping[str, str], args: dict[str, Any]) -> dict[str, Any] | None:
    """The server's answer to a publish for the job `args["job"]`; None when no server took it
    (none runs, or it runs for another fingerprint): the caller publishes by itself, and a
    server is started for the next publish when none runs."""
    path = server_socket(home)
    if path is None:
        return None
    asked = {**args, "fingerprint": fingerprint(home, env)}
    answer = request(path, asked)
    if answer is None:
        start_server(home, path, env)
        return None
    return None if answer.get("stale") else answer


def start_server(home: str, path: str, env: Mapping[str, str]) -> bool:
    """Start the server of `home` at `path` unless one runs or starts (its lock is taken);
    True when one was started. It is not waited for."""
    import fcntl  # fcntl: only the client that starts a server takes its lock

    try:
        lock = os.open(os.path.join(home, PUBLISH_SERVER_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False  # no state dir yet: the direct publish says what is wrong
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a server runs, or is starting
        return _spawn(home, path, lock, env)
    finally:
        os.close(lock)  # the server holds the lock through its own copy of the descriptor


def _spawn(home: str, path: str, lock: int, env: Mapping[str, str]) -> bool:
    """The server, detached (a session of its own, stdin from /dev/null, its output to the
    state dir's publish-server.log), with the locked descriptor `lock`."""
    log = os.open(
        os.path.join(home, PUBLISH_SERVER_LOG), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
    )
    try:
        os.set_inheritable(lock, True)
        argv = [sys.executable, "-m", SERVER_MODULE, path, str(lock)]
        os.posix_spawn(
            sys.executable,
            argv,
            dict(env),
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, log, 1),
                (os.POSIX_SPAWN_DUP2, log, 2),
            ],
            setsid=True,  # outlives the publish that started it, and its terminal
        )
    except OSError:
        return False
    finally:
        os.close(log)
    return True


def stop(home: str) -> bool:
    """Ask the publish server of the state dir `home` to end; True when one was there and
    said so (it ends once it answered what it took)."""
    path = server_socket(home)
    answer = None if path is None else request(path, {"op": "stop"}, attempts=1)
    return bool(answer and answer.get("ok"))
