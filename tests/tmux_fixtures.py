"""A private tmux server per test (its own socket), killed afterwards, with a pinned shell."""

from __future__ import annotations

import os
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
def tmux_env(tmux_socket: str, tmp_path: Path) -> dict[str, str]:
    """Environment for CLI runs: isolated tmux, and a pane shell/home that behave the same
    everywhere (as tmuxp's tests pin them)."""
    fake_home = tmp_path / "userhome"
    fake_home.mkdir()
    return {
        "DELEGATE_TMUX_SOCKET": tmux_socket,
        "HOME": str(fake_home),
        "SHELL": "/bin/sh",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    }
