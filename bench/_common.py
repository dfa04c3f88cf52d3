"""Helpers shared by the benchmark scripts (each prints one JSON object on stdout)."""

from __future__ import annotations

import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def precompile() -> None:
    """PYTHONDONTWRITEBYTECODE may be set; write bytecode once so start-up is what users get."""
    compileall.compile_dir(str(ROOT / "delegate"), quiet=1)


def delegate_exe() -> str:
    exe = shutil.which("delegate") or str(Path(sys.executable).parent / "delegate")
    return exe


@contextmanager
def temp_home() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="delegate-bench-") as tmp:
        yield Path(tmp) / "state"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "min_ms": round(min(ms), 2),
        "p50_ms": round(statistics.median(ms), 2),
        "p90_ms": round(percentile(ms, 90), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2),
    }


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result, indent=2))


def bench_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment for a run on its own state dir, on the default bus unless given."""
    env = {k: v for k, v in os.environ.items() if k != "DELEGATE_BUS"}
    env["DELEGATE_HOME"] = str(home)
    env.update(extra)
    return env


def started_job(env: dict[str, str]) -> str:
    """Register a job and publish its `started`, so later publishes are plain progress."""
    exe = delegate_exe()
    job_id = subprocess.run(
        [exe, "register"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        [exe, "publish", "--job", job_id, "--event", "started"],
        env=env,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return job_id


@contextmanager
def private_tmux() -> Iterator[str]:
    """A tmux socket name of our own; its server is killed afterwards."""
    socket = f"dlgbench-{uuid.uuid4().hex[:8]}"
    try:
        yield socket
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
