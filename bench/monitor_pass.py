"""One monitor pass over 100 live sessions with 10,000 finished jobs in the history.

Target (issue 8): p50 <= 150 ms per pass, and one tmux process per socket per pass. Measured
in-process (what a running monitor pays each interval) and as `delegate monitor --once` in a
fresh process (start-up included), both against a real tmux server with 100 panes.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import (
    bench_env,
    emit,
    monitor_once_s,
    precompile,
    private_tmux,
    summary_ms,
    temp_home,
    write_finished_history,
)


def live_jobs(home, socket: str, count: int) -> None:
    """`count` running jobs, each in a tmux session of its own (the agent: a long sleep)."""
    from pathlib import Path

    from delegate.adapters.tmux import Tmux
    from delegate.core.caps import Caps, may_start
    from delegate.core.model import EventType
    from delegate.services.jobs.launch import inventory
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_TMUX_SOCKET": socket})
    tmux = Tmux(socket)
    sessions = inventory(state)
    for _ in range(count):
        job, _ = state.registry.register(agent="shell", workdir="/tmp")
        name = f"dlg-{job.job_id}"
        state.registry.update(job.job_id, session=name, tmux_socket=tmux.socket_path)
        state.registry.admit(
            job.job_id,
            {"argv": ["sleep", "600"], "prompt": "stdin", "prompt_path": ""},
            lambda j, others: may_start(j, others, Caps()),
        )
        state.registry.apply_event(job.job_id, EventType.STARTED)
        sessions.record_start(
            name,
            job_id=job.job_id,
            agent="shell",
            workdir="/tmp",
            pane_pid=None,
            socket=tmux.socket_path,
        )
        pid = tmux.start(name, ["sleep", "600"], workdir=Path("/tmp"), env={}, job_id=job.job_id)
        sessions.set_pane_pid(name, pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--passes", type=int, default=31)
    args = parser.parse_args()
    precompile()
    with temp_home() as home, private_tmux() as socket:
        write_finished_history(home, args.history)
        live_jobs(home, socket, args.live)
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)

        from delegate.services.reconciler import Reconciler
        from delegate.services.state import State

        state = State.open(env=env)
        reconciler = Reconciler(state)
        reconciler.run_pass()  # warm
        samples, actions, queries = [], 0, []
        for _ in range(args.passes):
            before = reconciler.tmux_queries
            started = time.perf_counter()
            actions += len(reconciler.run_pass())
            samples.append(time.perf_counter() - started)
            queries.append(reconciler.tmux_queries - before)
        seen = reconciler.last_snapshot
        assert seen is not None
        panes = sum(len(v.panes) for v in seen.views.values())
        fresh = monitor_once_s(env, 7)
    p50 = statistics.median(samples) * 1000
    emit(
        {
            "benchmark": "one monitor pass: 100 live sessions, 10,000 finished jobs in history",
            "live_sessions": args.live,
            "panes_seen": panes,
            "history_jobs": args.history,
            "pass_in_process": summary_ms(samples),
            "monitor_once_fresh_process": summary_ms(fresh),
            "tmux_processes_per_pass": statistics.median(queries),
            "sockets": len(seen.views),
            "actions_taken": actions,
            "target_p50_ms": 150,
            "meets_target": p50 <= 150 and max(queries) <= len(seen.views),
        }
    )


if __name__ == "__main__":
    main()
