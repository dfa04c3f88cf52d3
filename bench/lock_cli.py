"""`delegate lock acquire` (then `release`, untimed) as a fresh process, against bare
`python -c pass` in the same run.

Target (issue 12): p50 <= 3x the bare start.
"""

from __future__ import annotations

import argparse
import statistics

from _common import (
    bench_env,
    delegate_exe,
    emit,
    interleaved_with_bare,
    precompile,
    summary_ms,
    temp_home,
    timed,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args()
    precompile()
    exe = delegate_exe()
    with temp_home() as home:
        env = bench_env(home)
        timed([exe, "lock", "acquire", "warm", "--owner", "bench"], env)

        def acquire_then_release(i: int) -> float:
            took = timed([exe, "lock", "acquire", f"r{i % 4}", "--owner", "bench"], env)
            timed([exe, "lock", "release", f"r{i % 4}", "--owner", "bench"], env)  # untimed
            return took

        bare, runs = interleaved_with_bare(args.n, env, acquire_then_release)
    ratio = statistics.median(runs) / statistics.median(bare)
    emit(
        {
            "benchmark": "delegate lock acquire, fresh process",
            "lock_acquire": summary_ms(runs),
            "bare_python": summary_ms(bare),
            "ratio_p50": round(ratio, 2),
            "target_ratio_max": 3.0,
            "meets_target": ratio <= 3.0,
        }
    )


if __name__ == "__main__":
    main()
