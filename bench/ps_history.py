"""`delegate ps` with 100,000 finished jobs in the history, against an empty history.

Target (issue 8): p50 with the history within 1.5x of p50 without it, in the same run. `ps`
reads the open index and the tail of finished.log, never every record (before: 10,000 jobs took
5.7 s).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from _common import (
    bench_env,
    delegate_exe,
    emit,
    precompile,
    private_tmux,
    summary_ms,
    temp_home,
    write_finished_history,
)


def time_ps(env: dict[str, str], runs: int) -> list[float]:
    exe = delegate_exe()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([exe, "ps", "--json"], env=env, stdout=subprocess.DEVNULL, check=True)
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    precompile()
    with temp_home() as empty, temp_home() as full, private_tmux() as socket:
        started = time.perf_counter()
        write_finished_history(full, args.history)
        fill_s = time.perf_counter() - started
        envs = [bench_env(home, DELEGATE_TMUX_SOCKET=socket) for home in (empty, full)]
        write_finished_history(empty, 0)
        time_ps(envs[0], 3)  # warm the page cache and bytecode
        time_ps(envs[1], 3)
        # interleaved, so drifting machine load hits both alike
        empty_s, full_s = [], []
        for _ in range(args.runs):
            empty_s += time_ps(envs[0], 1)
            full_s += time_ps(envs[1], 1)
    ratio = statistics.median(full_s) / statistics.median(empty_s)
    emit(
        {
            "benchmark": "delegate ps --json, fresh process, empty vs large finished history",
            "history_jobs": args.history,
            "history_fill_s": round(fill_s, 1),
            "empty_history": summary_ms(empty_s),
            "with_history": summary_ms(full_s),
            "p50_ratio": round(ratio, 3),
            "target_ratio_max": 1.5,
            "meets_target": ratio <= 1.5,
        }
    )


if __name__ == "__main__":
    main()
