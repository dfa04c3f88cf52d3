"""Remote submit -> `started` received on the delegator, through a broker, with the delegator,
the broker and the agent host in network namespaces; against a local submit (the delegator's
own tmux) in the same run. Each sample is `submit --wait` from its start to its first line on
stdout (the `started` event, verified and applied).

Target (issue 13): remote p50 <= 2x the local p50. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import emit, precompile, summary_ms
from _hosts import fleet


def first_line_s(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - started
    proc.wait(timeout=60)
    if b'"started"' not in line or proc.returncode != 0:
        raise RuntimeError(f"no started event: {line!r} (exit {proc.returncode})")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=15)
    args = parser.parse_args()
    precompile()
    with tempfile.TemporaryDirectory(prefix="delegate-bench-") as tmp:
        folder = Path(tmp)
        work = folder / "local-work"
        work.mkdir()
        with fleet(folder, ["h1"], socket_prefix=f"dlgbench-{uuid.uuid4().hex[:6]}") as f:
            submit = [sys.executable, "-m", "delegate", "submit", "--agent", "shell", "--wait"]
            remote, local = [], []
            for _ in range(args.n):
                remote.append(
                    first_line_s(
                        f.lab.argv("d", [*submit, "--host", "h1", "--prompt", "true"]), f.env
                    )
                )
                local.append(
                    first_line_s(
                        f.lab.argv("d", [*submit, "--workdir", str(work), "--prompt", "true"]),
                        {**f.env, "DELEGATE_BUS": f"sqlite://{f.home / 'local-bus.db'}"},
                    )
                )
    ratio = statistics.median(remote) / statistics.median(local)
    emit(
        {
            "benchmark": "submit --host to started on the delegator, through the broker",
            "remote": summary_ms(remote),
            "local": summary_ms(local),
            "ratio_p50": round(ratio, 2),
            "target_ratio_max": 2.0,
            "meets_target": ratio <= 2.0,
        }
    )


if __name__ == "__main__":
    main()
