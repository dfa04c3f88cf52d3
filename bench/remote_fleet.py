"""200 jobs spread over 2 agent hosts with `submit --host ... --no-wait`, through a broker, all
in network namespaces: all complete; the delegator's CPU per job (every delegator process:
the submits and the detached supervisors they start, counted by a child subreaper).

Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

from _common import emit, precompile
from _hosts import fleet

# Runs inside the delegator's namespace: a subreaper, so the detached supervisors (which leave
# their parent) are reaped here and their CPU time counts in RUSAGE_CHILDREN.
DRIVER = r"""
import ctypes, json, os, resource, subprocess, sys, time
PR_SET_CHILD_SUBREAPER = 36
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
hosts, count = sys.argv[1].split(","), int(sys.argv[2])
started = time.monotonic()
ids = []
for n in range(count):
    out = subprocess.run(
        [sys.executable, "-m", "delegate", "submit", "--host", hosts[n % len(hosts)],
         "--agent", "shell", "--no-wait", "--prompt", "true"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    ids.append(out)
submitted = time.monotonic() - started
from delegate.services.state import State
state = State.open()
deadline = time.monotonic() + 600
while time.monotonic() < deadline:
    if all(state.registry.get(j).status.terminal for j in ids):
        break
    time.sleep(0.2)
done = time.monotonic() - started
states = {}
for j in ids:
    s = state.registry.get(j).status.value
    states[s] = states.get(s, 0) + 1
while True:  # the supervisors end with their jobs; reap them all
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        break
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"jobs": count, "states": states, "submit_s": submitted, "all_done_s": done,
                  "cpu_s": usage.ru_utime + usage.ru_stime}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    precompile()
    with tempfile.TemporaryDirectory(prefix="delegate-bench-") as tmp:
        folder = Path(tmp)
        hosts = ["h1", "h2"]
        with fleet(folder, hosts, socket_prefix=f"dlgbench-{uuid.uuid4().hex[:6]}") as f:
            run = f.lab.run(
                "d",
                [sys.executable, "-c", DRIVER, ",".join(hosts), str(args.n)],
                env=f.env,
                timeout=900,
            )
            if run.returncode != 0:
                raise SystemExit(run.stderr[-2000:])
            result = json.loads(run.stdout)
    emit(
        {
            "benchmark": f"{args.n} jobs over {len(hosts)} agent hosts, submit --host --no-wait",
            **result,
            "all_completed": result["states"] == {"completed": args.n},
            "delegator_cpu_ms_per_job": round(result["cpu_s"] * 1000 / args.n, 1),
        }
    )


if __name__ == "__main__":
    main()
