"""`delegate publish` run by an agent inside its tmux pane: wall time per call.

A shell job times N publishes with `date +%s%N` around each call and writes the durations to a
file. Target (issue 3): median <= 60 ms.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home

SCRIPT = """
for i in $(seq 1 {n}); do
  t0=$(date +%s%N)
  delegate publish --event progress --detail "step $i" --data '{{"i": '$i'}}' > /dev/null
  t1=$(date +%s%N)
  echo $((t1 - t0)) >> "{out}"
done
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    precompile()
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        out = Path(work) / "durations"
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        run = subprocess.run(
            [
                delegate_exe(),
                "submit",
                "--agent",
                "shell",
                "--workdir",
                work,
                "--wait",
                "--prompt",
                SCRIPT.format(n=args.n, out=out),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr
        seconds = [int(line) / 1e9 for line in out.read_text().split()]
    result = {
        "benchmark": "delegate publish from inside a running job's tmux pane",
        "target_p50_ms": 60,
        "publish_in_pane": summary_ms(seconds),
    }
    result["meets_target"] = result["publish_in_pane"]["p50_ms"] <= 60
    emit(result)


if __name__ == "__main__":
    main()
