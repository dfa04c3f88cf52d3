"""`delegate publish` as a fresh process on the SQLite bus: wall time per call.

Target (issues 2 and 9): median <= 60 ms, with every audit line fdatasync'ed (issue 9). Bare
`python -c pass` is measured in the same run as the floor, and the ratio to it reported.
"""

from __future__ import annotations

import argparse

from _common import (
    bench_env,
    delegate_exe,
    emit,
    interleaved_with_bare,
    precompile,
    started_job,
    summary_ms,
    temp_home,
    timed,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=60)
    args = parser.parse_args()
    precompile()
    exe = delegate_exe()
    with temp_home() as home:
        env = bench_env(home)
        job_id = started_job(env)
        publish = [
            exe,
            "publish",
            "--job",
            job_id,
            "--event",
            "progress",
            "--detail",
            "step done",
            "--data",
            '{"step": 1}',
        ]
        timed(publish, env)  # warm the page cache
        bare, runs = interleaved_with_bare(args.n, env, lambda _: timed(publish, env))
    result = {
        "benchmark": "delegate publish, fresh process, SQLite bus",
        "target_p50_ms": 60,
        "publish": summary_ms(runs),
        "bare_python": summary_ms(bare),
    }
    result["ratio_to_bare_python_p50"] = round(
        result["publish"]["p50_ms"] / result["bare_python"]["p50_ms"], 2
    )
    result["meets_target"] = result["publish"]["p50_ms"] <= 60
    emit(result)


if __name__ == "__main__":
    main()
