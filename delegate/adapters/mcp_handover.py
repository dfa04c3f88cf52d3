"""Handing `delegate mcp`'s stdio to its job's warm server (entry/mcp_zygote) over a Unix socket.

Importing the MCP SDK takes seconds, longer than an agent waits for its MCP servers to answer.
So the job's wrapper starts a warm server with the SDK loaded (runtime/mcp_warm), and the process
the agent starts (`python -m delegate.entry.mcp`) only connects to it, passes its own stdin,
stdout and stderr and its working directory as file descriptors (SCM_RIGHTS, what
`socket.send_fds` sends), and waits. The warm server forks a child that serves exactly as
`delegate mcp` does, on those descriptors: the agent talks to the SDK over its own pipes and no
byte is relayed.

Protocol, on one connection:
    client -> server   the job id (ASCII), with the descriptors stdin, stdout, stderr, cwd
    server -> client   b"S<pid>\\n" once the child `pid` has the descriptors (it serves now)
                       b"<exit status>\\n" when it has finished
A connection closed before the b"S" line means nothing was read from stdin: the client serves
in-process as if there were no warm server. This side is the client's hot path: `_socket`, not
`socket` (which pulls in enum and selectors), and no pathlib.
"""

from __future__ import annotations

import os
import stat
import sys

from delegate.adapters.publish_socket import peer_uid
from delegate.config.statefiles import LOGS_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:  # the type checker's only: the client imports _socket when it connects
    from _socket import socket

SOCKET_FILE = "mcp.sock"
STARTED = b"S"
HANDED_FDS = 4  # stdin, stdout, stderr, cwd
START_TIMEOUT_S = 60.0  # a warm server still importing the SDK answers after that import
LOST_STATUS = 70  # the child ended without saying how (killed)
_MAX_PATH = 100  # sun_path holds 108 bytes on Linux


def socket_path(home: str, job_id: str) -> str | None:
    """Where the warm server of `job_id` listens: its log folder, or a private temp folder of
    this user's when that path is too long for a Unix socket (as publish_socket does). None
    when no safe place exists."""
    candidate = os.path.join(home, LOGS_DIR, job_id, SOCKET_FILE)
    if len(os.fsencode(candidate)) < _MAX_PATH:
        return candidate
    import tempfile  # tempfile: only for a log folder too deep for a Unix socket

    folder = os.path.join(tempfile.gettempdir(), f"delegate-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)  # not a link planted there to a folder of someone else's
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or (info.st_mode & 0o077):
        return None  # a link, someone else's folder, or one open to others: do not use it
    candidate = os.path.join(folder, f"{job_id}.{SOCKET_FILE}")
    return candidate if len(os.fsencode(candidate)) < _MAX_PATH else None


def hand_over(path: str, job_id: str) -> int | None:
    """Have the warm server at `path` serve this process's stdio; its exit status, or None
    when no warm server took it (nothing was read from stdin: serve in-process)."""
    import _socket  # _socket, signal: only when there is a socket; `_socket`: see above
    import signal  # as _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(START_TIMEOUT_S)
        lines = _Lines(sock)
        try:
            sock.connect(path)
            if peer_uid(sock) != os.getuid():
                return None  # not our user's server: it gets no descriptor of ours
            _send_stdio(sock, job_id)
            started = lines.next()
        except OSError:
            return None
        if not started.startswith(STARTED) or not started[1:].isdigit():
            return None  # refused (another job, another user) before anything was served
        child = int(started[1:])
        forwarded: list[int] = []

        def forward(signum: int, frame: object) -> None:
            forwarded.append(signum)
            try:
                os.kill(child, signum)
            except OSError:
                return  # it has just ended

        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, forward)
        _let_go_of_stdio()
        sock.settimeout(None)
        return _exit_status(lines, forwarded)
    finally:
        sock.close()


def _send_stdio(sock: socket, job_id: str) -> None:
    import _socket  # as in hand_over

    fds = [0, 1, 2, *_cwd_fd()]
    try:
        rights = b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)
        ancillary = [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, rights)]
        sock.sendmsg([job_id.encode("ascii")], ancillary)
    finally:
        for fd in fds[3:]:
            os.close(fd)


def _cwd_fd() -> list[int]:
    try:
        return [os.open(".", os.O_RDONLY | os.O_DIRECTORY)]
    except OSError:
        return []  # a working directory that is gone: the child keeps the warm server's


class _Lines:
    """The server's lines, one at a time: both may come in one read (a child that ends at
    once), and the second must not be lost in the first."""

    def __init__(self, sock: socket) -> None:
        self.sock = sock
        self.buffer = b""

    def next(self) -> bytes:
        """The next line (without its newline); what came before EOF otherwise."""
        while b"\n" not in self.buffer:
            chunk = self.sock.recv(64)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def _let_go_of_stdio() -> None:
    """Close this process's copies of stdin and stdout: the agent must see the server's
    stdout end when the server ends, not when this process does."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)


def _exit_status(lines: _Lines, forwarded: list[int]) -> int:
    while True:
        try:
            line = lines.next()
            break
        except InterruptedError:  # a forwarded signal; the child's answer is still coming
            continue
        except OSError:
            line = b""
            break
    if line.isdigit():
        return int(line)
    return 128 + forwarded[0] if forwarded else LOST_STATUS


# -- the state dir's MCP nursery (entry/mcp_nursery), as a job's wrapper asks it ----------------

NURSERY_STALE = b"stale"
NURSERY_TIMEOUT_S = 5.0


def nursery_fingerprint() -> list[str]:
    """What a wrapper must share with the nursery to be served by it: the same Python and the
    same package folder (a nursery of another installation would fork another toolkit)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, package]


def ask_nursery(path: str, env: dict[str, str], fds: list[int]) -> int | None:
    """Ask the nursery at `path` for a job's zygote in `env` on `fds` (its stdin pipe, its log,
    its folder); the zygote's pid, or None when no nursery forked one (none listens, it is
    stale, or it refused)."""
    import json  # json, socket: the wrapper's, never `delegate mcp`'s hot path
    import socket  # as json

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(NURSERY_TIMEOUT_S)
            conn.connect(path)
            if peer_uid(conn) != os.getuid():
                return None  # not our user's nursery: it gets no descriptor of ours
            message = {"fingerprint": nursery_fingerprint(), "env": env}
            socket.send_fds(conn, [json.dumps(message).encode()], fds)
            conn.shutdown(socket.SHUT_WR)
            answer = conn.recv(64)
    except OSError:
        return None
    if not answer.startswith(STARTED) or not answer[1:].strip().isdigit():
        return None
    return int(answer[1:].strip())
