"""`delegate report`: check that Spark can run, then compute and write the report.

Nothing here imports PySpark at module level: without Java or pyspark, the command says what is
missing in one line instead of failing on import.
"""

from __future__ import annotations

import os
import shutil
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple

from ..errors import DelegateError, UsageError
from .state import State

FORMATS = ("table", "json", "parquet", "html")


class ReportUnavailable(DelegateError):
    exit_code = 69


class ReportResult(NamedTuple):
    report: Any
    written: list[Path]
    compacted: dict[str, int] | None


def check_requirements(env: dict[str, str] | None = None) -> None:
    env = dict(os.environ) if env is None else env
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ReportUnavailable(
            "delegate report needs PySpark: pip install 'delegate[spark]' (make setup does it)"
        ) from None
    java_home = env.get("JAVA_HOME")
    java = (
        Path(java_home) / "bin" / "java"
        if java_home
        else shutil.which("java", path=env.get("PATH"))
    )
    if not java or not Path(java).exists():
        raise ReportUnavailable(
            "delegate report needs a Java 17+ runtime for Spark: apt-get install "
            "openjdk-17-jre-headless, or set JAVA_HOME"
        )


def parse_since(text: str | None) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--since {text!r} is not a date like 2026-11-22") from None


def _is_local(logs: str) -> bool:
    return "://" not in logs or logs.startswith("file://")


def _coordination_events(state: State) -> list[tuple[Any, ...]]:
    """coord.db's event log (locks, claims, boards), when this state dir has one."""
    path = state.layout.coord_db
    if not path.exists():
        return []
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return conn.execute(
                "SELECT ts_ms, kind, actor, subject, data FROM events ORDER BY seq"
            ).fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise DelegateError(f"cannot read the coordination log {path}: {exc}") from None


def run_report(
    state: State,
    *,
    logs: str | None = None,
    master: str | None = None,
    since: str | None = None,
    out: Path | None = None,
    fmt: str = "table",
    compact: bool = False,
) -> ReportResult:
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    since_day = parse_since(since)
    logs = logs or str(state.layout.logs)
    local = _is_local(logs)
    own = False  # the report reads this state dir's logs (and then its coordination log too)
    if local:
        logs_path = Path(logs.removeprefix("file://")).expanduser().absolute()
        if not logs_path.is_dir():
            raise UsageError(f"--logs {logs_path} is not a folder")
        logs = str(logs_path)
        own = logs_path == state.layout.logs
        store = str(state.layout.home / "analytics" if own else Path(f"{logs}-analytics"))
    else:
        store = f"{logs.rstrip('/')}-analytics"
    check_requirements(dict(state.env))

    from ..report import compact as compaction
    from ..report.figures import collect, compute_frames, read_ndjson, read_status, spark_session
    from ..report.render import write

    spark = spark_session(master)
    compacted = compaction.compact(spark, logs, store) if compact else None
    if compaction.has_store(spark, logs, store):
        lines, malformed = compaction.read_store(spark, logs, store)
    elif local:
        lines, malformed = read_ndjson(
            spark, [str(p) for p in sorted(Path(logs).glob("*/events.ndjson"))]
        )
    else:
        lines, malformed = read_ndjson(spark, [f"{logs.rstrip('/')}/*/events.ndjson"])
    status = read_status(spark, f"{logs.rstrip('/')}/*/status.json")
    frames = compute_frames(lines, status, since=since_day)
    coordination = _coordination_events(state) if own else []
    if coordination:
        from ..report.figures import resource_frame

        frames["resources"] = resource_frame(spark, coordination)
    report = collect(frames, malformed=malformed)
    written: list[Path] = []
    if fmt != "table":
        written = write(report, frames, fmt, out or Path("delegate-report"))
    return ReportResult(report, written, compacted)
