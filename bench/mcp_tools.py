"""`delegate mcp`: a tool call's round trip through the SDK's own stdio client, against the
SDK's own no-op tool in the same run, and the time from process start to the answer of
`initialize`. (Named mcp_tools: a bench/mcp.py would hide the SDK's `mcp` package.)

`ready` is what a job's agent gets: the job's warm server (runtime/mcp_warm) started as its
wrapper starts it, before the timing; the tool round trips go through it too. `ready_cold` is
a process serving in-process (no warm server: it imports the SDK itself); `warm_server_rss_mb`
what one idle warm server costs.

Targets (issue 22): round trip p50 <= 5 ms and <= 1.5x the no-op tool's; ready <= 400 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from _common import bench_env, emit, precompile, summary_ms, temp_home
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from delegate.runtime.mcp_warm import WarmServer
from delegate.services.jobs.register import register_job
from delegate.services.state import State

NOOP = str(Path(__file__).resolve().parent / "_mcp_noop.py")
SERVER = [sys.executable, "-m", "delegate.entry.mcp"]  # what the profiles register
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def ready_s(argv: list[str], env: dict[str, str]) -> float:
    """Process start to the first line of its answer to `initialize`."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
    proc.stdin.flush()
    line = proc.stdout.readline()
    took = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(timeout=30)
    assert b'"result"' in line, line
    return took


async def round_trips(
    argv: list[str], env: dict[str, str], tool: str, args: dict[str, Any], n: int
) -> list[float]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    times = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(max(5, n // 10)):  # warm up
            await session.call_tool(tool, args)
        for _ in range(n):
            started = time.perf_counter()
            result = await session.call_tool(tool, args)
            times.append(time.perf_counter() - started)
            assert not result.is_error, result
    return times


def wait_ready(log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while " ready (pid " not in (log.read_text() if log.exists() else ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"the warm server did not get ready: {log.read_text()}")
        time.sleep(0.02)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=300, help="tool calls per tool")
    parser.add_argument("--starts", type=int, default=7, help="process starts timed")
    args = parser.parse_args()
    precompile()
    with temp_home() as home:
        state = State.open(env={"DELEGATE_HOME": str(home)})
        job, _ = register_job(state, command="true", workdir=str(home))
        env = bench_env(home, DELEGATE_JOB_ID=job.job_id)
        noop = anyio.run(round_trips, [sys.executable, NOOP], env, "noop", {}, args.n)
        cold = [ready_s(SERVER, env) for _ in range(args.starts)]
        job_dir = state.audit.job_dir(job.job_id, create=True)
        warm = WarmServer.start(job_dir, env)  # as the job's wrapper starts it
        try:
            wait_ready(job_dir / "mcp-warm.log")
            rss = rss_mb(warm.pid)
            bb_get = anyio.run(round_trips, SERVER, env, "bb_get", {"key": "task:x"}, args.n)
            beat = anyio.run(round_trips, SERVER, env, "heartbeat", {"task": "bench"}, args.n)
            starts = [ready_s(SERVER, env) for _ in range(args.starts)]
        finally:
            warm.stop()
        noop_starts = [ready_s([sys.executable, NOOP], env) for _ in range(args.starts)]
    base = statistics.median(noop)
    emit(
        {
            "benchmark": "mcp",
            "sdk_noop_tool": summary_ms(noop),
            "bb_get": summary_ms(bb_get),
            "bb_get_ratio_to_noop_p50": round(statistics.median(bb_get) / base, 2),
            "heartbeat": summary_ms(beat),
            "heartbeat_ratio_to_noop_p50": round(statistics.median(beat) / base, 2),
            "ready": summary_ms(starts),
            "ready_cold": summary_ms(cold),
            "warm_server_rss_mb": rss,
            "sdk_noop_server_ready": summary_ms(noop_starts),
            "targets": {"round_trip_p50_ms": 5, "ratio_to_noop": 1.5, "ready_ms": 400},
        }
    )


if __name__ == "__main__":
    main()
