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
from collections.abc import Callable, Iterator, Sequence
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


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall time of one run of `cmd` (its output discarded; it must succeed)."""
    import time

    started = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def interleaved_with_bare(
    n: int, env: dict[str, str], run: Callable[[int], float]
) -> tuple[list[float], list[float]]:
    """`n` runs of `run(i)` (seconds each), each after a bare `python -c pass`, interleaved so
    both see the same machine load; returns (bare, runs)."""
    bare, runs = [], []
    for i in range(n):
        bare.append(timed([sys.executable, "-c", "pass"], env))
        runs.append(run(i))
    return bare, runs


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


def write_finished_history(home: Path, count: int) -> None:
    """`count` finished jobs, written straight to disk as the registry would have left them
    (record, finished.log line, a terminated session row): a read benchmark's history, built in
    seconds instead of the registry's fsync-per-change minutes."""
    import sqlite3

    from delegate.adapters.sessions_db import SessionInventory
    from delegate.core.model import Job, JobState
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home)})
    jobs_dir = state.layout.jobs
    SessionInventory(state.layout.sessions_db)  # creates the schema
    stamp = "2026-01-01T00:00:00.000000Z"
    lines = []
    rows = []
    for n in range(count):
        job_id = f"{0xF0000000 + n:08x}"
        job = Job(
            job_id=job_id,
            status=JobState.COMPLETED,
            created_at=stamp,
            updated_at=stamp,
            auth_token="x" * 43,
            agent="shell",
            session=f"dlg-{job_id}",
            started_at=stamp,
            last_event_at=stamp,
        )
        (jobs_dir / f"{job_id}.json").write_text(json.dumps(job.to_dict(), sort_keys=True))
        lines.append(job_id)
        rows.append((f"dlg-{job_id}", "terminated", job_id, "shell", "/w", None, stamp, stamp))
    with (jobs_dir / "finished.log").open("a") as handle:
        handle.write("\n".join(lines) + "\n")
    conn = sqlite3.connect(state.layout.sessions_db)
    with conn:
        conn.executemany(
            "INSERT INTO sessions (name, state, job_id, agent, workdir, pane_pid, created_at,"
            " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.executemany(
            "INSERT INTO session_history (name, job_id, previous, state, reason, at)"
            " VALUES (?, ?, 'stopped', 'terminated', 'bench', ?)",
            [(r[0], r[2], stamp) for r in rows],
        )
    conn.close()


def monitor_once_s(env: dict[str, str], runs: int) -> list[float]:
    """Seconds each of `runs` fresh `delegate monitor --once --json` took (start-up included);
    exits with its stderr when one fails."""
    import time

    took = []
    for _ in range(runs):
        started = time.perf_counter()
        run = subprocess.run(
            [delegate_exe(), "monitor", "--once", "--json"], env=env, capture_output=True
        )
        took.append(time.perf_counter() - started)
        if run.returncode != 0:
            sys.exit(run.stderr.decode())
    return took
