"""A small local history's events.ndjson lines, read in Python rather than by Spark's reader.

Spark's JSON file reader costs seconds on a hundred small files before it reads a byte (listing
them in a Spark job, planning, a task per file, a cached scan); parsing a few megabytes here
takes a fraction of that. The lines read here must be the lines Spark's reader would give, so a
line is taken only when its reading is certain:
- usable: a JSON object whose report fields (figures.LINE_SCHEMA) are strings or null (`seq`,
  `port`, `sent`, `received`: 64-bit integers or null; `allowed`: true, false or null), with
  a job, a kind, and a `ts` in delegate's own UTC form (`2026-11-22T14:02:07.123456Z`), which
  Spark's `to_timestamp` always parses;
- malformed: an object without a job, kind or time, or a line that is no JSON value at all
  (no prefix of it parses, and it holds nothing Spark's more lenient parser might read: single
  quotes, NaN or infinities, a byte-order mark, NULs, lone surrogates);
- blank lines are skipped, as Spark skips them.
Anything else (a field of another type, a time in another form, a JSON array, a line that is
not UTF-8 ...) is uncertain: `read` then gives None and the caller uses Spark's reader for the
whole set. Lines end at `\\n`, `\\r\\n` or `\\r`, as Hadoop's line reader ends them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

STRING_FIELDS = (
    "ts",
    "kind",
    "job_id",
    "event",
    "status",
    "previous",
    "error",
    "reason",
    "attempt",
    "host",
)
NUMBER_FIELDS = ("seq", "port", "sent", "received")  # 64-bit integers
FLAG_FIELDS = ("allowed",)
# figures.LINE_SCHEMA's order (an egress line's fields last: report/usage)
FIELDS = (*STRING_FIELDS[:3], "seq", *STRING_FIELDS[3:], "port", "allowed", "sent", "received")
SMALL_BYTES = 8_000_000  # above this, Spark's reader (in parallel, off the driver) does better
_LONG = (-(2**63), 2**63)
_OWN_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]{1,6})?Z"
)
# what Jackson (Spark's parser) may read otherwise than json: quotes, special numbers, lone
# surrogates, byte-order marks, and NULs (from which it guesses UTF-16 or UTF-32)
_LENIENT = re.compile(rb"'|NaN|INF|Inf|\\u[dD][89a-fA-F]|\xef\xbb\xbf|\x00")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BLANK = b" \t"  # Jackson's whitespace within a line
_DECODER = json.JSONDecoder()


class Uncertain(Exception):
    """A line whose reading by Spark is not certain (module doc)."""


class LocalLines(NamedTuple):
    rows: list[tuple[Any, ...]]  # usable lines, FIELDS in order
    counts: dict[str, list[int]]  # per job folder: [malformed lines, usable lines of another job]


def _own_time(text: str) -> bool:
    match = _OWN_TIME.fullmatch(text)
    if match is None:
        return False
    try:
        year, month, day, hour, minute, second = (int(part) for part in match.groups())
        datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


def _row(obj: dict[str, Any]) -> tuple[Any, ...] | None:
    """The line's fields, or None when it is malformed; Uncertain when Spark may differ."""
    for name in STRING_FIELDS:
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            raise Uncertain(name)
        if value is not None and not value.isascii() and _SURROGATE.search(value):
            raise Uncertain(name)
    for name in NUMBER_FIELDS:
        value = obj.get(name)
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not _LONG[0] <= value < _LONG[1]
        ):
            raise Uncertain(name)
    for name in FLAG_FIELDS:
        if obj.get(name) is not None and not isinstance(obj[name], bool):
            raise Uncertain(name)
    ts = obj.get("ts")
    if ts is not None and not _own_time(ts):
        raise Uncertain("ts")
    if ts is None or obj.get("job_id") is None or obj.get("kind") is None:
        return None
    return tuple(obj.get(name) for name in FIELDS)


def _no_json(text: str) -> bool:
    """Whether Spark's parser too finds no JSON value at the start of `text`."""
    try:
        _DECODER.raw_decode(text.strip(" \t"))
    except ValueError:
        return True
    return False  # a value followed by more text: Jackson stops after the value


def _parse(line: bytes) -> tuple[Any, ...] | None:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise Uncertain("not utf-8") from None
    try:
        obj = json.loads(text)
    except ValueError:
        if not _LENIENT.search(line) and _no_json(text):
            return None
        raise Uncertain("JSON that Jackson may read") from None
    if not isinstance(obj, dict):
        raise Uncertain("not an object")
    return _row(obj)


def read_file(path: Path, rows: list[tuple[Any, ...]]) -> list[int]:
    """Append `path`'s usable lines to `rows`; its [malformed, of another job] counts."""
    folder = path.parent.name
    malformed = foreign = 0
    for line in path.read_bytes().splitlines():
        if not line.strip(_BLANK):
            continue
        row = _parse(line)
        if row is None:
            malformed += 1
            continue
        rows.append(row)
        foreign += row[2] != folder
    return [malformed, foreign]


def read(paths: Iterable[Path]) -> LocalLines | None:
    """Every line of the events.ndjson `paths`, or None when one of them is uncertain."""
    rows: list[tuple[Any, ...]] = []
    counts = {}
    try:
        for path in paths:
            counts[path.parent.name] = read_file(path, rows)
    except (Uncertain, OSError):  # OSError: a log removed while we read
        return None
    return LocalLines(rows, counts)
