"""Run every benchmark script and keep their JSON under bench/results/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    "publish_cli.py",
    "startup.py",
    "publish_to_watch.py",
    "registry_scale.py",
    "submit_to_started.py",
    "publish_in_pane.py",
    "mqtt.py",
    "monitor_pass.py",
    "ps_history.py",
    "kill_to_error.py",
    "hook_in_pane.py",
    "channel_overhead.py",
    "cron_run.py",
    "lock_pairs.py",
    "lock_cli.py",
    "msg_latency.py",
    "worktree.py",
    "remote_submit.py",  # these two build network namespaces: root only
    "remote_fleet.py",
    "report_scale.py --small",  # 100 jobs beside a bare Spark start, then 10 new jobs
    "real_agents.py",  # the real claude CLI (`make agents`) against the scripted model server
]  # report_scale.py (1M and 10M events) takes many minutes: run it on its own


def main() -> int:
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    failed = 0
    for script in sys.argv[1:] or SCRIPTS:
        name, *args = script.split()
        run = subprocess.run(
            [sys.executable, str(HERE / name), *args], capture_output=True, text=True, cwd=HERE
        )
        if run.returncode != 0:
            print(f"{script} failed:\n{run.stderr}", file=sys.stderr)
            failed += 1
            continue
        result = json.loads(run.stdout)
        stem = "-".join([name.removesuffix(".py"), *(a.strip("-") for a in args)])
        (results_dir / f"{stem}.json").write_text(run.stdout)
        print(json.dumps({script: result}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
