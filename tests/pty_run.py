"""Run a command at a real terminal (a pseudo-terminal of a given size), as a person would."""

from __future__ import annotations

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple


class PtyResult(NamedTuple):
    returncode: int
    output: str  # what the terminal showed (stdout, and stderr unless kept apart)
    stderr: str  # stderr when kept apart (`separate_stderr`), else ""


def run_in_pty(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    columns: int = 80,
    rows: int = 24,
    timeout: float = 60.0,
    separate_stderr: bool = False,
    on_output: Callable[[str, subprocess.Popen[bytes]], bool] | None = None,
    stdin_data: bytes | None = None,
    type_keys: Callable[[str], bytes | None] | None = None,
) -> PtyResult:
    """Run `argv` with stdout (and stdin, and stderr unless `separate_stderr`) on a new pty of
    `columns` x `rows`. `on_output(text_so_far, process)` is called as output arrives; it may
    act on the process (send SIGINT) and returns True once it has done what it wanted.
    `type_keys(text_so_far)` is called likewise; the bytes it returns are typed at the terminal
    (as keys a person presses). The terminal's CR LF line ends come back as LF."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {**env, "COLUMNS": str(columns), "LINES": str(rows), "TERM": "xterm-256color"}
    stdin = subprocess.PIPE if stdin_data is not None else slave
    process = subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=slave,
        stderr=subprocess.PIPE if separate_stderr else slave,
        env=full_env,
        start_new_session=True,
        close_fds=True,
    )
    os.close(slave)
    if stdin_data is not None and process.stdin is not None:
        process.stdin.write(stdin_data)
        process.stdin.close()
    chunks: list[bytes] = []
    handled = on_output is None
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                raise AssertionError(f"{argv[:4]} did not end within {timeout} s: {chunks!r}")
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the last writer closed the terminal
                    data = b""
                if not data:
                    break
                chunks.append(data)
            if not handled and on_output is not None:
                handled = on_output(b"".join(chunks).decode("utf-8", "replace"), process)
            if ready and type_keys is not None:
                keys = type_keys(b"".join(chunks).decode("utf-8", "replace"))
                if keys:
                    os.write(master, keys)
            if not ready and process.poll() is not None:
                # drain what is left, then stop
                while select.select([master], [], [], 0.05)[0]:
                    try:
                        data = os.read(master, 65536)
                    except OSError:
                        data = b""
                    if not data:
                        break
                    chunks.append(data)
                break
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    err = process.stderr.read().decode("utf-8", "replace") if process.stderr else ""
    text = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return PtyResult(code, text, err)
