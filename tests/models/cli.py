"""Running the bare real CLIs (installed by `make agents` into .cache/agents) against a scripted
server: a fresh HOME, a minimal environment (nothing of this machine's credentials), stdin
closed, JSON lines parsed."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .anthropic import claude_env
from .openai import write_codex_config
from .script import ScriptedServer

AGENT_BIN = Path(__file__).resolve().parents[2] / ".cache" / "agents" / "node_modules" / ".bin"
CLAUDE = AGENT_BIN / "claude"
CODEX = AGENT_BIN / "codex"


@dataclass
class Run:
    """One finished CLI run: its exit status, output, JSON lines and wall time (seconds)."""

    returncode: int
    stdout: str
    stderr: str
    wall: float
    lines: list[dict[str, Any]] = field(default_factory=list)

    def of_type(self, kind: str, subtype: str | None = None) -> list[dict[str, Any]]:
        return [
            line
            for line in self.lines
            if line.get("type") == kind and (subtype is None or line.get("subtype") == subtype)
        ]

    @property
    def result(self) -> dict[str, Any]:
        """Claude's closing `result` line."""
        found = self.of_type("result")
        assert found, f"no result line:\n{self.stdout}\n{self.stderr}"
        return found[-1]


def base_env(home: Path) -> dict[str, str]:
    """PATH (the tools a CLI runs need it), a fresh HOME, UTC; nothing else of this process."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TZ": "UTC"}


def run(argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: float = 60) -> Run:
    assert Path(argv[0]).exists(), f"{argv[0]} is missing: `make agents` installs it"
    started = time.monotonic()
    done = subprocess.run(
        list(argv),
        env=dict(env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    lines = []
    for raw in done.stdout.splitlines():
        try:
            parsed = json.loads(raw)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started, lines)


def run_claude(
    server: ScriptedServer | str,
    tmp: Path,
    prompt: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    **claude_options: Any,
) -> Run:
    """`claude -p --output-format stream-json --verbose ARGS PROMPT` in `tmp`/work with HOME
    `tmp`/home (kept across calls with the same `tmp`: `--resume` finds its session there).
    Give a flag taking values as one word (`--allowedTools=Bash`): the variadic form would
    swallow the prompt. `claude_options` go to `claude_env`."""
    home, work = tmp / "home", tmp / "work"
    work.mkdir(parents=True, exist_ok=True)
    full = {**base_env(home), **claude_env(server, home, **claude_options), **(env or {})}
    argv = [str(CLAUDE), "-p", "--output-format", "stream-json", "--verbose", *args, prompt]
    return run(argv, full, work)


def run_codex(
    server: ScriptedServer | str,
    tmp: Path,
    prompt: str,
    *args: str,
    env: Mapping[str, str] | None = None,
    resume: str | None = None,
    **config_options: Any,
) -> Run:
    """`codex exec --json --skip-git-repo-check --strict-config ARGS [resume ID] PROMPT` in
    `tmp`/work with HOME `tmp`/home and CODEX_HOME `tmp`/home/.codex (its config written by
    `write_codex_config(**config_options)`)."""
    home, work = tmp / "home", tmp / "work"
    work.mkdir(parents=True, exist_ok=True)
    config = write_codex_config(home / ".codex", server, **config_options)
    full = {**base_env(home), **config, **(env or {})}
    head = [str(CODEX), "exec", "--json", "--skip-git-repo-check", "--strict-config", *args]
    tail = ["resume", resume, prompt] if resume else [prompt]
    return run([*head, *tail], full, work)
