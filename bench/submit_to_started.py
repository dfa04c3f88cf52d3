"""`delegate submit --wait` until its `started` event is printed (a fresh process each time).

Covers CLI start-up, registering, subscribing, starting tmux, the wrapper's start-up and its
`started` publish. Runs on a private tmux server. Target (issue 3): p50 <= 300 ms.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=25)
    args = parser.parse_args()
    precompile()
    samples, totals = [], []
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        for _ in range(args.n):
            started = time.perf_counter()
            proc = subprocess.Popen(
                [
                    delegate_exe(),
                    "submit",
                    "--cmd",
                    "true",
                    "--prompt",
                    "x",
                    "--workdir",
                    work,
                    "--wait",
                ],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert proc.stdout is not None
            first = proc.stdout.readline()
            samples.append(time.perf_counter() - started)
            assert '"started"' in first, first
            proc.communicate(timeout=60)
            totals.append(time.perf_counter() - started)
            assert proc.returncode == 0
    result = {
        "benchmark": "delegate submit --wait until the started event is printed",
        "target_p50_ms": 300,
        "submit_to_started": summary_ms(samples),
        "submit_to_exit": summary_ms(totals),
    }
    result["meets_target"] = result["submit_to_started"]["p50_ms"] <= 300
    emit(result)


if __name__ == "__main__":
    main()
