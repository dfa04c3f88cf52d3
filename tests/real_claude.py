"""Running the real Claude Code through `delegate` against a scripted server (tests/models):
the built-in claude profile pointed at the server in delegate.toml, as a person points it at a
gateway, and the environment a submit needs (the CLIs on PATH, the key to pass on)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from .models import AnthropicServer, claude_env
from .models.cli import AGENT_BIN

API_KEY = "sk-ant-scripted-0123456789"
VENV_BIN = str(Path(sys.executable).parent)


def claude_profile(
    home: Path, server: AnthropicServer | str, extra: str = "", profile: str = "", **options: Any
) -> None:
    """delegate.toml: the built-in claude profile pointed at `server` (the key comes from the
    environment through its `pass_env`), with `profile` lines in its table and `extra` tables
    after it. `options` go to `claude_env` (max_retries, ...)."""
    env = {k: v for k, v in claude_env(server, **options).items() if v and "KEY" not in k}
    env.pop("CLAUDE_CODE_OAUTH_TOKEN", None)
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in sorted(env.items()))
    home.mkdir(parents=True, exist_ok=True)
    config = f"[profiles.claude]\nenv = {{ {pairs} }}\n{profile}\n{extra}"
    (home / "delegate.toml").write_text(config)


def claude_job_env(tmux_env: dict[str, str], **more: str) -> dict[str, str]:
    """What `delegate submit` runs with: the venv's and the agents' bin first, the key."""
    path = f"{VENV_BIN}:{AGENT_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    return {**tmux_env, "PATH": path, "ANTHROPIC_API_KEY": API_KEY, **more}
