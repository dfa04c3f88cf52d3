"""The delegator at scale (issue 31): what a queued job and a running job cost of our own.

1. A plan of `--plan` (10,000) small jobs in a paused group, registered by one `delegate submit
   --from-file`: its wall time, and the resident memory of every process of ours (all but the
   jobs' wrappers and agents) while the jobs wait. Targets: <= 20 s, <= 200 MB.
2. `--running` jobs at once (10, 100, 200 by default) in tmux, each a shell job that publishes a
   progress event every `--every` seconds (1) for `--hold` seconds and completes: the state
   dir's supervisor's resident memory and CPU share while they run, its memory per running job
   (the growth from the smallest size), and how long after its publish each job's `completed`
   was on record as received by the supervisor, and as applied to its record. Targets:
   CPU <= 25% of one core, RSS <= 300 MB, <= 200 KB per running job, `completed` applied
   within p99 <= 500 ms.

Every process of ours is found by its environment (DELEGATE_HOME); wrappers and agents are
told apart by their command line. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def ours(home: Path) -> dict[int, str]:
    """pid -> command line of every process whose environment names `home`."""
    marker = f"DELEGATE_HOME={home}".encode()
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                if marker not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                found[int(entry.name)] = handle.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def delegator(home: Path) -> dict[int, str]:
    """Ours, less the jobs' own processes (wrappers, the agents and what they run, their
    `delegate publish`) and tmux: the Python processes of the toolkit itself."""
    return {
        pid: cmd
        for pid, cmd in ours(home).items()
        if "python" in cmd
        and "delegate" in cmd
        and "runtime.wrapper" not in cmd
        and " publish " not in f"{cmd} "
    }


def rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE
    except OSError:
        return 0


def cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except OSError:
        return 0


def supervisor_pid(home: Path) -> int | None:
    for pid, cmd in ours(home).items():
        if "delegate.runtime.supervisor" in cmd:
            return pid
    return None


def queue_paused_plan(exe: str, env: dict[str, str], home: Path, count: int) -> float:
    """Register a plan of `count` small jobs in a paused group; its wall time in seconds."""
    work = home.parent / "plan-work"
    work.mkdir(exist_ok=True)
    subprocess.run([exe, "group", "add", "nightly"], env=env, check=True, capture_output=True)
    subprocess.run([exe, "group", "pause", "nightly"], env=env, check=True, capture_output=True)
    plan = home.parent / "plan.toml"
    lines = ['agent = "shell"', f'workdir = "{work}"', 'group = "nightly"', ""]
    for n in range(count):
        lines += ["[[jobs]]", f'name = "j{n}"', f'prompt = "echo {n}"', ""]
    plan.write_text("\n".join(lines))
    started = time.perf_counter()
    done = subprocess.run(
        [exe, "submit", "--from-file", str(plan)], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"the plan failed: {done.stderr.strip()[-400:]}")
    return wall


def plan_bench(count: int) -> dict[str, object]:
    with temp_home() as home, private_tmux() as socket:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        wall = queue_paused_plan(delegate_exe(), env, home, count)
        time.sleep(2.0)  # the supervisor's first passes over the queue
        procs = delegator(home)
        resident = sum(rss_bytes(pid) for pid in procs)
        return {
            "jobs": count,
            "register_s": round(wall, 2),
            "jobs_per_s": round(count / wall, 1),
            "processes_of_ours_waiting": len(procs),
            "their_rss_mb": round(resident / 1e6, 1),
            "targets": {"register_s": 20, "rss_mb": 200},
        }


SHELL_JOB = """
i=0
while [ $i -lt {beats} ]; do
  delegate publish --event progress --detail "beat $i"
  sleep {every}
  i=$((i + 1))
done
"""


def running_bench(count: int, every: float, hold: float, queued: int) -> dict[str, object]:
    with temp_home() as home, private_tmux() as socket:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket, DELEGATE_SUPERVISOR_QUIET_S="600")
        exe = delegate_exe()
        work = home.parent / "work"
        work.mkdir()
        if queued:  # a nightly plan waits beside them, paused: the supervisor follows it too
            queue_paused_plan(exe, env, home, queued)
        beats = max(1, int(hold / every))
        script = SHELL_JOB.format(beats=beats, every=every)
        ids = []
        for _ in range(count):
            done = subprocess.run(
                [exe, "submit", "--agent", "shell", "--prompt", script, "--workdir", str(work),
                 "--no-wait"],
                env=env, capture_output=True, text=True, check=True,
            )  # fmt: skip
            ids.append(done.stdout.strip())
        supervisor = supervisor_pid(home)
        if supervisor is None:
            raise SystemExit("no supervisor runs")
        time.sleep(min(5.0, hold / 3))  # all of them publishing
        ticks, clock = cpu_ticks(supervisor), time.monotonic()
        samples = []
        while time.monotonic() - clock < hold / 2:
            samples.append(rss_bytes(supervisor))
            time.sleep(0.5)
        cpu = (cpu_ticks(supervisor) - ticks) / TICKS / (time.monotonic() - clock)
        lags, applied = _completed_lags(home, ids, timeout=hold * 3 + 60)
        return {
            "running": count,
            "queued_beside": queued,
            "progress_every_s": every,
            "supervisor_rss_mb": round(max(samples) / 1e6, 1),
            "supervisor_cpu_share_of_one_core": round(cpu, 3),
            "completed_to_received": summary_ms(lags) if lags else None,
            "completed_to_applied": summary_ms(applied) if applied else None,
            "jobs_completed": len(lags),
        }


def _stamp(entry: dict[str, str]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()


def _one_job_lags(log: Path) -> tuple[float, float | None] | None:
    """(published -> received, published -> applied or None) of one job's `completed`, or
    None while it is not all on record."""
    import json

    published = received = ended = None
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        entry = json.loads(line)
        if entry.get("kind") == "status_changed" and entry.get("status") == "completed":
            ended = _stamp(entry)
        elif entry.get("event") == "completed" and entry.get("kind") == "published":
            published = _stamp(entry)
        elif entry.get("event") == "completed" and entry.get("kind") == "received":
            received = _stamp(entry)
    if published is None or received is None:
        return None
    return received - published, None if ended is None else ended - published


def _completed_lags(home: Path, ids: list[str], timeout: float) -> tuple[list[float], list[float]]:
    """Per job: from its `completed` published to the supervisor's `received` line of it, and
    to the record's move to completed (its `status_changed` line, by whoever applied it)."""
    deadline = time.monotonic() + timeout
    found: dict[str, tuple[float, float | None]] = {}
    while len(found) < len(ids) and time.monotonic() < deadline:
        for job_id in ids:
            if job_id not in found:
                lags = _one_job_lags(home / "logs" / job_id / "events.ndjson")
                if lags is not None:
                    found[job_id] = lags
        time.sleep(0.5)
    received = [lags[0] for lags in found.values()]
    return received, [lags[1] for lags in found.values() if lags[1] is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", type=int, default=10_000)
    parser.add_argument("--running", type=int, nargs="*", default=[10, 100, 200])
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--hold", type=float, default=30.0)
    parser.add_argument("--queued", type=int, default=10_000, help="queued jobs beside them")
    args = parser.parse_args()
    precompile()
    result: dict[str, object] = {}
    if args.plan:
        result["plan"] = plan_bench(args.plan)
    runs = [running_bench(n, args.every, args.hold, args.queued) for n in args.running]
    if runs:
        result["running"] = runs
        if len(runs) > 1:
            low, high = runs[0], runs[-1]
            grown = float(high["supervisor_rss_mb"]) - float(low["supervisor_rss_mb"])  # type: ignore[arg-type]
            per_job = grown * 1e6 / max(1, int(high["running"]) - int(low["running"]))  # type: ignore[call-overload]
            result["supervisor_kb_per_running_job"] = round(per_job / 1e3, 1)
        result["targets"] = {"cpu_share": 0.25, "rss_mb": 300, "kb_per_job": 200, "p99_ms": 500}
    emit(result)


if __name__ == "__main__":
    main()
