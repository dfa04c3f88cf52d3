"""The dashboard in headless Chromium: an event changes its job's row in place, with no reload
and no other row rebuilt. (How soon is bench/dashboard.py's to say: `started_to_running`.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.register import register_job

from .browser import CHROMIUM, CHROMIUM_ARGS
from .test_dashboard import open_state, row_state, start_server, stop_server

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("sse_starlette")

# Every row node the table gains from now on: a row changed in place is one new node for its
# job; a rebuilt table would add every row again.
OBSERVE = """() => {
  window.added = [];
  new MutationObserver((changes) => {
    for (const change of changes) for (const node of change.addedNodes) {
      if (node.dataset && node.dataset.job) window.added.push(node.dataset.job);
    }
  }).observe(document.querySelector('#jobs tbody'), {childList: true});
  window.notReloaded = true;
}"""


@pytest.mark.timeout(120)
def test_an_event_changes_its_row_in_place(home: Path, tmux_env: dict[str, str]):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    playwright = pytest.importorskip("playwright.sync_api")
    state = open_state(home)
    jobs = [register_job(state, command=f"echo {i}")[0].job_id for i in range(5)]
    job = jobs[2]
    server = start_server(home, tmux_env)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(server.url)
            page.wait_for_selector("#jobs tbody tr:nth-child(5)")
            assert row_state(page, job) == "pending"
            page.evaluate(OBSERVE)

            publish_event(state, job, "started", detail="on its way")
            row = f'#jobs tr[data-job="{job}"]'
            page.wait_for_selector(f'{row}[data-state="running"]', timeout=10_000)
            assert "started" in page.inner_text(f"{row} td.event")
            publish_event(state, job, "progress", detail="half done")
            page.wait_for_selector(f'{row} td.event:has-text("half done")', timeout=10_000)

            assert page.evaluate("window.notReloaded") is True
            added = page.evaluate("window.added")
            assert set(added) == {job}  # only its row changed; the others stayed as they were
            assert [row_state(page, j) for j in jobs if j != job] == ["pending"] * 4
            browser.close()
    finally:
        stop_server(server)
