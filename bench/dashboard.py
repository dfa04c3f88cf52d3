"""The dashboard in a real browser: first paint with many open jobs over a long history, and
the time from an event's publish to its row changing in the page.

A real `delegate dashboard` serves a state dir holding `--open` open jobs and `--history`
finished ones; headless Chromium (Playwright) loads it. First paint: from navigation (with the
token) to every open row in the table. Latency: this process publishes `progress` events with
the service API; a MutationObserver in the page notes when the row shows each one.
Goals (issue 21): first paint <= 1 s; event -> visible p50 <= 100 ms, p99 <= 300 ms.

`--starts N` (25): real jobs, each `delegate submit --no-wait` of a short command on a private
tmux server; for each, the time from its `started` event (the envelope's own timestamp, set
before it is sent) to its row in the page saying `running`. Goal (issue 33): p50 <= 300 ms.

`--rate-seconds S`: events at `--rate` per second (200) for S seconds from several publisher
processes; the page keeps up when every event's row shows it within 300 ms.
`--memory-minutes M`: events at 20 per second for M minutes (the goal says 10) while the
server's resident memory is sampled; flat means within +-10% of the first sample.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

from _common import (
    bench_env,
    delegate_exe,
    emit,
    precompile,
    private_tmux,
    summary_ms,
    temp_home,
    write_finished_history,
)

CHROMIUM = "chromium"  # the system's (Debian's package), found on PATH
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
]

OBSERVE = """() => {
  window.seen = {};
  new MutationObserver((changes) => {
    const now = Date.now();
    for (const change of changes) for (const node of change.addedNodes) {
      if (!node.dataset || !node.dataset.job) continue;
      const cell = node.querySelector('td.event');
      const key = node.dataset.job + ' ' + (cell ? cell.textContent : '');
      if (!(key in window.seen)) window.seen[key] = now;
    }
  }).observe(document.querySelector('#jobs tbody'), {childList: true});
}"""


RUNNING = """() => {
  window.ran = {};
  new MutationObserver((changes) => {
    const now = Date.now();
    for (const change of changes) for (const node of change.addedNodes) {
      if (!node.dataset || !node.dataset.job || node.dataset.state !== 'running') continue;
      if (!(node.dataset.job in window.ran)) window.ran[node.dataset.job] = now;
    }
  }).observe(document.querySelector('#jobs tbody'), {childList: true});
}"""


def _started_at(state, job_id: str) -> float | None:
    """When the job's `started` envelope was made (its own timestamp), from its audit log."""
    try:
        lines = state.audit.events_path(job_id).read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        record = json.loads(line)
        if record.get("event") == "started" and record.get("envelope"):
            stamp = record["envelope"]["timestamp"].replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    return None


def _starts(page, state, env: dict[str, str], count: int) -> dict:
    """`count` real submits, one at a time: each `started` event -> its row says running."""
    page.evaluate(RUNNING)
    jobs = []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(count):
            argv = [delegate_exe(), "submit", "--cmd", "sleep 1", "-p", "x", "-C", work]
            done = subprocess.run(
                [*argv, "--no-wait"], env=env, capture_output=True, text=True, check=True
            )
            jobs.append(done.stdout.strip())
            time.sleep(random.uniform(0.6, 1.0))
        time.sleep(1.5)
    ran = page.evaluate("window.ran")
    late, missed = [], 0
    for job_id in jobs:
        at = _started_at(state, job_id)
        if at is None or job_id not in ran:
            missed += 1
        else:
            late.append(max(0.0, ran[job_id] / 1000 - at))
    return {**summary_ms(late), "missed": missed}


def _start(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [delegate_exe(), "dashboard", "--port", "0"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def _first_paints(browser, url: str, rows: int, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        started = time.perf_counter()
        page.goto(url)
        # a selector, not a polled predicate: the page's policy allows no eval
        page.wait_for_selector(f"#jobs tbody tr:nth-child({rows})", timeout=60_000)
        times.append(time.perf_counter() - started)
        page.close()
    return times


def _latencies(page, state, jobs: list[str], events: int) -> list[float]:
    from delegate.services.jobs.publish import publish_event

    page.evaluate(OBSERVE)
    sent: list[tuple[str, float]] = []
    for i in range(events):
        job_id = random.choice(jobs)
        detail = f"step {i}"
        at = time.time()
        envelope = publish_event(state, job_id, "progress", detail=detail)
        sent.append((f"{job_id} {envelope['seq']} progress · {detail}", at))
        time.sleep(random.uniform(0.05, 0.15))
    time.sleep(1.0)
    seen = page.evaluate("window.seen")
    return [max(0.0, seen[key] / 1000 - at) for key, at in sent if key in seen] + [
        float("inf") for key, _ in sent if key not in seen
    ]


def _publisher(home: str, jobs: list[str], rate: float, seconds: float, tag: str) -> list:
    """One publisher process: `rate` progress events a second over `jobs` for `seconds`;
    returns (what the row shows, when the publish call returned) for each."""
    from delegate.services.jobs.publish import publish_event
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": home})
    sent = []
    start = time.monotonic()
    n = 0
    while (due := start + n / rate) < start + seconds:
        time.sleep(max(0.0, due - time.monotonic()))
        job_id = jobs[n % len(jobs)]
        detail = f"{tag} {n}"
        envelope = publish_event(state, job_id, "progress", detail=detail)
        sent.append((f"{job_id} {envelope['seq']} progress · {detail}", time.time()))
        n += 1
    return sent


def _flood(page, home: Path, jobs: list[str], rate: float, seconds: float, workers: int) -> dict:
    """Publish at `rate`/s for `seconds` from `workers` processes (each with its own jobs) and
    say how many events the page showed, how soon."""
    page.evaluate(OBSERVE)
    share = [jobs[i::workers] for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers) as pool:
        started = time.monotonic()
        results = pool.starmap(
            _publisher,
            [(str(home), mine, rate / workers, seconds, f"w{i}") for i, mine in enumerate(share)],
        )
        took = time.monotonic() - started
    time.sleep(1.0)
    seen = page.evaluate("window.seen")
    sent = [pair for result in results for pair in result]
    late = [max(0.0, seen[key] / 1000 - at) for key, at in sent if key in seen]
    missed = sum(1 for key, _ in sent if key not in seen)
    return {
        "events": len(sent),
        "achieved_per_s": round(len(sent) / took, 1),
        "asked_per_s": rate,
        "visible": summary_ms(late),
        "missed": missed,
        "within_300_ms": sum(1 for x in late if x <= 0.3),
    }


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _memory(page, home: Path, jobs: list[str], pid: int, minutes: float) -> dict:
    """Events at 20/s for `minutes` while the server's RSS is sampled every 10 s."""
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10.0):
            samples.append(_rss_kb(pid))

    samples.append(_rss_kb(pid))
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    flood = _flood(page, home, jobs, 20.0, minutes * 60, 2)
    done.set()
    sampler.join()
    samples.append(_rss_kb(pid))
    first = samples[0]
    return {
        "minutes": minutes,
        "rss_kb_first": first,
        "rss_kb_last": samples[-1],
        "rss_kb_max": max(samples),
        "change_pct": round(100 * (samples[-1] - first) / first, 1),
        "samples": len(samples),
        "events": flood,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--open", type=int, default=1000, help="open jobs in the table")
    parser.add_argument("--history", type=int, default=100_000, help="finished jobs on disk")
    parser.add_argument("--events", type=int, default=200, help="events timed for latency")
    parser.add_argument("--paints", type=int, default=5)
    parser.add_argument("--starts", type=int, default=25, help="real jobs timed to running")
    parser.add_argument("--rate", type=float, default=200.0, help="events/s of --rate-seconds")
    parser.add_argument("--rate-seconds", type=float, default=0.0, help="0: skip (goal: 60)")
    parser.add_argument("--workers", type=int, default=4, help="publisher processes")
    parser.add_argument("--memory-minutes", type=float, default=0.0, help="0: skip (goal: 10)")
    args = parser.parse_args()
    chromium = shutil.which(CHROMIUM)
    if chromium is None:  # `make demo` installs no browser; `make test` does
        sys.exit("bench/dashboard.py: no chromium on PATH: apt-get install chromium")
    precompile()
    from playwright.sync_api import sync_playwright

    with temp_home() as home, private_tmux() as socket:
        env = bench_env(home, DELEGATE_TMUX_SOCKET=socket)
        os.environ.pop("DELEGATE_BUS", None)
        from delegate.services.jobs.publish import publish_event
        from delegate.services.jobs.register import register_job
        from delegate.services.state import State

        state = State.open(env={"DELEGATE_HOME": str(home)})
        write_finished_history(home, args.history)
        jobs = [register_job(state, command="true")[0].job_id for _ in range(args.open)]
        live = jobs[:20]
        for job_id in live:
            publish_event(state, job_id, "started")
        proc, url = _start(env)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                paints = _first_paints(browser, url, args.open, args.paints)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url)
                page.wait_for_selector(f"#jobs tbody tr:nth-child({args.open})")
                latencies = _latencies(page, state, live, args.events)
                starts = _starts(page, state, env, args.starts) if args.starts else None
                flood = memory = None
                if args.rate_seconds:
                    flood = _flood(page, home, live, args.rate, args.rate_seconds, args.workers)
                if args.memory_minutes:
                    memory = _memory(page, home, live, proc.pid, args.memory_minutes)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    missed = sum(1 for x in latencies if x == float("inf"))
    found = [x for x in latencies if x != float("inf")]
    emit(
        {
            "benchmark": "dashboard",
            "open_jobs": args.open,
            "history_jobs": args.history,
            "first_paint": summary_ms(paints),
            "event_to_visible": {**summary_ms(found), "missed": missed},
            "started_to_running": starts,
            "goals_ms": {
                "first_paint": 1000,
                "event_p50": 100,
                "event_p99": 300,
                "started_to_running_p50": 300,
            },
            "flood": flood,
            "memory": memory,
            "not_run": [
                name
                for name, ran in (
                    ("started -> running", starts),
                    ("events at --rate", flood),
                    ("memory at 20/s", memory),
                )
                if ran is None
            ],
        }
    )


if __name__ == "__main__":
    main()
