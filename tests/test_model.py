from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.core.errors import IllegalTransition, InvalidJobId
from delegate.core.model import (
    Job,
    JobState,
    check_transition,
    is_legal_transition,
    validate_job_id,
)

Q, P, R, C, E, X = "queued", "pending", "running", "completed", "error", "cancelled"
# Written out from DESIGN section 4 and issue 8 (queued waits for a slot, then is launched
# as pending), independently of the table in delegate.core.model.
LEGAL = {(Q, P), (Q, E), (Q, X), (P, R), (P, E), (P, X), (R, C), (R, E), (R, X)}

states = st.sampled_from(list(JobState))


@given(states, states)
def test_transition_table_admits_exactly_the_legal_moves(current: JobState, target: JobState):
    legal = (current.value, target.value) in LEGAL
    assert is_legal_transition(current, target) is legal
    if legal:
        check_transition("0123abcd", current, target)
    else:
        with pytest.raises(IllegalTransition):
            check_transition("0123abcd", current, target)


def test_every_pair_is_covered():
    pairs = {(a.value, b.value) for a, b in itertools.product(JobState, JobState)}
    legal = {p for p in pairs if is_legal_transition(JobState(p[0]), JobState(p[1]))}
    assert legal == LEGAL
    for terminal in (C, E, X):
        assert JobState(terminal).terminal
        assert not any(is_legal_transition(JobState(terminal), s) for s in JobState)


@pytest.mark.parametrize(
    "bad",
    [
        "../x",
        "ABCDEF12",
        "",
        "0123456789",
        "012345678",
        "0123abc",
        "0123abcg",
        "0123abc\n",
        "/etc/pas",
        "..",
        None,
        12345678,
    ],
    ids=[
        "dotdot",
        "upper",
        "empty",
        "ten",
        "nine",
        "seven",
        "non-hex",
        "newline",
        "slash",
        "parent",
        "none",
        "int",
    ],
)
def test_bad_job_ids_are_refused(bad):
    with pytest.raises(InvalidJobId):
        validate_job_id(bad)


@given(st.text(max_size=12))
def test_only_8_lowercase_hex_ids_pass(text: str):
    ok = len(text) == 8 and all(c in "0123456789abcdef" for c in text)
    if ok:
        assert validate_job_id(text) == text
    else:
        with pytest.raises(InvalidJobId):
            validate_job_id(text)


def _record(**overrides):
    base = {
        "job_id": "0123abcd",
        "status": "pending",
        "created_at": "t",
        "updated_at": "t",
        "auth_token": "tok",
    }
    base.update(overrides)
    return base


def test_job_round_trips_through_dict():
    job = Job.from_dict(_record(command="make", last_seq=4, bus={"url": "sqlite:///x"}))
    again = Job.from_dict(job.to_dict())
    assert again == job
    assert "auth_token" not in job.public_dict()


def test_worktree_field_is_optional_and_round_trips():
    old = Job.from_dict(_record())  # a record written before worktrees existed
    assert old.worktree is None
    entry = {"repo": "/r", "base": "abc", "base_ref": "main", "branch": "delegate/x"}
    job = Job.from_dict(_record(worktree={**entry, "path": "/w", "created": True}))
    assert Job.from_dict(job.to_dict()) == job
    assert job.to_dict()["worktree"] is not job.worktree  # a copy, never the record's own


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ([], "not a JSON object"),
        (_record(status="done"), "unknown status"),
        ({"job_id": "0123abcd"}, "missing fields"),
        (_record(job_id="../etc"), "invalid job id"),
        (_record(last_seq=-1), "last_seq"),
        (_record(schema_version=2), "schema_version"),
        (_record(worktree="/tmp/x"), "worktree is not a JSON object"),
    ],
    ids=["not-object", "bad-status", "missing", "bad-id", "negative-seq", "schema", "worktree"],
)
def test_broken_records_are_described(record, message):
    with pytest.raises(ValueError, match=message):
        Job.from_dict(record)
