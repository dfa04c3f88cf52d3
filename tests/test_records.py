"""core.records.NamedTuple builds what typing.NamedTuple builds, without importing typing."""

from __future__ import annotations

import pickle
import subprocess
import sys
import typing

import pytest

from delegate.core import records
from delegate.core.model import Job, JobState, Pane


def _pair(base: type) -> type:
    class Row(base):  # type: ignore[misc,valid-type]
        """A row."""

        name: str
        size: int
        tags: tuple[str, ...] = ()
        note: str | None = None

        def label(self) -> str:
            return f"{self.name}:{self.size}"

        @property
        def tagged(self) -> bool:
            return bool(self.tags)

    return Row


def test_a_record_behaves_as_typings_named_tuple():
    ours, theirs = _pair(records.NamedTuple), _pair(typing.NamedTuple)
    for cls in (ours, theirs):
        row = cls("a", 2)
        assert row == ("a", 2, (), None) and row.label() == "a:2" and not row.tagged
        assert row._replace(tags=("x",)).tagged
        assert row._asdict() == {"name": "a", "size": 2, "tags": (), "note": None}
        assert cls._make(["b", 3, (), None]) == cls("b", 3)
    assert ours._fields == theirs._fields
    assert ours._field_defaults == theirs._field_defaults
    assert ours.__doc__ == theirs.__doc__ == "A row."
    assert repr(ours("a", 2)) == repr(theirs("a", 2))
    assert ours.__mro__[1:] == theirs.__mro__[1:] == (tuple, object)
    assert list(ours.__annotations__) == ["name", "size", "tags", "note"]


def _record(name: str, **namespace: object) -> type:
    """What `class NAME(records.NamedTuple): ...` does with this class body."""
    body = {"__module__": __name__, "__qualname__": name, **namespace}
    return type(records.NamedTuple)(name, (records.NamedTuple,), body)


def test_what_typing_refuses_is_refused():
    assert _record("Fine", __annotations__={"a": "int", "b": "int"}, b=0)("x").b == 0
    with pytest.raises(TypeError):  # a field without a default after one with
        _record("Bad", __annotations__={"a": "int", "b": "int"}, a=0)
    with pytest.raises(AttributeError):  # a namedtuple's own method replaced
        _record("Worse", __annotations__={"a": "int"}, _replace=lambda self: self)


def test_the_records_of_the_model_pickle_and_compare_as_before():
    job = Job("abcd1234", JobState.RUNNING, "t0", "t1", "token", last_seq=3)
    assert pickle.loads(pickle.dumps(job)) == job
    assert Job.from_dict(job.to_dict()) == job
    assert Pane("s", "%1", 1, False, None, "abcd1234").exit_signal is None


def test_the_model_and_protocol_load_without_typing():
    probe = (
        "import sys; import delegate.core.protocol, delegate.adapters.bus.base;"
        " print('typing' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr
