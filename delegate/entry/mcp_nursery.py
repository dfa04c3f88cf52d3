"""A state dir's MCP nursery (`python -P -m delegate.entry.mcp_nursery SOCKET LOCK_FD`): the
MCP SDK loaded once, forked into each claude or codex job's warm `delegate mcp` (the zygote of
entry/mcp_zygote).

Why: Claude Code and Codex wait for their MCP servers before they ask their model anything, and
loading the SDK takes about half a second of CPU. A zygote per job loads it while its agent
starts, on the same cores: on two cores the agent's start and the SDK's load slow each other
down, and a short job takes ~0.4-1.4 s longer than the same CLI run bare (bench/real_agents.py).
Forking a process that has loaded it already takes milliseconds.

- A job's wrapper (runtime/mcp_warm) asks: its message is the agent's environment (JSON), with
  three descriptors: the read end of a pipe whose EOF ends the zygote (the wrapper keeps the
  write end), the job's mcp-warm.log, and the agent's working directory. The nursery answers
  b"S<pid>\\n" once it forked the zygote, which then runs in a session of its own, in that
  environment and folder: exactly the per-job zygote, but warm from its first instant.
- Only its own user may ask (SO_PEERCRED); the zygote still checks its job (mcp_server.identify)
  and serves no other. A request of another Python or package folder, or one that arrives after
  the nursery's own code changed on disk, is answered b"stale" and the nursery ends; the wrapper
  then starts the zygote the old way.
- One per state dir: runtime/mcp_warm starts it holding the state dir's mcp-nursery.lock, which
  it hands down; the nursery holds it for its life. It ends after `$DELEGATE_MCP_WARM_S` idle
  seconds, when its socket is removed or replaced, or when its state dir is gone. The zygotes
  it forked live on without it (their wrapper's pipe ends them). Its log: mcp-nursery.log.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
from typing import NoReturn

from delegate.adapters.mcp_handover import NURSERY_STALE, STARTED, nursery_fingerprint
from delegate.adapters.publish_socket import listen_private, peer_uid, socket_inode
from delegate.config import logsetup
from delegate.config.settings import become, mcp_warm_s, settings
from delegate.core.errors import guarded
from delegate.entry import mcp_zygote
from delegate.runtime.publish_server import loaded_code, socket_and_lock

log = logsetup.get_logger(__name__)
USAGE = "usage: python -P -m delegate.entry.mcp_nursery SOCKET LOCK_FD"
PASSED_FDS = 3  # the zygote's stdin pipe, its log, its working directory
MAX_MESSAGE = 1 << 20  # an agent's environment, as JSON
TICK_S = 1.0
ASK_TIMEOUT_S = 5.0


class Nursery:
    def __init__(self, path: str, idle_s: float) -> None:
        self.path = path
        self.idle_s = idle_s
        self.listener = listen_private(path, mcp_zygote.BACKLOG)
        self.inode = socket_inode(path)
        # the MCP SDK and the server with its tools' schemas, once for every job (the module doc)
        from delegate.entry.mcp_server import prepare

        self.warm = prepare()
        self.code = loaded_code()
        self.fingerprint = nursery_fingerprint()

    def serve(self) -> None:
        """Answer wrappers until idle for `idle_s`, stale, or unseated."""
        idle = 0.0
        while idle < self.idle_s and socket_inode(self.path) == self.inode:
            ready, _, _ = select.select([self.listener], [], [], TICK_S)
            if not ready:
                idle += TICK_S
                continue
            idle = 0.0
            if not self.take():
                return  # stale: the wrapper starts its zygote the old way

    def take(self) -> bool:
        """One wrapper's request: fork its job's zygote. False when this nursery is stale."""
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return True
        fds: list[int] = []
        with conn:
            try:
                if peer_uid(conn) != os.getuid():
                    log.warning("refused a request from uid %s", peer_uid(conn))
                    return True
                conn.settimeout(ASK_TIMEOUT_S)
                message, fds, _, _ = socket.recv_fds(conn, 65536, PASSED_FDS)
                while len(message) <= MAX_MESSAGE and (more := conn.recv(65536)):
                    message += more  # until the wrapper shut its side
                asked = json.loads(message)
            except (OSError, ValueError) as exc:
                log.warning("a request that could not be read: %s", exc)
                for fd in fds:
                    os.close(fd)
                return True
            try:
                if asked.get("fingerprint") != self.fingerprint or loaded_code() != self.code:
                    conn.sendall(NURSERY_STALE)
                    return False
                env = asked.get("env")
                if not isinstance(env, dict) or len(fds) != PASSED_FDS:
                    return True
                pid = os.fork()
                if pid == 0:
                    self.zygote(conn, fds, {str(k): str(v) for k, v in env.items()})
                conn.sendall(STARTED + str(pid).encode() + b"\n")
                log.info(
                    "forked the warm MCP server of job %s: %d", env.get("DELEGATE_JOB_ID"), pid
                )
            finally:
                for fd in fds:
                    os.close(fd)
        return True

    def zygote(self, conn: socket.socket, fds: list[int], env: dict[str, str]) -> NoReturn:
        """In the child: become the job's zygote, in its environment and folder."""
        status = 70
        try:
            os.setsid()  # its wrapper signals its group; the nursery's is not its
            conn.close()
            self.listener.close()
            pipe, log_fd, folder = fds
            os.dup2(pipe, 0)
            os.dup2(log_fd, 1)
            os.dup2(log_fd, 2)
            os.fchdir(folder)
            for fd in fds:
                os.close(fd)
            become(env)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            status = guarded(lambda: mcp_zygote.run(self.warm, parent=None))
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(status)

    def close(self) -> None:
        self.listener.close()
        if socket_inode(self.path) == self.inode:
            with contextlib.suppress(OSError):
                os.unlink(self.path)


def main(argv: list[str] | None = None) -> int:
    given = socket_and_lock(argv, USAGE)  # and in `/`: each zygote gets its agent's folder
    if given is None:
        return 64
    path, lock = given
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps what it forked

    def serve() -> int:
        nursery = Nursery(path, mcp_warm_s(settings().env))
        try:
            nursery.serve()
        finally:
            nursery.close()
        return 0

    try:
        return guarded(serve)
    finally:
        os.close(lock)  # the next job's wrapper may start a nursery


if __name__ == "__main__":
    logsetup.configure_lazily()
    sys.exit(main())
