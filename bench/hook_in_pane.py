"""`delegate hook` (a Claude Code Notification on stdin) and `delegate publish`, run inside a
job's tmux pane, against bare `python -c pass` timed in the same pane, interleaved.

Target (issue 10): p50 of each <= 2x the bare start. Claude Code waits for synchronous hooks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home

SCRIPT = """
for i in $(seq 1 {n}); do
  t0=$(date +%s%N); {python} -c pass; t1=$(date +%s%N)
  echo $((t1 - t0)) >> "{out}/bare"
  t0=$(date +%s%N)
  delegate publish --event progress --detail "step $i" > /dev/null
  t1=$(date +%s%N)
  echo $((t1 - t0)) >> "{out}/publish"
  t0=$(date +%s%N); delegate hook < "{payload}"; t1=$(date +%s%N)
  echo $((t1 - t0)) >> "{out}/hook"
done
"""
NOTIFICATION = {
    "session_id": "bench",
    "transcript_path": "/dev/null",
    "cwd": ".",
    "hook_event_name": "Notification",
    "message": "Claude needs your permission to use Bash",
    "notification_type": "permission_prompt",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=40)
    args = parser.parse_args()
    precompile()
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        out = Path(work)
        payload = out / "notification.json"
        payload.write_text(json.dumps(NOTIFICATION))
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        script = SCRIPT.format(n=args.n, out=out, payload=payload, python=sys.executable)
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
                script,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert run.returncode == 0, run.stderr
        times = {
            name: [int(line) / 1e9 for line in (out / name).read_text().split()]
            for name in ("bare", "publish", "hook")
        }
        events = [json.loads(line)["event"] for line in run.stdout.splitlines() if line.strip()]
    result = {
        "benchmark": "delegate hook and delegate publish inside a pane vs bare python",
        "bare_python": summary_ms(times["bare"]),
        "publish_in_pane": summary_ms(times["publish"]),
        "hook_in_pane": summary_ms(times["hook"]),
        "permission_required_events": events.count("permission_required"),
    }
    bare = result["bare_python"]["p50_ms"]
    result["publish_ratio_p50"] = round(result["publish_in_pane"]["p50_ms"] / bare, 2)
    result["hook_ratio_p50"] = round(result["hook_in_pane"]["p50_ms"] / bare, 2)
    result["target_ratio_max"] = 2.0
    result["meets_target"] = max(result["publish_ratio_p50"], result["hook_ratio_p50"]) <= 2.0
    emit(result)


if __name__ == "__main__":
    main()
