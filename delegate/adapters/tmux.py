"""The only module that talks to tmux: one `tmux -S SOCKET ...` process per call.

Sessions made by the toolkit carry the session option `@delegate_job`, so one `list-panes -a`
query finds every pane that belongs to us. Commands are passed to tmux as an argument vector,
which tmux executes directly: no shell ever sees them.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from delegate.adapters.procfs import processes_with_environ
from delegate.config.settings import DEFAULT_TMUX_TMPDIR, TMUX_SOCKET_ENV, TMUX_TMPDIR_ENV, settings
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import Pane, TmuxView

OWNER_OPTION = "@delegate_job"
_SESSION_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_FIELDS = (
    "session_name",
    "pane_id",
    "pane_pid",
    "pane_dead",
    "pane_dead_status",
    "pane_dead_signal",
    OWNER_OPTION,
    "session_created",
)
# What tmux says when no server listens on the socket (never started, killed, or rebooted away).
_NO_SERVER = ("no server running", "No such file or directory", "Connection refused")
# What a server that is still up but has no session left says (it exits a moment later).
_NO_SESSIONS = ("no current target", "no sessions")
_SEP = "\x1f"  # unit separator: cannot appear in a session name we allow
# How long one tmux call may take: a server that is stopped or hung never answers.
TMUX_TIMEOUT_S = 10.0
# How long a tmux server asked to make its socket again (SIGUSR1) is given to do it.
_RECREATE_WAIT_S = 1.0


class TmuxResult(NamedTuple):
    """What one tmux call printed, split into lines (stdout without its trailing empty lines,
    stderr without empty lines), and its exit status."""

    returncode: int
    stdout: list[str]
    stderr: list[str]


def run_tmux(socket_path: str, *args: str) -> TmuxResult:
    """Run `tmux -S socket_path ARGS...` (an argument vector, never a shell).

    Raises FileNotFoundError when there is no tmux binary on PATH, TimeoutError when tmux did
    not answer within TMUX_TIMEOUT_S (a stopped or hung server)."""
    code, out, err = run_captured(["tmux", f"-S{socket_path}", *args], TMUX_TIMEOUT_S)
    stdout = out.decode("utf-8", "backslashreplace").split("\n")
    while stdout and stdout[-1] == "":
        stdout.pop()
    stderr = [line for line in err.decode("utf-8", "backslashreplace").split("\n") if line]
    return TmuxResult(code, stdout, stderr)


def run_captured(argv: list[str], timeout_s: float) -> tuple[int, bytes, bytes]:
    """Run `argv` (found on PATH) with stdin from /dev/null and both outputs captured: what
    `subprocess.run` does, without importing `subprocess` (with threading and selectors it
    costs `ps --json` ~8 ms). The exit status is negative for a signal, as subprocess gives it.

    Raises FileNotFoundError when `argv[0]` is not on PATH, TimeoutError once `timeout_s` has
    passed (the process is then killed and reaped)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, out_w, 1),
        (os.POSIX_SPAWN_DUP2, err_w, 2),
    ]
    try:
        pid = os.posix_spawnp(argv[0], argv, settings().env, file_actions=actions)
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    try:
        out, err = _read_both(out_r, err_r, time.monotonic() + timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), out, err


def _read_both(out_fd: int, err_fd: int, deadline: float) -> tuple[bytes, bytes]:
    """Everything written to both pipes until both close; TimeoutError at `deadline`. Closes
    both."""
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    open_fds = set(chunks)
    try:
        while open_fds:
            left_ms = (deadline - time.monotonic()) * 1000
            if left_ms <= 0:
                raise TimeoutError
            for fd, _ in poller.poll(left_ms):
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    poller.unregister(fd)
                    open_fds.discard(fd)
    finally:
        os.close(out_fd)
        os.close(err_fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


class TmuxError(DelegateError):
    exit_code = 69


class TmuxUnreachable(TmuxError):
    """tmux could not be asked at all (binary missing, permission denied): no verdict."""

    def __init__(self, socket: str, reason: str) -> None:
        self.socket = socket
        self.reason = reason
        super().__init__(f"tmux on {socket} could not be asked: {reason}")


def socket_path_for(socket: str | None, env: Mapping[str, str] | None = None) -> str:
    """The absolute path of a tmux socket given as a path, a `-L` name, or None (default).

    Records keep the path, so a monitor started with another environment asks the same server.
    """
    if socket and "/" in socket:
        return os.path.abspath(socket)
    env = settings().env if env is None else env
    base = env.get(TMUX_TMPDIR_ENV) or DEFAULT_TMUX_TMPDIR
    return os.path.join(base, f"tmux-{os.getuid()}", socket or "default")


# A unix socket's path must fit sockaddr_un.sun_path (108 bytes with its terminating NUL).
_MAX_SOCKET_PATH = 107


class SocketFolderUnsafe(TmuxError):
    """The folder tmux keeps its socket in belongs to someone else or is open to others."""

    def __init__(self, folder: str, problem: str) -> None:
        self.folder = folder
        self.problem = problem
        super().__init__(f"tmux socket folder {folder} {problem}")


def prepare_socket_folder(socket_path: str, *, private: bool) -> None:
    """Create the folder of `socket_path` as tmux itself does for `-L` (mode 0700), which it
    does not do when given `-S` as we always give it. A `private` folder (the `tmux-UID` one
    under TMUX_TMPDIR) must be the user's own and closed to others, as tmux demands of it;
    a folder of a socket path the user named is only created when missing.

    Raises SocketFolderUnsafe or TmuxError with one line saying what is wrong.
    """
    if len(socket_path.encode()) > _MAX_SOCKET_PATH:
        raise TmuxError(
            f"tmux socket path {socket_path} is too long ({len(socket_path.encode())} bytes,"
            f" at most {_MAX_SOCKET_PATH}): set a shorter TMUX_TMPDIR or DELEGATE_TMUX_SOCKET"
        )
    folder = os.path.dirname(socket_path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise TmuxError(f"cannot create tmux socket folder {folder}: {exc.strerror}") from None
    if not private:
        return
    problem = socket_folder_problem(folder, info)
    if problem:
        raise SocketFolderUnsafe(folder, problem)


def socket_folder_problem(folder: str, info: os.stat_result | None = None) -> str | None:
    """Why tmux would refuse `folder` for its sockets (not ours, open to others), or None."""
    info = info or os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.getuid():
        return f"belongs to uid {info.st_uid}, not to you (uid {os.getuid()})"
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o007:
        return f"is open to others (mode {mode:o}): chmod 700 it"
    return None


def validate_session_name(name: str) -> str:
    if not 1 <= len(name) <= 64 or not _SESSION_NAME_CHARS.issuperset(name):
        raise UsageError(f"invalid session name {name!r}: use 1-64 letters, digits, '-' or '_'")
    return name


class Tmux:
    """A tmux server on one socket: a path, a `-L` name, or the default server (None).

    Every command names the socket by its absolute path (`socket_path`), which is what job
    records keep.
    """

    def __init__(self, socket: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.socket_path = socket_path_for(socket, env)
        # A `-L` name (or the default) lives in tmux's own per-user folder, which tmux vets.
        self._private_folder = not (socket and "/" in socket)

    def prepare(self) -> None:
        """Make sure a server can be started on this socket: its folder exists (made as tmux
        makes it) and is safe. Raises TmuxError naming what is wrong."""
        prepare_socket_folder(self.socket_path, private=self._private_folder)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Tmux:
        env = settings().env if env is None else env
        return cls(env.get(TMUX_SOCKET_ENV) or None, env)

    def _cmd(self, *args: str) -> TmuxResult:
        """One tmux call; a missing tmux binary becomes a TmuxUnreachable."""
        try:
            return run_tmux(self.socket_path, *args)
        except OSError:
            raise TmuxUnreachable(self.socket_path, "the tmux binary was not found") from None
        except TimeoutError:
            why = f"tmux did not answer within {TMUX_TIMEOUT_S:g} s"
            raise TmuxUnreachable(self.socket_path, why) from None

    def _run(self, *args: str) -> list[str]:
        result = self._cmd(*args)
        if result.returncode != 0:
            message = " ".join(result.stderr).strip() or f"tmux {args[0]} failed"
            raise TmuxError(f"tmux: {message}")
        return list(result.stdout)

    def _run_for_output(self, what: str, *args: str) -> str:
        """The last line a tmux call printed; tmux's own stderr in the error when it printed
        none (tmux may fail, say to create its socket, and still exit 0)."""
        result = self._cmd(*args)
        out = [line for line in result.stdout if line.strip()]
        if result.returncode == 0 and out:
            return str(out[-1])
        message = " ".join(result.stderr).strip() or f"exit status {result.returncode}"
        raise TmuxError(f"tmux could not {what}: {message}")

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        workdir: Path,
        env: Mapping[str, str],
        job_id: str,
    ) -> int:
        """Start session `name` running `argv` in `workdir`; return the pane's pid.

        The pane stays after its process exits (remain-on-exit), so its exit status can be read.
        """
        validate_session_name(name)
        self.prepare()
        args = ["new-session", "-d", "-s", name, "-c", str(workdir), "-x", "200", "-y", "50"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += ["-P", "-F", "#{pane_pid}", *argv]
        # Chained in one tmux call so the options are set before the process can exit.
        args += [";", "set-option", "-w", "-t", name, "remain-on-exit", "on"]
        args += [";", "set-option", "-t", name, OWNER_OPTION, job_id]
        out = self._run_for_output(f"start session {name}", *args)
        try:
            return int(out)
        except ValueError:
            raise TmuxError(f"tmux did not report the pane of session {name}: {out}") from None

    def respawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        workdir: Path,
        env: Mapping[str, str],
        job_id: str,
    ) -> int:
        """Run `argv` in session `name`'s pane again (the session, its id and its window stay);
        return the new pane pid. A process still in the pane is killed by tmux (-k)."""
        validate_session_name(name)
        target = f"={name}:"
        args = ["respawn-pane", "-k", "-t", target, "-c", str(workdir)]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        args += [*argv]
        args += [";", "set-option", "-t", name, OWNER_OPTION, job_id]
        args += [";", "display-message", "-p", "-t", target, "#{pane_pid}"]
        out = self._run_for_output(f"respawn the pane of session {name}", *args)
        try:
            return int(out)
        except ValueError:
            raise TmuxError(f"tmux did not report the respawned pane of {name}: {out}") from None

    def has_session(self, name: str) -> bool:
        return any(p.session == name for p in self.panes(owned_only=False))

    def view(self) -> TmuxView:
        """Every pane on this server from one `list-panes -a` query, or why there are none.

        Never raises for an absent server ("gone") or an unaskable tmux ("unreachable").
        """
        fmt = _SEP.join(f"#{{{f}}}" for f in _FIELDS)
        try:
            result = self._cmd("list-panes", "-a", "-F", fmt)
        except TmuxUnreachable as exc:
            return TmuxView(self.socket_path, "unreachable", reason=exc.reason)
        if result.returncode != 0:
            text = " ".join(result.stderr).strip()
            if any(marker in text for marker in _NO_SERVER):
                return self._no_answer(text, fmt)
            if any(marker in text for marker in _NO_SESSIONS):
                return TmuxView(self.socket_path, "ok")  # a server whose last session just ended
            return TmuxView(self.socket_path, "unreachable", reason=text or "list-panes failed")
        return TmuxView(self.socket_path, "ok", _parse_panes(result.stdout))

    def _no_answer(self, text: str, fmt: str) -> TmuxView:
        """No server answered on the socket: "gone" only when no tmux server still listens on
        that path. A live one whose socket file was moved aside or deleted (a /tmp cleaner) is
        asked to make it again (SIGUSR1, to that pid only) and asked once more; one whose file
        is there is starting (another process's first job) and is only asked again. If it
        still does not answer, it is "unreachable": alive, but not seen."""
        server = listening_server(self.socket_path)
        if server is None:
            return TmuxView(self.socket_path, "gone", reason=text)
        note = ""
        if not os.path.exists(self.socket_path):  # else a server starting: bound, not yet asked
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(server, signal.SIGUSR1)
            note = f"its socket was made again (SIGUSR1 to tmux server pid {server})"
        deadline = time.monotonic() + _RECREATE_WAIT_S
        while True:
            try:
                result = self._cmd("list-panes", "-a", "-F", fmt)
            except TmuxUnreachable as exc:
                return TmuxView(self.socket_path, "unreachable", reason=exc.reason)
            if result.returncode == 0:
                return TmuxView(self.socket_path, "ok", _parse_panes(result.stdout), reason=note)
            if any(m in " ".join(result.stderr) for m in _NO_SESSIONS):
                return TmuxView(self.socket_path, "ok")
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return TmuxView(
            self.socket_path,
            "unreachable",
            reason=f"{text}; tmux server pid {server} still runs but does not answer",
        )

    def panes(self, *, owned_only: bool = True) -> list[Pane]:
        """Every pane on the server (ours only by default); none when no server runs.

        Raises TmuxUnreachable when tmux cannot be asked, so no one mistakes that for "gone".
        """
        seen = self.view()
        if seen.status == "unreachable":
            raise TmuxUnreachable(self.socket_path, seen.reason)
        return [p for p in seen.panes if p.job_id or not owned_only]

    def capture(self, name: str, *, lines: int | None = 200) -> str:
        """What the pane shows and the last `lines` of its history (None: all of it)."""
        start = "-" if lines is None else f"-{lines}"
        out = self._run("capture-pane", "-p", "-J", "-t", f"{name}:", "-S", start)
        return "\n".join(out)

    def send_key_names(self, name: str, keys: Sequence[str]) -> None:
        """tmux key names (`Enter`, `C-c`, `Up`) as keys, for `send --keys`."""
        if keys:
            self._run("send-keys", "-t", f"{name}:", *keys)

    def send_keys(self, name: str, text: str, *, enter: bool = True) -> None:
        # -l: literal text, so words like "Enter" or "C-c" inside `text` are not keys; `--`:
        # text that starts with `-` (`-N3`) is text, not an option of send-keys.
        self._run("send-keys", "-t", f"{name}:", "-l", "--", text)
        if enter:
            self._run("send-keys", "-t", f"{name}:", "Enter")

    def kill(self, name: str, *, job_id: str | None = None, grace_s: float = 2.0) -> list[int]:
        """Kill session `name` and every process of its job; return the pids signalled.

        Live panes' process groups get SIGTERM, then SIGKILL after `grace_s`; their descendants
        that left the group (setsid) are found through /proc, and so are the processes that
        carry `DELEGATE_JOB_ID=job_id` (an agent whose wrapper died was reparented away from
        the pane). A dead pane's pid is never signalled: tmux keeps it, but the number may
        already belong to an unrelated process.
        """
        pids = [
            p.pid
            for p in self.panes(owned_only=False)
            if p.session == name and p.pid > 0 and not p.dead
        ]
        victims = set()
        for pid in pids:
            victims.add(pid)
            victims.update(descendants(pid))
        if job_id is not None:
            victims.update(processes_of_job(job_id))
        victims.discard(os.getpid())
        terminate(pids, victims, grace_s=grace_s)
        result = self._cmd("kill-session", "-t", f"={name}")
        if result.returncode != 0 and self.has_session(name):
            raise TmuxError(f"tmux: could not kill session {name}: {' '.join(result.stderr)}")
        return sorted(victims)

    def kill_server(self) -> None:
        self._cmd("kill-server")


def _parse_panes(lines: Sequence[str]) -> tuple[Pane, ...]:
    """The panes of one `list-panes -a -F` answer in `_FIELDS`' format."""
    panes = []
    for line in lines:
        parts = line.split(_SEP)
        if len(parts) != len(_FIELDS):
            continue
        session, pane_id, pid, dead, status, signo, job_id, _created = parts
        panes.append(
            Pane(
                session=session,
                pane_id=pane_id,
                pid=int(pid) if pid.isdigit() else 0,
                dead=dead == "1",
                exit_status=int(status) if status.lstrip("-").isdigit() else None,
                job_id=job_id,
                exit_signal=int(signo) if signo.isdigit() and signo != "0" else None,
            )
        )
    return tuple(panes)


def _listening_inodes(socket_path: str) -> set[str]:
    """Inodes of the unix sockets listening at `socket_path` (Linux /proc/net/unix).

    The kernel keeps the path a socket was bound to, so a server whose socket file was moved
    aside or deleted is still found by it."""
    found = set()
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as handle:
            next(handle, None)  # the header
            for line in handle:
                fields = line.split(None, 7)
                # Flags 00010000: __SO_ACCEPTCON, a listening socket
                listening = len(fields) == 8 and int(fields[3], 16) & 0x10000
                if listening and fields[7].rstrip("\n") == socket_path:
                    found.add(fields[6])
    except OSError:
        return set()
    return found


def listening_server(socket_path: str) -> int | None:
    """The pid of the tmux server still listening on a socket bound at `socket_path` (its
    file there or not), or None: no such server runs (or it belongs to another user)."""
    inodes = _listening_inodes(socket_path)
    if not inodes:
        return None
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/comm", encoding="utf-8", errors="replace") as handle:
                if not handle.read().startswith("tmux"):
                    continue
            fds = os.listdir(f"/proc/{entry.name}/fd")
            if any(os.readlink(f"/proc/{entry.name}/fd/{fd}") in wanted for fd in fds):
                return int(entry.name)
        except OSError:
            continue
    return None


def job_process_alive(pid: int, job_id: str) -> bool:
    """True while `pid` runs and carries `DELEGATE_JOB_ID=job_id` (so a reused pid is not
    taken for the job's pane process)."""
    if pid <= 0 or not alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return f"DELEGATE_JOB_ID={job_id}".encode() in environ.split(b"\0")


def processes_of_job(job_id: str) -> set[int]:
    """Pids whose environment says `DELEGATE_JOB_ID=job_id` (Linux /proc, same user or root).

    Read at kill time, so a reused pid shows its new owner's environment, not this job's.
    """
    return processes_with_environ(f"DELEGATE_JOB_ID={job_id}")


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when gone.

    The command name may hold spaces or parentheses; fields resume after the last ')'.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            line = handle.read().decode("utf-8", "replace")
    except OSError:
        return None
    return line[line.rfind(")") + 2 :].split()


def zombie_exit(pid: int) -> tuple[int | None, int | None] | None:
    """(exit status, signal) of `pid` while it is a zombie nobody has reaped yet, from
    /proc/PID/stat's exit_code field; None when it is running or gone. A zombie's pid cannot
    be reused, so this is still the process tmux lists."""
    fields = _stat_fields(pid)
    if not fields or fields[0] != "Z" or len(fields) < 50:
        return None
    code = int(fields[-1])
    if code & 0x7F:
        return None, code & 0x7F
    return (code >> 8) & 0xFF, None


def settle(pane: Pane) -> Pane:
    """A pane of ours as it really is: tmux 3.3 now and then leaves a finished pane's process
    unreaped, and then shows the pane alive, or dead without how it ended. A zombie pid cannot
    be reused, so /proc still tells of that very process: dead, with its status or signal."""
    if not pane.job_id or pane.exit_status is not None or pane.exit_signal:
        return pane
    ended = zombie_exit(pane.pid) if pane.pid > 0 else None
    if ended is None:
        return pane
    return pane._replace(dead=True, exit_status=ended[0], exit_signal=ended[1])


def process_start(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), which tells two uses of one pid apart."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def descendants(root: int) -> set[int]:
    """All processes below `root`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting to be reaped counts as gone)."""
    fields = _stat_fields(pid)
    return fields is not None and bool(fields) and fields[0] not in ("Z", "X")


def terminate(group_leaders: Sequence[int], victims: set[int], *, grace_s: float) -> None:
    def signal_all(sig: int) -> None:
        for leader in group_leaders:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(leader, sig)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    signal_all(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(alive(pid) for pid in victims) and time.monotonic() < deadline:
        time.sleep(0.01)
    if any(alive(pid) for pid in victims):
        signal_all(signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        while any(alive(pid) for pid in victims) and time.monotonic() < deadline:
            time.sleep(0.01)


def version() -> str:
    """What `tmux -V` prints (`tmux 3.3a`); TmuxUnreachable when tmux cannot be run."""
    try:
        code, out, err = run_captured(["tmux", "-V"], 10.0)
    except (OSError, TimeoutError) as exc:
        raise TmuxUnreachable("-", f"tmux -V failed: {exc or 'no answer in 10 s'}") from None
    if code != 0:
        raise TmuxUnreachable("-", err.decode(errors="replace").strip() or f"tmux -V exited {code}")
    return out.decode(errors="replace").strip()


def round_trip() -> None:
    """Start a tmux server on a private socket in a new folder, create and kill a session,
    stop the server: what every launch needs. Raises TmuxError with tmux's own message."""
    import tempfile  # tempfile: `doctor`'s; `ps --json` loads this module without it

    folder = tempfile.mkdtemp(prefix="dlg-doctor-")
    server = Tmux(os.path.join(folder, "sock", "doctor"))
    try:
        server.start("doctor", ["sleep", "30"], workdir=Path(folder), env={}, job_id="")
        if not server.has_session("doctor"):
            raise TmuxError("tmux started a session but does not list it")
        server.kill("doctor", grace_s=1.0)
    finally:
        with contextlib.suppress(Exception):
            server.kill_server()
        import shutil  # shutil imports zlib, bz2 and lzma: 3 ms every tmux user would pay

        shutil.rmtree(folder, ignore_errors=True)
