"""Run benchmark scripts against two checkouts in the same run, alternating, and print both.

    python bench/compare.py --before ../old-checkout --after . publish_cli.py ps_history.py

Each checkout runs its own copy of the script with its own `.venv` first on PATH, so `delegate`
is that checkout's. Rounds alternate (before, after, before, ...) so both see the same load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def run_script(checkout: Path, script: str) -> dict[str, object]:
    venv_bin = checkout / ".venv" / "bin"
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("VIRTUAL_ENV", None)
    run = subprocess.run(
        [str(venv_bin / "python"), str(checkout / "bench" / script)],
        cwd=checkout / "bench",
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        return {"failed": run.stderr.strip().splitlines()[-5:]}
    return json.loads(run.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("scripts", nargs="+")
    args = parser.parse_args()
    results: dict[str, dict[str, list[dict[str, object]]]] = {}
    for script in args.scripts:
        rounds = results.setdefault(script, {"before": [], "after": []})
        for _ in range(args.rounds):
            for side in ("before", "after"):
                rounds[side].append(run_script(getattr(args, side).resolve(), script))
        print(json.dumps({script: rounds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
