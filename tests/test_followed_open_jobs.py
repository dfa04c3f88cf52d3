"""The monitor's view of the open jobs follows changes.log: after one full read it re-reads only
the records written since, and reads everything again when the log starts over."""

from __future__ import annotations

from delegate.adapters import registry as registry_module
from delegate.core.model import JobState
from delegate.services.state import State


def _ids(jobs) -> list[str]:
    return [j.job_id for j in jobs]


def test_the_followed_view_matches_the_open_index_through_changes(state: State):
    reg = state.registry
    first = [reg.register(command=f"c{n}")[0].job_id for n in range(3)]
    assert _ids(reg.followed_open_jobs()) == _ids(reg.open_jobs()) == first
    added = reg.register(command="late")[0].job_id
    reg.transition(first[0], JobState.RUNNING)
    reg.record_end(first[1], JobState.ERROR, reason="boom")
    view = reg.followed_open_jobs()
    assert _ids(view) == _ids(reg.open_jobs()) == [first[0], first[2], added]
    assert {j.job_id: j.status for j in view}[first[0]] is JobState.RUNNING
    # another process's registry writes the same log
    other = State.open(env={"DELEGATE_HOME": str(state.layout.home)}).registry
    other.record_end(first[0], JobState.COMPLETED)
    assert _ids(reg.followed_open_jobs()) == [first[2], added]


def test_a_log_that_starts_over_is_read_in_full(state: State, monkeypatch):
    reg = state.registry
    ids = [reg.register(command=f"c{n}")[0].job_id for n in range(2)]
    assert _ids(reg.followed_open_jobs()) == ids
    monkeypatch.setattr(registry_module, "CHANGES_MAX", 1)  # the next write replaces the log
    reg.record_end(ids[0], JobState.CANCELLED)
    later = reg.register(command="after the new log")[0].job_id
    assert _ids(reg.followed_open_jobs()) == [ids[1], later] == _ids(reg.open_jobs())
