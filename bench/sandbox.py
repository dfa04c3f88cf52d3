"""What a job's box costs at launch (issue 32): `submit --wait` of a `true` job until its
`started` event is printed and until it has exited (the agent ran and its end is on record),
plain, with `--max-memory --max-cpus --max-pids` (its cgroups made, joined by the agent between
fork and exec) and with `--sandbox` (bubblewrap), runs interleaved so all see the same machine.
Targets: the limits add <= 20 ms (p50); a sandboxed job <= 1.3x a plain one. The wrapper
publishes `started` before it starts the agent, so the box shows in the time to exit.

Then 100 MB fetched with curl from a local HTTP server: directly, and from inside a sandbox
whose only network is its egress proxy (`network = "allowlist"`). Target: >= 80% of direct.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, private_tmux, summary_ms, temp_home

LIMITS = ["--max-memory", "512M", "--max-cpus", "1", "--max-pids", "256"]


def to_started(env: dict[str, str], work: str, extra: list[str]) -> tuple[float, float]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [delegate_exe(), "submit", "--cmd", "true", "--prompt", "x", "--workdir", work, "--wait",
         *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    first = proc.stdout.readline()
    took = time.perf_counter() - started
    _, err = proc.communicate(timeout=60)
    if '"started"' not in first or proc.returncode != 0:
        raise SystemExit(f"the job did not run: {first!r} {err.strip()[-300:]}")
    return took, time.perf_counter() - started


BIG = 100 * 1024 * 1024


def big_server() -> tuple[object, int]:
    """A local HTTP server answering every GET with BIG bytes."""
    import http.server
    import threading

    block = b"x" * (1 << 20)

    class Big(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(BIG))
            self.end_headers()
            for _ in range(BIG // len(block)):
                self.wfile.write(block)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


CURL = ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}"]


def throughput(runs: int) -> dict[str, object]:
    """MB/s of 100 MB through curl: direct, and from a sandbox through its egress proxy."""
    server, port = big_server()
    url = f"http://127.0.0.1:{port}/big"
    direct, boxed = [], []
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        home.mkdir(parents=True, exist_ok=True)
        (home / "delegate.toml").write_text(
            '[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["127.0.0.1"]\n'
        )
        script = " ".join([*CURL, url]) + " > speed"
        for _ in range(runs):
            done = subprocess.run([*CURL, url], capture_output=True, text=True, check=True)
            direct.append(float(done.stdout) / 1e6)
            subprocess.run(
                [delegate_exe(), "submit", "-a", "shell", "-p", script, "--workdir", work,
                 "--sandbox", "--wait"],
                env=env, capture_output=True, check=True,
            )  # fmt: skip
            boxed.append(float(Path(work, "speed").read_text()) / 1e6)
    server.shutdown()  # type: ignore[attr-defined]
    best_direct, best_boxed = max(direct), max(boxed)
    return {
        "mb_per_s_direct": round(best_direct, 1),
        "mb_per_s_through_proxy": round(best_boxed, 1),
        "ratio_best": round(best_boxed / best_direct, 2),
        "runs": runs,
        "target_ratio": 0.8,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=20)
    args = parser.parse_args()
    precompile()
    kinds: dict[str, list[str]] = {"plain": [], "limits": LIMITS, "sandbox": ["--sandbox"]}
    started: dict[str, list[float]] = {kind: [] for kind in kinds}
    ended: dict[str, list[float]] = {kind: [] for kind in kinds}
    with private_tmux() as socket, temp_home() as home, tempfile.TemporaryDirectory() as work:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        to_started(env, work, [])  # the supervisor started, the caches warm
        for _ in range(args.n):
            for kind, extra in kinds.items():
                first, done = to_started(env, work, extra)
                started[kind].append(first)
                ended[kind].append(done)
    to_start = {kind: summary_ms(v) for kind, v in started.items()}
    to_exit = {kind: summary_ms(v) for kind, v in ended.items()}
    added = to_start["limits"]["p50_ms"] - to_start["plain"]["p50_ms"]
    ratio = to_exit["sandbox"]["p50_ms"] / to_exit["plain"]["p50_ms"]
    egress = throughput(5)
    emit(
        {
            "benchmark": "submit --wait of a `true` job: plain, with limits, sandboxed",
            "egress_100mb": egress,
            "to_started": to_start,
            "to_exit": to_exit,
            "limits_add_p50_ms": round(added, 1),
            "sandbox_exit_ratio_p50": round(ratio, 2),
            "targets": {"limits_add_ms": 20, "sandbox_ratio": 1.3},
            "meets_targets": added <= 20 and ratio <= 1.3,
        }
    )


if __name__ == "__main__":
    main()
