"""A private tmux server per test (its own socket), killed afterwards, with a pinned shell."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmux_socket() -> Iterator[str]:
    name = f"dlgtest-{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["tmux", "-L", name, "kill-server"], capture_output=True)


@pytest.fixture
def tmux_env(tmux_socket: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for CLI runs: isolated tmux, and a pane shell/home that behave the same
    everywhere (as tmuxp's tests pin them).

    Afterwards every process this test's toolkit started (supervisors, wrappers, agents: all
    carry the test's own DELEGATE_HOME) is killed before the tmux server, so no supervisor is
    left to launch a queued job onto a fresh server after the test.
    """
    fake_home = tmp_path / "userhome"
    fake_home.mkdir()
    yield {
        "DELEGATE_TMUX_SOCKET": tmux_socket,
        "HOME": str(fake_home),
        "SHELL": "/bin/sh",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
    kill_processes_of(tmp_path / "state")


def kill_processes_of(home: Path) -> None:
    """SIGKILL every process whose environment names `home` as its DELEGATE_HOME."""
    marker = f"DELEGATE_HOME={home}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
