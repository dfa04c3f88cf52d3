"""One monitor pass with a long queue: 10,000 queued jobs (in groups, some waiting for others,
some retries waiting out their backoff) beside 100 running jobs in tmux.

Target (issue 20): a pass stays under 150 ms. Every slot is taken (`max_running` = the running
jobs), so the pass judges each queued job and launches none: what a monitor pays each
interval while a long queue waits. Measured in-process (`Reconciler.run_pass`) and as
`delegate monitor --once` in a fresh process (start-up included).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from _common import (
    bench_env,
    emit,
    monitor_once_s,
    precompile,
    private_tmux,
    summary_ms,
    temp_home,
)
from monitor_pass import live_jobs

GROUPS = {"night": 40, "day": 30, "ci": 20, "docs": 5}


def write_queue(home: Path, count: int, running: list[str]) -> None:
    """`count` queued jobs written straight to disk as the registry leaves them (record and
    open marker): a quarter in no group, the rest in GROUPS; every fifth waits for a running
    job, every seventh for the queued job before it; every eleventh is a retry whose backoff
    has not passed."""
    from delegate.adapters.groups import GroupBook
    from delegate.core.model import Job, JobState
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home)})
    book = GroupBook(state.layout.groups_book)
    for name, cap in GROUPS.items():
        book.add(name, max_running=cap)
    names = [None, *GROUPS]
    stamp = "2026-01-01T00:00:00.000000Z"
    later = "2099-01-01T00:00:00.000000Z"
    previous = None
    for n in range(count):
        job_id = f"{0xE0000000 + n:08x}"
        after = None
        if n % 5 == 0 and running:
            after = [running[n % len(running)]]
        elif n % 7 == 0 and previous is not None:
            after = [previous]
        retry = n % 11 == 0
        job = Job(
            job_id=job_id,
            status=JobState.QUEUED,
            created_at=stamp,
            updated_at=stamp,
            auth_token="x" * 43,
            agent="shell",
            session=f"dlg-{job_id}",
            launch={"argv": ["sleep", "1"], "prompt": "stdin", "prompt_path": ""},
            group=names[n % len(names)],
            after=after,
            attempt=2 if retry else None,
            retry={"retries": 3, "on": ["error"], "backoff": [1.0, 4.0]} if retry else None,
            not_before=later if retry else None,
        )
        (state.layout.jobs / f"{job_id}.json").write_text(json.dumps(job.to_dict()))
        (state.layout.jobs / "open" / job_id).touch()
        previous = job_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=15)
    args = parser.parse_args()
    precompile()
    with temp_home() as home, private_tmux() as socket:
        live_jobs(home, socket, args.live)
        (home / "delegate.toml").write_text(f"max_running = {args.live}\n")
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)

        from delegate.services.reconciler import Reconciler
        from delegate.services.state import State

        state = State.open(env=env)
        running = [j.job_id for j in state.registry.open_jobs()]
        write_queue(home, args.queued, running)
        time.sleep(1.1)  # records settle (the registry caches a record once its file is 1 s old)
        reconciler = Reconciler(state)
        warm = reconciler.run_pass()
        samples, actions = [], len(warm)
        for _ in range(args.passes):
            started = time.perf_counter()
            actions += len(reconciler.run_pass())
            samples.append(time.perf_counter() - started)
        seen = reconciler.last_snapshot
        assert seen is not None
        fresh = monitor_once_s(env, 5)
    p50 = statistics.median(samples) * 1000
    emit(
        {
            "benchmark": "one monitor pass: 10,000 queued jobs (groups, dependencies, backoffs)"
            " and 100 running",
            "running": args.live,
            "queued": args.queued,
            "open_jobs_seen": len(seen.jobs),
            "pass_in_process": summary_ms(samples),
            "monitor_once_fresh_process": summary_ms(fresh),
            "actions_taken": actions,
            "target_p50_ms": 150,
            "meets_target": p50 <= 150 and actions == 0,
        }
    )


if __name__ == "__main__":
    main()
