"""From a wrapper's SIGKILL to its job's `error` in the registry, with a running monitor.

Target (issue 8): p50 <= 500 ms. A person's `delegate monitor` takes the state dir over from the
supervisor the submits started, and notices alone (it holds a pidfd of every live pane; the
kernel wakes it when the wrapper dies).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home


def submit(env: dict[str, str], workdir: Path) -> str:
    out = subprocess.run(
        [
            delegate_exe(),
            "submit",
            "--agent",
            "shell",
            "--prompt",
            "sleep 600",
            "--workdir",
            str(workdir),
            "--no-wait",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=21)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args()
    precompile()
    from delegate.core.model import JobState
    from delegate.services.jobs.launch import inventory
    from delegate.services.state import State

    with temp_home() as home, private_tmux() as socket:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        workdir = home.parent
        state = State.open(env=env)
        ids = [submit(env, workdir) for _ in range(args.jobs)]
        deadline = time.monotonic() + 60
        while not all(state.registry.get(j).status is JobState.RUNNING for j in ids):
            if time.monotonic() > deadline:
                raise SystemExit("jobs did not start")
            time.sleep(0.05)
        monitor = subprocess.Popen(
            [delegate_exe(), "monitor", "--interval", str(args.interval)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(1.5)  # its first pass has opened the pidfds
            samples = []
            sessions = inventory(state)
            for job_id in ids:
                row = sessions.get(f"dlg-{job_id}")
                assert row is not None and row.pane_pid
                started = time.perf_counter()
                os.kill(row.pane_pid, signal.SIGKILL)
                while state.registry.get(job_id).status is not JobState.ERROR:
                    if time.perf_counter() - started > 30:
                        raise SystemExit(f"job {job_id} was not failed")
                    time.sleep(0.002)
                samples.append(time.perf_counter() - started)
                time.sleep(0.2)
        finally:
            monitor.send_signal(signal.SIGTERM)
            monitor.wait(timeout=30)
        reasons = sorted({(state.registry.get(j).error or "")[:40] for j in ids})
    result = summary_ms(samples)
    emit(
        {
            "benchmark": "wrapper SIGKILL -> job error, monitor running (supervisors killed)",
            "monitor_interval_s": args.interval,
            "kill_to_error": result,
            "reasons": reasons,
            "monitor_exit": monitor.returncode,
            "target_p50_ms": 500,
            "meets_target": result["p50_ms"] <= 500,
        }
    )


if __name__ == "__main__":
    main()
