"""The warm `delegate mcp` of one job (`python -m delegate.entry.mcp_zygote`, a "zygote").

The job's wrapper starts it just before the agent (runtime/mcp_warm), in the agent's environment,
so the MCP SDK loads while the agent itself starts. It listens first (a client that comes early
waits in the backlog instead of importing the SDK itself), then builds what can be built before
serving (mcp_server.prepare), then forks a child per connection: the child takes the client's
stdin, stdout and stderr (adapters/mcp_handover) and runs exactly `delegate mcp`'s stdio server
on them. The zygote itself has no thread and no event loop, so forking it is safe; children are
reaped by the kernel (SIGCHLD ignored).

Only this user may connect (SO_PEERCRED), and only for this job. It ends when its wrapper closes
the pipe on its stdin or goes away, or on SIGTERM; the wrapper kills its process group, children
included, once the agent has exited.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

from delegate.adapters.mcp_handover import HANDED_FDS, STARTED, socket_path
from delegate.adapters.publish_socket import listen_private, peer_uid
from delegate.config import logsetup
from delegate.config.settings import settings
from delegate.core.errors import UsageError, guarded
from delegate.core.ids import is_job_id
from delegate.services.state import State

TYPE_CHECKING = False
if TYPE_CHECKING:  # the SDK's: loaded by `run`, after the socket listens
    from delegate.entry.mcp_server import Warm

log = logsetup.get_logger(__name__)
POLL_S = 1.0  # how often it checks that its wrapper is still there
HANDOVER_TIMEOUT_S = 5.0  # a client that connects and sends nothing frees the zygote after this
BACKLOG = 16


def serve_forever(
    listener: socket.socket, serving: Callable[[], int], job_id: str, parent: int | None
) -> None:
    """Fork a server per connection until the wrapper closes our stdin or goes away (`parent`:
    the wrapper's pid when it is this process's parent; a zygote the nursery forked has only
    the pipe to tell)."""
    while True:
        ready, _, _ = select.select([listener, sys.stdin.fileno()], [], [], POLL_S)
        if sys.stdin.fileno() in ready and not os.read(sys.stdin.fileno(), 512):
            return  # the wrapper closed its end of the pipe (or died)
        if parent is not None and os.getppid() != parent:
            return  # the wrapper is gone
        if listener in ready:
            take(listener, serving, job_id)


def take(listener: socket.socket, serving: Callable[[], int], job_id: str) -> None:
    """Accept one client: refuse it, or fork a child that serves its stdio."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return
    fds: list[int] = []
    with conn:
        try:
            if peer_uid(conn) != os.getuid():
                log.warning("refused a connection from uid %s", peer_uid(conn))
                return
            conn.settimeout(HANDOVER_TIMEOUT_S)
            message, fds, _, _ = socket.recv_fds(conn, 64, HANDED_FDS)
        except OSError as exc:
            log.warning("a client went away before handing over its stdio: %s", exc)
            return
        try:
            if message.decode("ascii", "replace") != job_id or len(fds) < 3:
                log.warning("refused a client for %r (this serves job %s)", message, job_id)
                return
            pid = os.fork()
            if pid == 0:
                child(conn, listener, fds, serving)
            log.info("serving a client in process %d", pid)
        finally:
            for fd in fds:
                os.close(fd)


def child(
    conn: socket.socket, listener: socket.socket, fds: list[int], serving: Callable[[], int]
) -> NoReturn:
    """Serve one client on its own descriptors, as `delegate mcp` would, and say how it ended."""
    status = 70
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # its own children are waited for
        # an agent ends its MCP servers with SIGINT (claude then waits 100 ms before SIGTERM):
        # the stdio server, a thread blocked reading stdin, would not stop on KeyboardInterrupt
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        listener.close()
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
        if len(fds) > 3:
            os.fchdir(fds[3])
        for fd in fds:
            os.close(fd)
        fds.clear()
        conn.settimeout(None)
        conn.sendall(STARTED + str(os.getpid()).encode() + b"\n")
        status = guarded(serving)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(f"{status}\n".encode())
        os._exit(status)


def stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)  # through main's `finally`, which removes the socket


def main() -> int:
    """Listen, warm up, serve until told to stop."""
    return run(None, parent=os.getppid())


def run(warm: Warm | None, parent: int | None) -> int:
    """The zygote of the job this process's environment names: listen, warm up unless `warm`
    (what a nursery prepared before it forked this process) is given, serve until told to
    stop."""
    env = settings()
    if not env.home or not is_job_id(env.job_id):
        raise UsageError("the warm MCP server serves one job (DELEGATE_HOME, DELEGATE_JOB_ID)")
    path = socket_path(env.home, env.job_id)
    if path is None:
        raise UsageError("no private place for the warm MCP server's socket")
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    signal.signal(signal.SIGTERM, stop)
    listener = listen_private(path, BACKLOG)
    try:
        # the MCP SDK (seconds): what this process is for, loaded after it listens (see above)
        from delegate.entry.mcp_server import identify, prepare, serve

        identify(State.open())  # a job this process may not serve: no warm server
        ready = warm if warm is not None else prepare()
        log.info("warm MCP server of job %s ready (pid %d) at %s", env.job_id, os.getpid(), path)
        serve_forever(listener, lambda: serve(ready), env.job_id, parent)
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
    return 0


if __name__ == "__main__":
    logsetup.configure_lazily()
    sys.exit(guarded(main))
