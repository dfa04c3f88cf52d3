"""Reports keep per-job log summaries and read only the logs that changed since the last one.

Each incremental report is compared with a report from scratch over the same history (the
whole JSON the report prints) and with the plain-Python figures of tests/test_report.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from delegate.report.common import to_json
from delegate.report.figures import collect, compute, frames_from_summary, read_ndjson, read_status
from delegate.report.generator import Spec, generate
from delegate.report.summaries import MANIFEST, summarize

from .test_report import _line, assert_same, plain_report


def _from_scratch(spark, logs: Path) -> dict[str, Any]:
    lines, malformed = read_ndjson(spark, [str(p) for p in sorted(logs.glob("*/events.ndjson"))])
    status = read_status(spark, str(logs / "*" / "status.json"))
    return to_json(compute(lines, status, malformed=malformed))


def _incremental(spark, logs: Path, store: Path) -> tuple[dict[str, Any], list[str]]:
    summaries = summarize(spark, logs, store)
    status = read_status(spark, str(logs / "*" / "status.json"))
    frames = frames_from_summary(summaries.frame, status)
    return to_json(collect(frames, malformed=summaries.malformed)), summaries.read


def _add_jobs(logs: Path, work: Path, jobs: int, seed: int) -> set[str]:
    generate(work, Spec(jobs=jobs, seed=seed, p_malformed_line=0.05))
    for folder in work.iterdir():
        shutil.move(str(folder), logs / folder.name)
    return {folder.name for folder in logs.iterdir()}


def test_second_report_reads_only_changed_logs_and_equals_from_scratch(spark, tmp_path: Path):
    logs, store = tmp_path / "logs", tmp_path / "analytics"
    generate(logs, Spec(jobs=30, seed=3, p_malformed_line=0.05, p_duplicate_line=0.05))
    everything = sorted(p.name for p in logs.iterdir())

    first, read = _incremental(spark, logs, store)
    assert read == everything
    assert first == _from_scratch(spark, logs)
    manifest = json.loads((store / MANIFEST).read_text())
    assert sorted(manifest["files"]) == everything

    again, read = _incremental(spark, logs, store)
    assert read == [] and again == first  # nothing changed: no log is read

    # new jobs arrive, an old job's log grows (a malformed line too), and one log goes away
    before = set(everything)
    now = _add_jobs(logs, tmp_path / "more", jobs=4, seed=99)
    grown = logs / everything[0] / "events.ndjson"
    with grown.open("a") as handle:
        handle.write(_line("2026-11-25T00:00:00.000000Z", "rejected", everything[0], reason="x"))
        handle.write("{not json\n")
    shutil.rmtree(logs / everything[1])
    third, read = _incremental(spark, logs, store)
    assert sorted(read) == sorted((now - before) | {everything[0]})
    assert third == _from_scratch(spark, logs)
    status = read_status(spark, str(logs / "*" / "status.json"))
    summaries = summarize(spark, logs, store)
    assert summaries.read == []
    report = collect(frames_from_summary(summaries.frame, status), malformed=summaries.malformed)
    assert_same(report, plain_report(logs))


def test_a_log_with_another_jobs_lines_is_never_kept(spark, tmp_path: Path):
    logs, store = tmp_path / "logs", tmp_path / "analytics"
    generate(logs, Spec(jobs=6, seed=8))
    _incremental(spark, logs, store)
    first, second = sorted(p.name for p in logs.iterdir())[:2]
    with (logs / first / "events.ndjson").open("a") as handle:
        handle.write(_line("2026-11-25T00:00:00.000000Z", "rejected", second, reason="x"))
    report, read = _incremental(spark, logs, store)
    assert report == _from_scratch(spark, logs)
    assert len(read) == 6  # summarized from scratch, and not kept for next time
    assert not (store / MANIFEST).exists()
