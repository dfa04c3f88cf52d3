"""`delegate publish` served by the agent wrapper over a private Unix socket.

An agent may publish dozens of times; each fresh `delegate publish` process would import the
registry, the bus and the protocol again. Inside a pane the wrapper already has them loaded, so
it listens on a socket (mode 0600, in a 0700 folder) named by `DELEGATE_PUBLISH_SOCKET`, and the
client only has to start Python, send one JSON request and print the answer. Anything that goes
wrong on the way (no socket, wrapper gone) makes the client publish by itself as usual.

Request:  {"job": id|null, "event": str, "detail": str, "data": str|null, "request_id": str}
          (then EOF)
Response: {"ok": true, "receipt": {...}} or {"ok": false, "message": str, "exit_code": int}

Once a request has been sent, the client never publishes by itself: the event may already be
out. It asks the wrapper again with the same request id, and the wrapper answers a repeated id
with the first receipt, so one request is one event whatever gets lost on the way back.
"""

from __future__ import annotations

import os
import stat
import sys
import time

from delegate.config.settings import settings
from delegate.core import fastjson as json  # the client's hot path: no `re` behind `json`
from delegate.core.errors import DelegateError

TYPE_CHECKING = False
if TYPE_CHECKING:  # the client side must stay light: typing, pathlib, tempfile load lazily
    import socket
    from pathlib import Path
    from typing import Any

MAX_REQUEST = 1024 * 1024
CONNECTION_TIMEOUT_S = 10.0  # a client that stops talking frees the server after this
REMEMBERED_ANSWERS = 1024
ATTEMPTS = 3
ENDING_GRACE_S = 0.1  # how long an ending server still takes connections after its path went
_MAX_PATH = 100  # sun_path holds 108 bytes on Linux


def socket_path(folder: Path, key: str, name: str = "publish.sock") -> Path | None:
    """Where a private server listens: `folder/name` (for the wrapper of job `key`: its log
    folder), or `key.sock` in a private temp folder when that path is too long for a Unix
    socket. None when no safe place exists."""
    from pathlib import Path  # pathlib: the servers' side; the client stays light (see above)

    text = socket_path_text(str(folder), key, name)
    return None if text is None else Path(text)


def socket_path_text(folder: str, key: str, name: str) -> str | None:
    """`socket_path` as text, for a client that cannot spare pathlib (a fresh publish)."""
    candidate = os.path.join(folder, name)
    if len(os.fsencode(candidate)) < _MAX_PATH:
        return candidate
    import tempfile  # tempfile: only for a path too long for a socket, which is rare

    private = os.path.join(tempfile.gettempdir(), f"delegate-{os.getuid()}")
    try:
        os.mkdir(private, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        info = os.lstat(private)  # not a link planted there to a folder of someone else's
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or (info.st_mode & 0o077):
        return None  # someone else's folder, or readable by others: do not use it
    candidate = os.path.join(private, f"{key}.sock")
    return candidate if len(os.fsencode(candidate)) < _MAX_PATH else None


# --- what every private Unix socket server of ours shares (the wrapper's, the MCP zygote's,
# the warm report server's)


def listen_private(path: str, backlog: int = 16) -> socket.socket:
    """A Unix socket listening at `path` (a stale one there removed), 0600 from the moment it
    exists: bound under a umask, not chmod-ed after."""
    import socket  # socket: the servers'; a client (a fresh `delegate publish`) never binds

    _unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    listener.listen(backlog)
    return listener


def socket_inode(path: Path | str) -> int | None:
    """The inode of the socket file at `path` (None: none there): a server that bound it
    compares it with its own, to know the path is still its socket and not a successor's."""
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def peer_uid(conn: Any) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid;
    native ints). `conn`: a socket.socket or an _socket.socket."""
    import _socket  # _socket: a client's hot path too (exchange says why not socket)

    creds = conn.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def trusted_server(uid: int, path: str | None = None) -> bool:
    """Whether a client may talk to a server run by `uid` listening at `path`: its own user's,
    or root's (the wrapper of a `run_as` job). A socket another user planted in a shared folder
    is not.

    In a `run_as` job's sandbox (a user namespace its user made, where root has no id) root's
    wrapper is seen as the overflow id: trusted only for a socket this user owns, which only
    root can have made in the folder it made for them (runtime/wrapper's AgentIdentity)."""
    if uid in (os.getuid(), 0):
        return True
    if path is None or uid != _overflow_uid():
        return False
    try:
        return os.stat(path).st_uid == os.getuid()
    except OSError:
        return False


def _overflow_uid() -> int:
    """The id the kernel shows for a user with none in this user namespace."""
    try:
        with open("/proc/sys/kernel/overflowuid", "rb") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 65534


def read_request(conn: socket.socket, limit: int = MAX_REQUEST) -> bytes:
    """What a client sent until it shut its side; ValueError past `limit` bytes."""
    chunks, size = [], 0
    while chunk := conn.recv(65536):
        size += len(chunk)
        if size > limit:
            raise ValueError("request too large")
        chunks.append(chunk)
    return b"".join(chunks)


def _unlink(path: Path | str) -> None:
    """Remove a socket file that may be gone already (contextlib.suppress would cost the
    client's import of this module ~2 ms)."""
    try:  # noqa: SIM105 - the docstring says why not contextlib
        os.unlink(path)
    except FileNotFoundError:
        pass


class _Pending:
    """A request being answered, which a retry of it (same id) waits for."""

    def __init__(self) -> None:
        import threading  # the server's (as in PublishServer.__init__)

        self.done = threading.Event()
        self.response: dict[str, Any] = {
            "ok": False,
            "message": "the request failed in the wrapper",
            "exit_code": 70,
        }


class PublishServer:
    """Serves publish requests from a daemon thread, each connection on a thread of its own.

    `ends_when(idle_s)`: for a server that ends by itself (the state dir's publish server),
    asked every `tick_s` with the seconds since the last connection; once it says so, the
    server stops listening (see `_end_listening`) and `wait()` returns when every request taken
    is answered. Without it the server listens until `close()` (the wrapper's)."""

    def __init__(
        self,
        path: Path | str,
        handler: Any,
        *,
        owner: tuple[int, int] | None = None,
        ends_when: Any = None,
        tick_s: float = 1.0,
    ) -> None:
        """`owner` (uid, gid): an agent running as another user; the socket becomes theirs,
        and only they and this process's user may talk to it (checked per connection)."""
        import threading  # threading, OrderedDict: the server's, in the wrapper; a client
        from collections import OrderedDict  # (a fresh `delegate publish`) loads neither

        self.path = path
        self.handler = handler  # (request dict) -> response dict
        self._answers: OrderedDict[str, dict[str, Any]] = OrderedDict()  # request id -> answer
        self._lock = threading.Lock()  # connections are served on threads of their own
        self._pending: dict[str, _Pending] = {}  # request id -> its first, still being answered
        self._peers = {os.getuid(), owner[0]} if owner else {os.getuid()}
        self._sock = listen_private(str(path))
        self._inode = socket_inode(path)
        if owner is not None:
            # in a folder only root may change (runtime/wrapper's AgentIdentity), and never
            # through a link: a link there would have its own owner changed, not its target's
            os.chown(path, *owner, follow_symlinks=False)
        self._ends_when = ends_when
        self._talks: list[threading.Thread] = []
        self.last_active = time.monotonic()
        if ends_when is not None:
            self._sock.settimeout(tick_s)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                idle_s = time.monotonic() - self.last_active
                if not self.owns_path() or self._ends_when(idle_s):
                    self._end_listening()
                    return
                continue
            except OSError:
                return  # closed
            self.last_active = time.monotonic()
            self._talk_on_thread(conn)
            if self._ends_when is not None and self._ends_when(0.0):
                self._end_listening()  # asked to end (a stop, a stale client), or not wanted
                return

    def _talk_on_thread(self, conn: socket.socket) -> None:
        import threading  # the server's (as in __init__)

        # each connection on a thread of its own: a permission request waits minutes for
        # its decision, and the agent's other reports must not wait behind it
        talk = threading.Thread(target=self._talk, args=(conn,), daemon=True)
        self._talks = [*(t for t in self._talks if t.is_alive()), talk]
        talk.start()

    def _end_listening(self) -> None:
        """Stop listening without dropping a request: once the socket's path is gone no client
        can connect (it then publishes by itself), and the connections already queued are
        still taken and answered."""
        if self.owns_path():
            _unlink(self.path)
        # a client that looked the path up just before it went may join the queue a moment
        # later: take connections until none came for a while
        self._sock.settimeout(ENDING_GRACE_S)
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:  # TimeoutError: none came
                break
            conn.settimeout(None)
            self._talk_on_thread(conn)
        self._sock.close()

    def owns_path(self) -> bool:
        """Whether the socket at the path is still this server's (not removed nor replaced)."""
        return socket_inode(self.path) == self._inode

    def wait(self) -> None:
        """Until the server stopped listening by itself and answered what it took."""
        self._thread.join()
        for talk in self._talks:
            talk.join()

    def _talk(self, conn: socket.socket) -> None:
        with conn:
            try:
                if peer_uid(conn) not in self._peers:
                    return  # not the agent's user, nor ours: say nothing
                conn.settimeout(CONNECTION_TIMEOUT_S)
                conn.sendall(json.dumps(self._answer(conn)).encode())
            except OSError:
                return  # the client went away, or stopped talking

    def _answer(self, conn: socket.socket) -> dict[str, Any]:
        try:
            body = read_request(conn)
        except ValueError as exc:
            return {"ok": False, "message": str(exc), "exit_code": 64}
        try:
            request = json.loads(body)
        except (ValueError, RecursionError):  # `[[[...` deep enough stops the parser itself
            return {"ok": False, "message": "malformed request", "exit_code": 64}
        if not isinstance(request, dict):
            return {"ok": False, "message": "malformed request", "exit_code": 64}
        request_id = request.pop("request_id", None)
        if not isinstance(request_id, str):
            response: dict[str, Any] = self.handler(request)
            return response
        return self._answer_once(request_id, request)

    def _answer_once(self, request_id: str, request: dict[str, Any]) -> dict[str, Any]:
        """The handler's answer to `request`, given once per request id: a retry gets the first
        answer (waiting for it while it is being made), never a second event."""
        with self._lock:
            if request_id in self._answers:
                return self._answers[request_id]  # a retry: the first receipt, not a second event
            first = self._pending.get(request_id)
            if first is None:
                self._pending[request_id] = first = _Pending()
                mine = True
            else:
                mine = False
        if not mine:  # a retry while the first is still being answered: its answer, once
            first.done.wait()
            return first.response
        try:
            first.response = self.handler(request)
        finally:
            with self._lock:
                if first.response.get("ok"):
                    self._answers[request_id] = first.response
                    while len(self._answers) > REMEMBERED_ANSWERS:
                        self._answers.popitem(last=False)
                del self._pending[request_id]
            first.done.set()
        return first.response

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            _unlink(self.path)


def through_wrapper(payload: dict[str, Any]) -> bool:
    """Hand `payload` to this pane's wrapper: True when it took it, False when no wrapper
    listens (outside a pane, or the wrapper is gone), so the caller records it itself."""
    path = settings().publish_socket
    if not path:
        return False
    answer = request(path, payload)
    if answer is None:
        return False
    if not answer.get("ok"):
        raise DelegateError(str(answer.get("message", "the wrapper refused")))
    return True


def request(
    path: str, payload: dict[str, Any], *, timeout_s: float = 120.0, attempts: int = ATTEMPTS
) -> dict[str, Any] | None:
    """Send one request; None only when it never left (no wrapper: the caller publishes itself).

    After it was sent, a lost or garbled answer is asked for again with the same request id;
    if the wrapper cannot be reached any more, the answer says so instead of letting the caller
    publish a second time.
    """
    payload = {**payload, "request_id": payload.get("request_id") or os.urandom(12).hex()}
    body = json.dumps(payload).encode()
    sent = False
    for attempt in range(attempts):
        answer, reached = exchange(path, body, timeout_s)
        if answer is not None:
            return answer
        sent = sent or reached
        if not sent:
            return None
        if attempt + 1 < attempts:
            time.sleep(0.05 * (attempt + 1))
    return {
        "ok": False,
        "message": "the server took the request but its answer was lost; not publishing again"
        f" (request {payload['request_id']})",
        "exit_code": 69,
    }


AS_SENDING = -1.0  # exchange's reply timeout: the same as connecting and sending


def exchange(
    path: str, body: bytes, timeout_s: float, reply_timeout_s: float | None = AS_SENDING
) -> tuple[dict[str, Any] | None, bool]:
    """Send `body` to the server at `path`, then read its JSON answer: (answer, whether the
    request reached the server). `reply_timeout_s`: how long the answer may take once sent
    (AS_SENDING: `timeout_s`, as connecting and sending; None: no limit). `_socket`, not
    `socket`: the publish client is a fresh process on the agent's hot path, and `socket` pulls
    in enum and selectors."""
    import _socket  # _socket: only when a request is sent (the docstring says why not socket)

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        try:
            sock.connect(path)
            if not trusted_server(peer_uid(sock), path):
                return None, False  # nothing was sent to it
        except OSError:
            return None, False
        chunks = []
        try:
            sock.sendall(body)
            sock.shutdown(_socket.SHUT_WR)
            if reply_timeout_s != AS_SENDING:
                sock.settimeout(reply_timeout_s)
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            return None, True
    finally:
        sock.close()
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        return None, True
    return (answer, True) if isinstance(answer, dict) else (None, True)
