"""The hot path's JSON agrees with the standard library's, document for document."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.core import fastjson as _fastjson

documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_dumps_and_loads_agree_with_json(value):
    assert _fastjson.dumps(value) == json.dumps(value)
    text = json.dumps(value, ensure_ascii=False)
    assert _fastjson.loads(text) == json.loads(text)
    assert _fastjson.loads(text.encode("utf-8")) == json.loads(text)
    assert _fastjson.loads(f"  \n{text}\t ") == value


@settings(max_examples=300, deadline=None)
@given(
    documents,
    st.booleans(),
    st.booleans(),
    st.sampled_from([(", ", ": "), (",", ":"), (",", ": ")]),
)
def test_dumps_with_options_agrees_with_json(value, sort_keys, ensure_ascii, separators):
    options = {"sort_keys": sort_keys, "ensure_ascii": ensure_ascii, "separators": separators}
    assert _fastjson.dumps(value, **options) == json.dumps(value, **options)


@settings(max_examples=300, deadline=None)
@given(documents, st.booleans(), st.booleans(), st.sampled_from([None, 0, 1, 2, 4]))
def test_dumps_with_an_indent_agrees_with_json(value, sort_keys, ensure_ascii, indent):
    """As the registry writes its records: one item a line, json's separators for an indent."""
    options = {"sort_keys": sort_keys, "ensure_ascii": ensure_ascii, "indent": indent}
    assert _fastjson.dumps(value, **options) == json.dumps(value, **options)
    nested = {"b": [value, {}, []], "a": {"c": value, "d": ()}}
    assert _fastjson.dumps(nested, **options) == json.dumps(nested, **options)


@pytest.mark.parametrize("text", ["", "{", "not json", '{"a": 1} extra', "[1,]", '"\\x"'])
def test_bad_documents_raise_what_json_raises(text):
    with pytest.raises(json.JSONDecodeError):
        _fastjson.loads(text)


def test_what_it_does_not_encode_goes_to_json():
    assert _fastjson.dumps({1: "x"}) == json.dumps({1: "x"})
    mixed = {"b": 1, 2: "x", "a": None}  # json sorts and converts non-str keys its own way
    assert _fastjson.dumps(mixed, sort_keys=False) == json.dumps(mixed)
    assert _fastjson.dumps(float("nan")) == "NaN"
    assert _fastjson.dumps({"a": [1, {2: 3}]}, indent=2) == json.dumps({"a": [1, {2: 3}]}, indent=2)
    assert math.isinf(_fastjson.loads("Infinity"))


def test_print_line_is_one_json_line_on_stdout(capsys):
    _fastjson.print_line({"seq": 1, "event": "started", "detail": "é"})
    _fastjson.print_line(None)
    out = capsys.readouterr().out
    assert out == '{"seq": 1, "event": "started", "detail": "\\u00e9"}\nnull\n'
