"""A small local history's lines read in Python (report.local_lines) are the lines Spark's JSON
reader gives, with the same malformed counts; a line whose reading is not certain sends the
whole set to Spark's reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from delegate.report import local_lines
from delegate.report.figures import COLUMNS, tune_for_tiny_input
from delegate.report.generator import Spec, generate
from delegate.report.summaries import LogFile, _read_logs

from .test_report import _line

JOB = "0000000a"
TS = "2026-11-21T23:59:50.000000Z"


def _logs(paths: list[Path]) -> list[LogFile]:
    return [LogFile(p, p.stat().st_size, p.stat().st_mtime_ns) for p in paths]


def _write(tmp_path: Path, folder: str, text: bytes) -> Path:
    path = tmp_path / folder / "events.ndjson"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text)
    return path


def _spark_read(spark, paths: list[Path]) -> tuple[list[tuple], dict[str, list[int]]]:
    """What Spark's reader gives: `_read_logs` on more than local_lines takes."""
    saved = local_lines.SMALL_BYTES
    local_lines.SMALL_BYTES = -1
    try:
        frame, counts = _read_logs(spark, _logs(paths))
    finally:
        local_lines.SMALL_BYTES = saved
    return sorted((tuple(r) for r in frame.select(*COLUMNS).collect()), key=repr), counts


def _nonzero(counts: dict[str, list[int]]) -> dict[str, list[int]]:
    return {k: v for k, v in counts.items() if v != [0, 0]}


# hand-written lines whose reading is certain: each is usable, malformed or blank
CERTAIN = b"".join(
    [
        _line(TS, "registered", JOB, status="pending").encode(),
        _line(TS, "published", JOB, seq=1, event="started", envelope={"x": [1, 2.5]}).encode(),
        b"\r\n",  # a blank line, ending as on Windows
        _line("2026-11-22T00:00:01Z", "received", JOB, seq=1, event="started").encode()[:-1],
        b"\r\n",
        _line(TS, "rejected", "0000000b", reason="too_large").encode(),  # another job's line
        b'{"ts": "2026-11-22T00:00:00Z", "kind": "published", "seq": \n',  # cut short
        b"not json at all\n",
        _line(TS, "status_changed", None, status="error").encode(),  # no job
        b'{"kind": "registered", "job_id": "0000000a"}\n',  # no time
        _line(TS, "status_changed", JOB, status="error", error="caf\u00e9: x").encode(),
        # egress lines as the proxy writes them (runtime/egress): allowed, refused, failed
        _line(
            TS, "egress", JOB, host="a.example", port=443, allowed=True, sent=10, received=2**40
        ).encode(),
        _line(
            TS, "egress", JOB, host="b.example", port=443, allowed=False, sent=0, received=0
        ).encode(),
        _line(
            TS, "egress", JOB, host="?", port=0, allowed=False, error="bad", duration_s=0.5
        ).encode(),
        b"   \t  \n",
        b'{"ts": "2026-11-22T00:00:02.5Z", "kind": "progress", "job_id": "0000000a"}\r',
        b'{"ts": "2026-11-22T00:00:03Z", "kind": "progress", "job_id": "0000000a"}',  # no newline
    ]
)


def test_certain_lines_read_as_spark_reads_them(spark, tmp_path: Path):
    generate(tmp_path, Spec(jobs=12, seed=5, p_malformed_line=0.2, p_duplicate_line=0.1))
    _write(tmp_path, JOB, CERTAIN)
    paths = sorted(tmp_path.glob("*/events.ndjson"))
    found = local_lines.read(paths)
    assert found is not None
    spark_rows, spark_counts = _spark_read(spark, paths)
    assert sorted(found.rows, key=repr) == spark_rows
    assert _nonzero(found.counts) == _nonzero(spark_counts)
    assert found.counts[JOB] == [4, 1]  # the hand-written file: 4 malformed, 1 of job b
    assert sum(m for m, _ in found.counts.values()) > 4  # the generator's malformed lines too


def test_the_python_read_path_gives_the_same_frame(spark, tmp_path: Path):
    generate(tmp_path, Spec(jobs=6, seed=7, p_malformed_line=0.2))
    paths = sorted(tmp_path.glob("*/events.ndjson"))
    frame, counts = _read_logs(spark, _logs(paths))
    assert "LogicalRDD" in frame._jdf.queryExecution().analyzed().toString()  # not a file scan
    rows = sorted((tuple(r) for r in frame.select(*COLUMNS, "t").collect()), key=repr)
    spark_rows, spark_counts = _spark_read(spark, paths)
    assert [r[:-1] for r in rows] == spark_rows and all(r[-1] is not None for r in rows)
    assert _nonzero(counts) == _nonzero(spark_counts)


@pytest.mark.parametrize(
    "line",
    [
        _line(TS, "progress", JOB, seq="3"),  # a number as text
        _line(TS, "progress", JOB, seq=1.0),
        _line(TS, "progress", JOB, seq=2**63),
        _line(TS, "progress", JOB, seq=True),
        _line(TS, "egress", JOB, port="443"),  # an egress line's numbers and flag (report.usage)
        _line(TS, "egress", JOB, sent=1.5),
        _line(TS, "egress", JOB, allowed="yes"),
        _line(TS, "egress", JOB, allowed=1),
        _line(TS, "progress", JOB, reason=7),  # not text where text is read
        _line("2026-11-22 00:00:00", "progress", JOB),  # a time in another form
        _line("2026-02-30T00:00:00Z", "progress", JOB),
        json.dumps([{"ts": TS, "kind": "progress", "job_id": JOB}]) + "\n",
        "17\n",
        "null\n",
        _line(TS, "progress", JOB)[:-1] + " trailing\n",  # a value and more
        "{'ts': 'x'}\n",  # single quotes, which Spark's parser allows
        '{"ts": NaN\n',
        '{"ts": "' + TS + '", "kind": "p", "job_id": "a", "x": +INF}\n',
        '\ufeff{"ts": "x"}\n',
        '{"ts": "' + TS + '", "kind": "p\\ud800", "job_id": "a"}\n',
    ],
)
def test_an_uncertain_line_leaves_the_set_to_spark(tmp_path: Path, line: str):
    good = _write(tmp_path, "0000000b", _line(TS, "registered", "0000000b").encode())
    odd = _write(tmp_path, JOB, _line(TS, "registered", JOB).encode() + line.encode())
    assert local_lines.read([good]) is not None
    assert local_lines.read([good, odd]) is None


def test_not_utf8_or_gone_leaves_the_set_to_spark(tmp_path: Path):
    odd = _write(tmp_path, JOB, b'{"ts": "\xff"}\n')
    assert local_lines.read([odd]) is None
    assert local_lines.read([tmp_path / "gone" / "events.ndjson"]) is None


def test_fields_are_the_report_columns():
    assert list(local_lines.FIELDS) == COLUMNS
    typed = {*local_lines.NUMBER_FIELDS, *local_lines.FLAG_FIELDS}
    assert set(local_lines.STRING_FIELDS) == set(COLUMNS) - typed


def test_tiny_input_settings_change_no_figure(spark, tmp_path: Path):
    from delegate.report.common import to_json
    from delegate.report.figures import TINY_INPUT, compute, read_ndjson, read_status

    generate(tmp_path, Spec(jobs=15, seed=11, p_malformed_line=0.1))
    paths = [str(p) for p in sorted(tmp_path.glob("*/events.ndjson"))]

    def report() -> dict:
        lines, malformed = read_ndjson(spark, paths)
        status = read_status(spark, str(tmp_path / "*" / "status.json"))
        return to_json(compute(lines, status, malformed=malformed))

    before = {key: spark.conf.get(key, None) for key in TINY_INPUT}
    usual = report()
    try:
        tune_for_tiny_input(spark)
        assert spark.conf.get("spark.sql.codegen.factoryMode") == "NO_CODEGEN"
        tiny = report()
    finally:
        for key, value in before.items():  # the session serves the other report tests too
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    assert tiny == usual and usual["totals"]["jobs"] == 15
