"""The documentation's pictures come from a real run (scripts/screenshots.py, which `make docs`
runs): taken here into a tmp dir, they must show the jobs that run submitted, so a broken
capture fails the suite rather than the site."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from .browser import CHROMIUM
from .test_docs import load_script

screenshots = load_script("screenshots")


@pytest.mark.timeout(180)
def test_the_top_picture_shows_the_jobs_of_a_real_run(tmp_path: Path):
    pytest.importorskip("pyte")
    run = screenshots.take(tmp_path / "images", tmp_path, only=("top",))
    svg = (tmp_path / "images" / "top.svg").read_text()
    assert svg.startswith("<svg") and "delegate&#160;top" in svg  # rich keeps spaces so
    assert "STATE" in svg and "AGENT" in svg
    assert len(run.jobs) == 5
    for job_id, state in run.jobs.items():
        assert job_id in svg, f"job {job_id} ({state}) is not in the picture"
        assert state in svg
    assert "tests&#160;green" in svg  # the running job's progress, as it reported it


@pytest.mark.timeout(180)
def test_the_dashboard_picture_is_taken_once_every_job_is_on_the_page(tmp_path: Path):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright.sync_api")
    pytest.importorskip("starlette")
    screenshots.take(tmp_path / "images", tmp_path, only=("dashboard",))
    png = (tmp_path / "images" / "dashboard.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert (width, height) == (1280, 360)
