"""Approval latency (issue 22): from `decide` (what `delegate approve` runs, called here in
process) to the moment the agent's permission hook has printed its answer, on the SQLite bus.

A stand-in agent in a real tmux pane asks `-n` times through the real `delegate hook`; after each
answer it writes the clock (ns) to a file. Goal: p50 <= 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home

GOAL_P50_MS = 50.0


def _agent(n: int, out: Path) -> str:
    request = json.dumps(
        {
            "hook_event_name": "PermissionRequest",
            "tool_name": "Bash",
            "tool_input": {"command": "x"},
        }
    )
    ask = f"echo '{request}' | {delegate_exe()} hook > /dev/null; date +%s%N >> {out}"
    return f"for i in $(seq {n}); do {ask}; done"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args()
    precompile()
    with temp_home() as home, private_tmux() as socket, tempfile.TemporaryDirectory() as work:
        os.environ.update(bench_env(home, DELEGATE_TMUX_SOCKET=socket))
        # in-process services read this environment, as a `delegate approve` in it would
        from delegate.services.jobs.approvals import decide, waiting_requests
        from delegate.services.state import State

        out = Path(work) / "answered"
        import subprocess

        job_id = subprocess.run(
            [
                delegate_exe(),
                "submit",
                "--agent",
                "shell",
                "--no-wait",
                "--workdir",
                work,
                "--prompt",
                _agent(args.n, out),
            ],
            env=dict(os.environ),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        state = State.open()
        latencies: list[float] = []
        taken: list[float] = []  # until the wrapper took the decision (decide returned)
        for i in range(args.n):
            deadline = time.monotonic() + 60
            while not waiting_requests(state, [job_id]):
                if time.monotonic() > deadline:
                    raise SystemExit(f"request {i} never came")
                time.sleep(0.002)
            started = time.time_ns()
            decide(state, job_id)
            taken.append((time.time_ns() - started) / 1e9)
            while len(out.read_text().split() if out.exists() else []) <= i:
                time.sleep(0.001)
            answered = int(out.read_text().split()[i])
            latencies.append((answered - started) / 1e9)
        deadline = time.monotonic() + 60
        while not state.registry.get(job_id).status.terminal and time.monotonic() < deadline:
            time.sleep(0.05)  # its wrapper and supervisor finish before the folder goes
        time.sleep(0.5)
        figures = summary_ms(latencies)
        emit(
            {
                "benchmark": "approval latency: decide() to the hook's answer (SQLite bus)",
                **figures,
                "taken_p50_ms": summary_ms(taken)["p50_ms"],
                "goal": f"p50 <= {GOAL_P50_MS:g} ms",
                "meets_goal": figures["p50_ms"] <= GOAL_P50_MS,
                "python": sys.version.split()[0],
            }
        )


if __name__ == "__main__":
    main()
