"""`delegate report`: check that Spark can run, then compute and write the report.

Nothing here imports PySpark at module level: without Java or pyspark, the command says what is
missing in one line instead of failing on import. Unless `verbose`, the Spark JVM starts with its
stderr in `$DELEGATE_HOME/analytics/spark.log`, so nothing of it reaches the terminal: neither the
JVM's own warnings nor Spark's logging (which log4j2.properties keeps at errors anyway).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, NamedTuple

from delegate.config.settings import JAVA_HOME_ENV, PATH_ENV, settings
from delegate.core.errors import DelegateError, UsageError
from delegate.services import class_archive
from delegate.services.state import State

FORMATS = ("table", "json", "parquet", "html")


class ReportUnavailable(DelegateError):
    exit_code = 69


class ReportResult(NamedTuple):
    report: Any
    written: list[Path]
    compacted: dict[str, int] | None
    generated_at: datetime | None = None


def check_requirements(env: dict[str, str] | None = None) -> str:
    """The Java binary Spark will run on; ReportUnavailable (one line) without it or PySpark."""
    env = settings().env if env is None else env
    try:
        # pyspark: only tried here, so that a missing one is one clear line (module doc)
        import pyspark  # noqa: F401
    except ImportError:
        raise ReportUnavailable(
            "delegate report needs PySpark: pip install 'delegate[spark]' (make setup does it)"
        ) from None
    java_home = env.get(JAVA_HOME_ENV)
    java = (
        Path(java_home) / "bin" / "java"
        if java_home
        else shutil.which("java", path=env.get(PATH_ENV))
    )
    if not java or not Path(java).exists():
        raise ReportUnavailable(
            "delegate report needs a Java 17+ runtime for Spark: apt-get install "
            "openjdk-17-jre-headless, or set JAVA_HOME"
        )
    return str(java)


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


def spark_log(state: State) -> Path:
    """Where the Spark JVM's stderr goes when the report is not `verbose`."""
    return state.layout.home / "analytics" / "spark.log"


@contextmanager
def jvm_stderr_to(path: Path | None) -> Iterator[None]:
    """While the block runs (it starts the Spark JVM), file descriptor 2 is `path`: the JVM,
    and the Python workers it starts, inherit it and keep writing there; this process's own
    stderr comes back afterwards. `None` leaves stderr alone."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    sys.stderr.flush()
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    saved = os.dup(2)
    try:
        os.dup2(log, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def _spark_failed(exc: Exception, log: Path | None) -> DelegateError:
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    where = f"; Spark's log: {log}" if log else ""
    return DelegateError(f"the Spark job failed: {first.strip()[:300]}{where}")


def run_report(
    state: State,
    *,
    logs: str | None = None,
    master: str | None = None,
    since: str | None = None,
    out: Path | None = None,
    fmt: str = "table",
    compact: bool = False,
    verbose: bool = False,
    class_dump: Path | None = None,
) -> ReportResult:
    """`class_dump`: the JVM writes its class archive there as it exits (runtime/class_archive
    makes one so); otherwise it starts from the archive when there is one (services/class_archive)
    and, when there is none, one is started being made for the next report."""
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
    java = check_requirements(dict(state.env))
    archive = class_archive.archive_for(java)
    classes = class_archive.dumping(class_dump) if class_dump else class_archive.using(archive)

    from delegate.report.figures import spark_session  # pyspark: only once Spark can run (above)

    log = None if verbose else spark_log(state)
    try:
        with jvm_stderr_to(log):
            spark = spark_session(master, verbose=verbose, class_archive=classes)
        result = _run(spark, state, logs, store, local, own, since_day, out, fmt, compact)
        if class_dump is None:
            class_archive.start_building(archive, dict(state.env))  # for the next report
        return result
    except DelegateError:
        raise
    except Exception as exc:
        # py4j, pyspark: only to tell Spark's own failures from ours, once Spark ran
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException  # pyspark: as above

        if isinstance(exc, PySparkException | Py4JError):
            raise _spark_failed(exc, log) from exc
        raise


def _run(
    spark: Any,
    state: State,
    logs: str,
    store: str,
    local: bool,
    own: bool,
    since_day: date | None,
    out: Path | None,
    fmt: str,
    compact: bool,
) -> ReportResult:
    # delegate.report imports pyspark: only once Spark can run (see run_report)
    from delegate.report import compact as compaction

    # pyspark: as above
    from delegate.report.figures import (
        collect,
        compute_frames,
        frames_from_summary,
        read_ndjson,
        read_status,
        tune_for_tiny_input,
    )
    from delegate.report.output import write  # pyspark (through report.figures): as above
    from delegate.report.summaries import small_history, summarize  # pyspark: as above

    generated_at = datetime.now(UTC)
    if local and small_history(Path(logs)):
        tune_for_tiny_input(spark)
    compacted = compaction.compact(spark, logs, store) if compact else None
    status = read_status(spark, f"{logs.rstrip('/')}/*/status.json")
    if local:  # only the logs changed since the last report are read (report.summaries)
        summaries = summarize(spark, Path(logs), Path(store))
        frames = frames_from_summary(summaries.frame, status, since=since_day)
        malformed = summaries.malformed
    else:
        if compaction.has_store(spark, logs, store):
            lines, malformed = compaction.read_store(spark, logs, store)
        else:
            lines, malformed = read_ndjson(spark, [f"{logs.rstrip('/')}/*/events.ndjson"])
        frames = compute_frames(lines, status, since=since_day)
    coordination = _coordination_events(state) if own else []
    if coordination:
        from delegate.report.figures import resource_frame  # pyspark: see run_report

        frames["resources"] = resource_frame(spark, coordination)
    report = collect(frames, malformed=malformed)
    written: list[Path] = []
    if fmt != "table":
        written = write(
            report,
            frames,
            fmt,
            out or Path("delegate-report"),
            logs=logs,
            generated_at=generated_at,
        )
    return ReportResult(report, written, compacted, generated_at)
