"""The live table behind the dashboard and `delegate top`, over a real state directory and its
SQLite bus: an event changes its job's row only, a registry change reloads only the records
that changed, and the table stays what `delegate ps` lists."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from delegate.adapters.bus import open_bus
from delegate.runtime.dashboard.live import CLOCK_FIELDS, LiveTable
from delegate.runtime.dashboard.snapshot import row_dict
from delegate.services import ps
from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.register import register_job
from delegate.services.state import State

from .helpers import retry_until


class Heard:
    """The deltas a listener was handed, on the table's thread."""

    def __init__(self) -> None:
        self.deltas: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, delta: dict[str, Any]) -> None:
        with self._lock:
            self.deltas.append(delta)

    def rows_of(self, job_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for d in self.deltas for r in d["rows"] if r["job_id"] == job_id]

    def job_ids(self) -> set[str]:
        with self._lock:
            return {r["job_id"] for d in self.deltas for r in d["rows"]}


@pytest.fixture
def live(state: State) -> Iterator[tuple[LiveTable, Heard]]:
    bus = open_bus(state.default_bus_url(), env=state.env)
    table = LiveTable(state, bus, recent=2)
    heard = Heard()
    table.start()
    table.listen(heard)
    yield table, heard
    table.stop()
    bus.close()


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Note each job whose audit tail the table reads (the real reader still does the work)."""
    reads: list[str] = []
    real = ps.last_event_detail

    def counting(state: State, job_id: str) -> tuple[str, str]:
        reads.append(job_id)
        return real(state, job_id)

    monkeypatch.setattr(ps, "last_event_detail", counting)
    return reads


def _without_clock(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in CLOCK_FIELDS and k != "tmux"}


def test_an_event_changes_its_jobs_row_only(state: State, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [register_job(state, command="true")[0].job_id for _ in range(5)]
    bus = open_bus(state.default_bus_url(), env=state.env)
    table = LiveTable(state, bus, recent=2)
    table.start()
    heard = Heard()
    table.listen(heard)
    try:
        reads = _counting_reads(monkeypatch)
        first, second = jobs[1], jobs[3]
        publish_event(state, first, "started", detail="go")
        row = retry_until(lambda: [r for r in heard.rows_of(first) if r["state"] == "running"])[0]
        assert row["last_event"] == "1 started" and row["last_detail"] == "go"
        publish_event(state, first, "progress", detail="halfway")
        retry_until(lambda: [r for r in heard.rows_of(first) if r["last_detail"] == "halfway"])
        publish_event(state, second, "started")
        retry_until(lambda: [r for r in heard.rows_of(second) if r["state"] == "running"])
        # only the two jobs' rows were handed on, and only their audit tails were read again
        assert heard.job_ids() == {first, second}
        assert set(reads) <= {first, second}
    finally:
        table.stop()
        bus.close()


def test_ended_jobs_move_below_and_the_table_stays_what_ps_lists(
    state: State, live: tuple[LiveTable, Heard]
) -> None:
    table, heard = live
    jobs = [register_job(state, command="true")[0].job_id for _ in range(4)]
    retry_until(lambda: set(jobs) <= {r["job_id"] for r in table.snapshot()["rows"]})
    for job_id in jobs[:3]:  # three end; only the latest two stay listed (recent=2)
        publish_event(state, job_id, "started")
        publish_event(state, job_id, "completed", detail="done")
    retry_until(lambda: any(jobs[0] in d.get("removed", ()) for d in list(heard.deltas)))

    def same_as_ps() -> bool:
        listing = ps.rows(state, limit=2)
        want = [_without_clock(row_dict(r, None)) for r in listing.rows]
        have = [_without_clock(r) for r in table.snapshot()["rows"]]
        for row in want + have:
            row.pop("cost_usd", None)
        return want == have

    retry_until(same_as_ps)
    states = {r["job_id"]: r["state"] for r in table.snapshot()["rows"]}
    waiting = state.registry.get(jobs[3]).status.value
    assert states == {jobs[1]: "completed", jobs[2]: "completed", jobs[3]: waiting}


def test_a_retried_job_leaves_for_its_next_attempt_as_in_ps(
    state: State, live: tuple[LiveTable, Heard]
) -> None:
    table, heard = live
    first = register_job(state, command="false")[0].job_id
    publish_event(state, first, "started")
    publish_event(state, first, "error", detail="exit 1")
    retry_until(lambda: any(r["state"] == "error" for r in heard.rows_of(first)))
    # the next attempt is registered first and linked from the first one after, as retry does
    second = register_job(state, command="false")[0].job_id
    state.registry.update(second, retry_of=first)
    retry_until(lambda: heard.rows_of(second))
    state.registry.update(first, retried_by=second)
    retry_until(lambda: any(first in d.get("removed", ()) for d in list(heard.deltas)))
    listed = {r.job_id for r in ps.rows(state, limit=2).rows}
    assert {r["job_id"] for r in table.snapshot()["rows"]} == listed == {second}
