"""Start-up of the commands scripts call often, each against a bare `python -c pass` from the
same venv measured interleaved with it in the same run (issue 18).

- `delegate publish` (fresh process, SQLite bus): goal <= 2x bare python; measured for a job
  that only was registered (`publish`: no wrapper serves it, so the state dir's warm publisher
  does, which the first publish started), for a running job whose wrapper serves its
  publishes (`publish_served`: what an agent's or a script's publish for a job in tmux takes),
  and, for the record, with no server at all (`publish_direct`, DELEGATE_PUBLISH_WARM_S=0: the
  process publishes by itself, as the first publish of a state dir does);
- `delegate ps --json` with jobs present (finished history and a few real jobs): goal <= 4x;
- `delegate submit --no-wait` of `true` (until the command returns): goal p50 <= 120 ms;
- `delegate submit --wait` of `true` (to its exit): goal p50 <= 250 ms.

Every submit runs on a private tmux server; after a `--no-wait` the job is waited for (not
timed) so that no supervisor of an earlier run competes with the next one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import (
    bench_env,
    delegate_exe,
    emit,
    interleaved_with_bare,
    precompile,
    private_tmux,
    started_job,
    summary_ms,
    temp_home,
    timed,
    write_finished_history,
)

GOALS: dict[str, tuple[str, float | None]] = {
    "publish": ("ratio", 2.0),
    "publish_direct": ("ratio", None),
    "publish_served": ("ratio", 2.0),
    "ps_json": ("ratio", 4.0),
    "submit_no_wait": ("p50_ms", 120.0),
    "submit_wait_true": ("p50_ms", 250.0),
}


def _job_ended(home: Path, job_id: str, timeout_s: float = 30.0) -> None:
    """Wait until the job's record is terminal and its supervisor has let go of it."""
    import json

    record = home / "jobs" / f"{job_id}.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if json.loads(record.read_text())["status"] in ("completed", "error", "cancelled"):
                time.sleep(0.05)  # its supervisor settles the session, then exits
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.02)
    raise SystemExit(f"job {job_id} did not end in {timeout_s:g} s")


def _submit(env: dict[str, str], workdir: str, *, wait: bool) -> tuple[float, str]:
    argv = [delegate_exe(), "submit", "--cmd", "true", "--prompt", "x", "--workdir", workdir]
    argv.append("--wait" if wait else "--no-wait")
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    return elapsed, ("" if wait else done.stdout.strip())


def _served_job(env: dict[str, str], home: Path, workdir: str) -> str:
    """A running job (`sleep`) whose wrapper listens for its publishes."""
    argv = [delegate_exe(), "submit", "--cmd", "sleep 600", "--prompt", "x", "--workdir", workdir]
    job_id = subprocess.run(
        [*argv, "--no-wait"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    sock = home / "logs" / job_id / "publish.sock"
    deadline = time.monotonic() + 30
    while not sock.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"job {job_id}: its wrapper never listened")
        time.sleep(0.02)
    return job_id


def _figures(bare: list[float], runs: list[float]) -> dict[str, object]:
    figures: dict[str, object] = {**summary_ms(runs)}
    figures["bare_python_p50_ms"] = round(statistics.median(bare) * 1000, 2)
    ratio = statistics.median(runs) / statistics.median(bare)
    figures["ratio_to_bare_python_p50"] = round(ratio, 2)
    return figures


def _meets(name: str, figures: dict[str, object]) -> bool | None:
    kind, goal = GOALS[name]
    if goal is None:
        return None
    value = figures["ratio_to_bare_python_p50" if kind == "ratio" else "p50_ms"]
    assert isinstance(value, float | int)
    return value <= goal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=21)
    parser.add_argument("--history", type=int, default=200)
    args = parser.parse_args()
    precompile()
    exe = delegate_exe()
    results: dict[str, dict[str, object]] = {}
    with temp_home() as home, private_tmux() as socket, tempfile.TemporaryDirectory() as work:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        write_finished_history(home, args.history)
        job_id = started_job(env)  # one open job, as a script's running job would be
        publish = [exe, "publish", "--job", job_id, "--event", "progress", "--detail", "step"]
        timed(publish, env)  # warm the page cache
        served_id = _served_job(env, home, work)
        served = [exe, "publish", "--job", served_id, "--event", "progress", "--detail", "step"]

        def no_wait(_: int) -> float:
            elapsed, submitted = _submit(env, work, wait=False)
            _job_ended(home, submitted)
            return elapsed

        def with_wait(_: int) -> float:
            return _submit(env, work, wait=True)[0]

        ps = [exe, "ps", "--json"]
        direct_env = {**env, "DELEGATE_PUBLISH_WARM_S": "0"}
        runs = {
            "publish": lambda _: timed(publish, env),
            "publish_direct": lambda _: timed(publish, direct_env),
            "publish_served": lambda _: timed(served, env),
            "submit_no_wait": no_wait,
            "submit_wait_true": with_wait,
            "ps_json": lambda _: timed(ps, env),  # last: the submits' jobs are listed too
        }
        for name, run in runs.items():
            run(0)  # one warm-up each
            bare, samples = interleaved_with_bare(args.n, env, run)
            results[name] = _figures(bare, samples)
            kind, goal = GOALS[name]
            stated = "none (for the record)" if goal is None else f"{kind} <= {goal:g}"
            results[name]["goal"] = stated
            results[name]["meets_goal"] = _meets(name, results[name])
            if name == "publish_served":  # its job ends before the submits are measured
                cancel = [exe, "cancel", served_id]
                subprocess.run(cancel, env=env, capture_output=True, check=True)
                _job_ended(home, served_id)
    emit(
        {
            "benchmark": "start-up of publish, ps --json, submit --no-wait and --wait (true)",
            "runs_each": args.n,
            "finished_history": args.history,
            **results,
        }
    )


if __name__ == "__main__":
    main()
