"""`delegate cron run NAME` as a fresh process when its window's job already exists (the common
case of an overlapping or retried run), against bare `python -c pass` in the same run.

Target (issue 11): p50 <= 3x the bare start.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from pathlib import Path

from _common import (
    bench_env,
    delegate_exe,
    emit,
    interleaved_with_bare,
    precompile,
    private_tmux,
    summary_ms,
    temp_home,
    timed,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args()
    precompile()
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        (folder / "task.sh").write_text("sleep 600\n")
        (folder / "job.toml").write_text('agent = "shell"\nprompt_file = "task.sh"\n')
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        exe = delegate_exe()
        subprocess.run(
            [
                exe,
                "cron",
                "add",
                "0 * * * *",
                str(folder / "job.toml"),
                "--file",
                str(folder / "tab"),
            ],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        run = [exe, "cron", "run", "job"]
        timed(run, env)  # the first run of the window submits the job
        bare, runs = interleaved_with_bare(args.n, env, lambda _: timed(run, env))
    ratio = statistics.median(runs) / statistics.median(bare)
    emit(
        {
            "benchmark": "delegate cron run, fresh process, window already submitted",
            "cron_run": summary_ms(runs),
            "bare_python": summary_ms(bare),
            "ratio_p50": round(ratio, 2),
            "target_ratio_max": 3.0,
            "meets_target": ratio <= 3.0,
        }
    )


if __name__ == "__main__":
    main()
