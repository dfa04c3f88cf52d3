"""Shared test helpers: running the real CLI, waiting with a deadline instead of sleeping."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def retry_until(check: Callable[[], T], *, timeout: float = 10.0, interval: float = 0.01) -> T:
    """Call `check` until it returns something truthy; fail the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def cli_env(home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELEGATE_")}
    env["DELEGATE_HOME"] = str(home)
    env.update(extra or {})
    return env


def delegate_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "delegate", *args]


def run_cli(
    home: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    input: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        delegate_cmd(*args),
        env=cli_env(home, env),
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
    )


def popen_cli(
    home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        delegate_cmd(*args),
        env=cli_env(home, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> None:
    """Bad input: non-zero exit, exactly one line on stderr, no traceback."""
    assert result.returncode != 0, result
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("delegate: "), lines


def refused_submit(
    home: Path, env: Mapping[str, str], *flags: str
) -> subprocess.CompletedProcess[str]:
    """A `submit -a shell -p true --no-wait` with `flags` that must be refused as bad input
    (exit 64, one line) and record nothing; its result, for what the line says."""
    refused = run_cli(home, "submit", "-a", "shell", "-p", "true", "--no-wait", *flags, env=env)
    assert refused.returncode == 64, refused.stderr
    assert_one_line_error(refused)
    assert not (home / "jobs").is_dir() or not list((home / "jobs").glob("*.json"))
    return refused


def submit_shell(
    home: Path,
    env: Mapping[str, str],
    workdir: Path,
    prompt: str,
    *args: str,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`delegate submit --agent shell` of `prompt` (a bash script) in `workdir`, with flags.

    Waits for the outcome unless `args` say `--no-wait` (tests run without a terminal, where
    submit would return at once).
    """
    return run_cli(
        home,
        "submit",
        *with_wait(args),
        "--agent",
        "shell",
        "--workdir",
        str(workdir),
        "--prompt",
        prompt,
        *args,
        env=env,
        timeout=timeout,
    )


def with_wait(args: tuple[str, ...]) -> tuple[str, ...]:
    """`--wait`, unless `args` choose for themselves."""
    return () if {"--wait", "--no-wait"} & set(args) else ("--wait",)


def read_pids(path: Path) -> list[int]:
    """The pids a test agent wrote, one per line (none yet while it starts)."""
    try:
        return [int(x) for x in path.read_text().split()]
    except (FileNotFoundError, ValueError):
        return []


PWNED_PROMPT_B64 = "ZWNobyBwd25lZCA+IHB3bmVkLnR4dAo="  # echo pwned > pwned.txt


def signed_assignment(
    key: bytes, host: str, request_id: str, workdir: Path, *, issued_ms: int | None = None
) -> bytes:
    """An assignment of job 0badf00d (a shell agent writing pwned.txt) signed with `key`."""
    from delegate.core import hostproto

    job = {
        "job_id": "0badf00d",
        "agent": "shell",
        "cmd": None,
        "prompt_b64": PWNED_PROMPT_B64,
        "workdir": str(workdir),
        "session": None,
        "wall_timeout_s": None,
        "idle_timeout_s": 60,
    }
    issued = int(time.time() * 1000) if issued_ms is None else issued_ms
    return hostproto.sign(
        key, hostproto.assignment(host=host, request_id=request_id, issued_ms=issued, job=job)
    )
