"""The dashboard in a real browser: first paint with many open jobs over a long history, and
the time from an event's publish to its row changing in the page.

A real `delegate dashboard` serves a state dir holding `--open` open jobs and `--history`
finished ones; headless Chromium (Playwright) loads it. First paint: from navigation (with the
token) to every open row in the table. Latency: this process publishes `progress` events with
the service API; a MutationObserver in the page notes when the row shows each one.
Goals (issue 21): first paint <= 1 s; event -> visible p50 <= 100 ms, p99 <= 300 ms.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import time

from _common import (
    bench_env,
    delegate_exe,
    emit,
    precompile,
    summary_ms,
    temp_home,
    write_finished_history,
)

CHROMIUM = "/usr/bin/chromium"
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
        page.wait_for_function(
            f"document.querySelectorAll('#jobs tbody tr').length >= {rows}", timeout=60_000
        )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--open", type=int, default=1000, help="open jobs in the table")
    parser.add_argument("--history", type=int, default=100_000, help="finished jobs on disk")
    parser.add_argument("--events", type=int, default=200, help="events timed for latency")
    parser.add_argument("--paints", type=int, default=5)
    args = parser.parse_args()
    precompile()
    from playwright.sync_api import sync_playwright

    with temp_home() as home:
        env = bench_env(home)
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
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                paints = _first_paints(browser, url, args.open, args.paints)
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(url)
                page.wait_for_function(
                    f"document.querySelectorAll('#jobs tbody tr').length >= {args.open}"
                )
                latencies = _latencies(page, state, live, args.events)
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
            "goals_ms": {"first_paint": 1000, "event_p50": 100, "event_p99": 300},
            "not_run": ["200 events/s for a minute", "memory over 10 minutes at 20 events/s"],
        }
    )


if __name__ == "__main__":
    main()
