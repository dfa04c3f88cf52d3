"""The report counts attempts and retried jobs (issue 20, item 1), on a real local SparkSession.

The job records and their logs are written by the toolkit's own registry and audit log (a real
state directory): each job registered, started and ended through `end_job`, and each retry
linked as `delegate retry` links it (the earlier attempt's `retried_by` and its `retried` audit
line naming the next attempt). The expected counts are worked out here by hand.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from delegate.core.model import JobState
from delegate.core.retry import RETRY_KEY_PREFIX
from delegate.report import figures
from delegate.report.retries import chains, count
from delegate.report.summaries import summarize
from delegate.report.text import print_report
from delegate.services.jobs.finish import end_job
from delegate.services.jobs.retry import RETRIED
from delegate.services.report import run_report
from delegate.services.state import State

from .test_report_incremental import _from_scratch

GENERATED = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _attempt(state: State, agent: str, ends: str, previous: str | None = None) -> str:
    """One attempt run to its end (`completed`, or `error`); after `previous` when given,
    linked to it as services/jobs/retry links a new attempt."""
    key = f"{RETRY_KEY_PREFIX}{previous}" if previous else None
    job, created = state.registry.register(agent=agent, workdir="/tmp", idempotency_key=key)
    assert created
    if previous is not None:
        before = state.registry.get(previous)
        state.registry.update(job.job_id, attempt=(before.attempt or 1) + 1, retry_of=previous)
        state.registry.update(previous, stamp=False, retried_by=job.job_id)
        state.audit.append(previous, RETRIED, attempt=job.job_id, how="retried by hand")
    state.registry.transition(job.job_id, JobState.RUNNING)
    if ends == "completed":
        end_job(state, job.job_id, JobState.COMPLETED)
    else:
        end_job(state, job.job_id, JobState.ERROR, reason="agent_exited: exit status 1")
    return job.job_id


def _chain(state: State, agent: str, *ends: str) -> list[str]:
    ids = [_attempt(state, agent, ends[0])]
    for outcome in ends[1:]:
        ids.append(_attempt(state, agent, outcome, previous=ids[-1]))
    return ids


@pytest.fixture
def history(state: State) -> dict[str, list[str]]:
    """`flaky` fails twice then succeeds, `hopeless` fails on all three attempts, `once`
    completes and is never retried."""
    return {
        "flaky": _chain(state, "shell", "error", "error", "completed"),
        "hopeless": _chain(state, "claude", "error", "error", "error"),
        "once": _chain(state, "shell", "completed"),
    }


def _json_report(state: State, out: Path) -> dict[str, Any]:
    result = run_report(state, master="local[1]", fmt="json", out=out)
    [path] = result.written
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _retry_figures(row: dict[str, Any]) -> tuple[int, int, int, int]:
    return (
        row["attempts"],
        row["retried"],
        row["retried_then_succeeded"],
        row["retried_still_failed"],
    )


def test_the_report_counts_attempts_and_retried_then_succeeded(
    spark, state: State, history: dict[str, list[str]], tmp_path: Path, capsys
):
    assert figures.RETRIED == RETRIED  # the audit line the report reads is the one retry writes
    data = _json_report(state, tmp_path / "out")
    assert _retry_figures(data["totals"]) == (7, 2, 1, 1)
    assert data["totals"]["jobs"] == 7 and data["totals"]["failed"] == 5
    agents = {row["agent"]: row for row in data["agents"]}
    assert _retry_figures(agents["shell"]) == (4, 1, 1, 0)
    assert _retry_figures(agents["claude"]) == (3, 1, 0, 1)
    jobs = {job["job_id"]: job for job in data["jobs"]}
    for ids in history.values():
        assert [jobs[i]["attempt"] for i in ids] == list(range(1, len(ids) + 1))
        assert [jobs[i]["retry_of"] for i in ids] == [None, *ids[:-1]]
        assert [jobs[i]["retried_by"] for i in ids] == [*ids[1:], None]

    report = figures.Report(**{name: data[name] for name in figures.Report._fields})
    print_report(report, width=100, generated_at=GENERATED, tz=UTC)
    out = capsys.readouterr().out
    assert "retries: 7 attempts; 2 jobs retried: 1 succeeded after retrying, 1 still failed" in out
    table = out.split("retried jobs per agent", 1)[1].split("\n\n", 1)[0]
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:]}
    assert rows == {"claude": ["3", "1", "0", "1"], "shell": ["4", "1", "1", "0"]}

    [page] = run_report(state, master="local[1]", fmt="html", out=tmp_path / "page").written
    html = page.read_text()
    assert "7 attempts; 2 jobs retried: 1 succeeded after retrying, 1 still failed" in html
    assert 'id="retries-table"' in html


def test_an_incremental_report_counts_a_new_attempt(
    spark, state: State, history: dict[str, list[str]], tmp_path: Path
):
    first = _json_report(state, tmp_path / "first")
    assert _retry_figures(first["totals"]) == (7, 2, 1, 1)
    hopeless = history["hopeless"]
    fourth = _attempt(state, "claude", "completed", previous=hopeless[-1])

    store = state.layout.home / "analytics"
    again = summarize(spark, state.layout.logs, store)
    assert sorted(again.read) == sorted([hopeless[-1], fourth])  # the others come from Parquet
    second = _json_report(state, tmp_path / "second")
    assert _retry_figures(second["totals"]) == (8, 2, 2, 0)
    claude = next(row for row in second["agents"] if row["agent"] == "claude")
    assert _retry_figures(claude) == (4, 1, 1, 0)
    assert next(j for j in second["jobs"] if j["job_id"] == fourth)["attempt"] == 4
    scratch = _from_scratch(spark, state.layout.logs)
    assert scratch["totals"] == second["totals"]  # a report from scratch counts the same
    assert scratch["agents"] == second["agents"]


def test_a_history_without_retries_says_so(spark, state: State, tmp_path: Path, capsys):
    _chain(state, "shell", "completed")
    _chain(state, "shell", "error")
    data = _json_report(state, tmp_path / "out")
    assert _retry_figures(data["totals"]) == (2, 0, 0, 0)
    report = figures.Report(**{name: data[name] for name in figures.Report._fields})
    print_report(report, width=100, generated_at=GENERATED, tz=UTC)
    out = capsys.readouterr().out
    assert "retries: 2 attempts; no job was retried" in out
    assert "retried jobs per agent" not in out


def _job(job_id: str, status: str, retried_by: str | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "status": status, "agent": "a", "retried_by": retried_by}


def test_chains_follow_links_once_and_count_by_the_final_attempt():
    jobs = [
        _job("a1", "error", "a2"),
        _job("a2", "cancelled", "a3"),
        _job("a3", "completed"),
        _job("b1", "completed", "b2"),  # a completed job retried by hand, completed again
        _job("b2", "completed"),
        _job("c1", "error", "gone"),  # its next attempt is not in the report
        _job("d1", "error", "d2"),
        _job("d2", "running"),
        _job("r1", "error", "r2"),  # a ring: no first attempt
        _job("r2", "error", "r1"),
    ]
    found = chains(jobs)
    assert [[j["job_id"] for j in chain] for chain in found] == [
        ["a1", "a2", "a3"],
        ["b1", "b2"],
        ["c1"],
        ["d1", "d2"],
        ["r1"],
        ["r2"],
    ]
    assert count(found) == {
        "attempts": 10,
        "retried": 3,
        "retried_then_succeeded": 1,  # not b: no earlier attempt of it ended otherwise
        "retried_still_failed": 0,
    }


def test_the_report_gives_cost_and_tokens_per_queue_group(
    spark, state: State, tmp_path: Path, capsys
):
    """Issue 22's "the report carries tokens and cost per job and per group": a job's queue
    group reaches its status.json, and the report sums per group as it does per agent."""
    spent = {"night": [(0.5, 100), (0.25, 40)], "day": [(1.0, 10)]}
    for group, costs in spent.items():
        for cost, tokens in costs:
            job, _ = state.registry.register(agent="shell", workdir="/tmp")
            state.registry.update(job.job_id, group=group, cost_usd=cost, tokens_in=tokens)
            state.registry.transition(job.job_id, JobState.RUNNING)
            end_job(state, job.job_id, JobState.COMPLETED)
    _attempt(state, "shell", "completed")  # no group: in no group's row
    data = _json_report(state, tmp_path / "out")
    groups = {row["group"]: row for row in data["groups"]}
    assert set(groups) == {"day", "night"}
    assert (groups["night"]["jobs"], groups["night"]["cost_usd"]) == (2, 0.75)
    assert (groups["night"]["tokens_in"], groups["day"]["tokens_in"]) == (140, 10)
    by_job = {job["job_id"]: job for job in data["jobs"]}
    assert sorted(str(job["group"]) for job in by_job.values()) == ["None", "day", "night", "night"]
    [page] = run_report(state, master="local[1]", fmt="html", out=tmp_path / "page").written
    assert 'id="groups-table"' in page.read_text()
    report = figures.Report(**{name: data[name] for name in figures.Report._fields})
    print_report(report, width=100, generated_at=GENERATED, tz=UTC)
    table = capsys.readouterr().out.split("per queue group", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[:2] for line in table.splitlines()[2:]] == [["day", "1"], ["night", "2"]]
