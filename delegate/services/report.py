"""`delegate report`: check that Spark can run, then compute and write the report.

Nothing here imports PySpark at module level: without Java or pyspark, the command says what is
missing in one line instead of failing on import. Unless `verbose`, the Spark JVM starts with its
stderr in `$DELEGATE_HOME/analytics/spark.log`, so nothing of it reaches the terminal: neither the
JVM's own warnings nor Spark's logging (which log4j2.properties keeps at errors anyway).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from importlib.util import find_spec
from pathlib import Path
from typing import Any, NamedTuple

from delegate.config.settings import JAVA_HOME_ENV, PATH_ENV, settings, warm_s
from delegate.core.errors import DelegateError, UsageError
from delegate.report.common import Report
from delegate.services import class_archive, warm_report
from delegate.services.state import State

FORMATS = ("table", "json", "parquet", "html")


class ReportUnavailable(DelegateError):
    exit_code = 69


class ReportResult(NamedTuple):
    report: Any
    written: list[Path]
    compacted: dict[str, int] | None
    generated_at: datetime | None = None


def check_requirements(env: dict[str, str] | None = None, *, load_pyspark: bool = True) -> str:
    """The Java binary Spark will run on; ReportUnavailable (one line) without it or PySpark.
    `load_pyspark=False` only looks for PySpark (a warm server loads it: services/warm_report)."""
    env = settings().env if env is None else env
    try:
        if not load_pyspark:
            if find_spec("pyspark") is None:
                raise ImportError("pyspark")
        else:
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


class Plan(NamedTuple):
    """What one report reads and writes, checked before Spark starts."""

    logs: str  # a local folder (absolute) or a URI Spark reads
    store: str  # where its compacted Parquet and per-job summaries are kept
    local: bool
    own: bool  # the logs are this state dir's (its coordination log is read too)
    since_day: date | None
    out: Path | None  # absolute
    fmt: str
    compact: bool


def plan_report(
    state: State,
    *,
    logs: str | None = None,
    since: str | None = None,
    out: Path | None = None,
    fmt: str = "table",
    compact: bool = False,
) -> Plan:
    """The report's Plan; UsageError (one line) for what cannot be read or written."""
    if fmt not in FORMATS:
        raise UsageError(f"--format must be one of {', '.join(FORMATS)}")
    since_day = parse_since(since)
    logs = logs or str(state.layout.logs)
    local = _is_local(logs)
    own = False
    if local:
        logs_path = Path(logs.removeprefix("file://")).expanduser().absolute()
        if not logs_path.is_dir():
            raise UsageError(f"--logs {logs_path} is not a folder")
        logs = str(logs_path)
        own = logs_path == state.layout.logs
        store = str(state.layout.home / "analytics" if own else Path(f"{logs}-analytics"))
    else:
        store = f"{logs.rstrip('/')}-analytics"
    if fmt != "table":
        out = (out or state.layout.reports).expanduser().absolute()
    return Plan(logs, store, local, own, since_day, out, fmt, compact)


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
    """The report, computed by the warm Spark of this state dir (services/warm_report) when
    one may be used: Spark's default local master, its log not asked for, and
    `$DELEGATE_REPORT_WARM_S` not 0. Otherwise in this process (`run_in_process`)."""
    plan = plan_report(state, logs=logs, since=since, out=out, fmt=fmt, compact=compact)
    if master is None and not verbose and class_dump is None and warm_s(state.env) > 0:
        check_requirements(dict(state.env), load_pyspark=False)
        answer = warm_report.report(state, plan_to_wire(plan), spark_log(state))
        if answer is not None:
            return result_from_answer(answer)
    return run_in_process(state, plan, master=master, verbose=verbose, class_dump=class_dump)


def run_in_process(
    state: State,
    plan: Plan,
    *,
    master: str | None = None,
    verbose: bool = False,
    class_dump: Path | None = None,
) -> ReportResult:
    """`class_dump`: the JVM writes its class archive there as it exits (runtime/class_archive
    makes one so); otherwise it starts from the archive when there is one (services/class_archive)
    and, when there is none, one is started being made for the next report."""
    java = check_requirements(dict(state.env))
    log = None if verbose else spark_log(state)
    with spark_failures(log):
        spark = start_spark(java, master=master, verbose=verbose, log=log, class_dump=class_dump)
        result = run_plan(spark, state, plan)
        if class_dump is None:
            class_archive.start_building(class_archive.archive_for(java), dict(state.env))
        return result


def start_spark(
    java: str,
    *,
    master: str | None = None,
    verbose: bool = False,
    log: Path | None = None,
    class_dump: Path | None = None,
) -> Any:
    """A SparkSession for reports, from the class archive of `java` when there is one; its JVM
    writes to `log` (None: to this process's stderr), Spark's warnings too when `verbose`."""
    archive = class_archive.archive_for(java)
    classes = class_archive.dumping(class_dump) if class_dump else class_archive.using(archive)

    from delegate.report.figures import spark_session  # pyspark: only once Spark can run

    with jvm_stderr_to(log):
        return spark_session(master, verbose=verbose, class_archive=classes)


@contextmanager
def spark_failures(log: Path | None) -> Iterator[None]:
    """Spark's own failures (py4j, pyspark) as one DelegateError line naming Spark's log."""
    try:
        yield
    except DelegateError:
        raise
    except Exception as exc:
        # py4j, pyspark: only to tell Spark's own failures from ours, once Spark ran
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]
        from pyspark.errors import PySparkException  # pyspark: as above

        if isinstance(exc, PySparkException | Py4JError):
            raise _spark_failed(exc, log) from exc
        raise


def run_plan(spark: Any, state: State, plan: Plan) -> ReportResult:
    """Compute `plan`'s report with `spark` and write it where `plan` says."""
    # delegate.report imports pyspark: only once Spark can run (see run_in_process)
    from delegate.report import compact as compaction

    # pyspark: as above
    from delegate.report.figures import (
        collect,
        compute_frames,
        frames_from_summary,
        read_ndjson,
        read_status,
        tune_for_any_input,
        tune_for_tiny_input,
    )
    from delegate.report.output import write  # pyspark (through report.figures): as above
    from delegate.report.summaries import small_history, summarize  # pyspark: as above
    from delegate.report.usage import record_rows  # pyspark: as above

    generated_at = datetime.now(UTC)
    logs, store = plan.logs, plan.store
    if plan.local and small_history(Path(logs)):
        tune_for_tiny_input(spark)
    else:
        tune_for_any_input(spark)
    compacted = compaction.compact(spark, logs, store) if plan.compact else None
    status = read_status(spark, f"{logs.rstrip('/')}/*/status.json")
    # memory and CPU figures are in the job records: only this state dir's (report.usage)
    records = record_rows(state.registry.list()) if plan.own else None
    if plan.local:  # only the logs changed since the last report are read (report.summaries)
        summaries = summarize(spark, Path(logs), Path(store))
        frames = frames_from_summary(summaries.frame, status, since=plan.since_day, records=records)
        malformed = summaries.malformed
    else:
        if compaction.has_store(spark, logs, store):
            lines, malformed = compaction.read_store(spark, logs, store)
        else:
            lines, malformed = read_ndjson(spark, [f"{logs.rstrip('/')}/*/events.ndjson"])
        frames = compute_frames(lines, status, since=plan.since_day, records=records)
    coordination = _coordination_events(state) if plan.own else []
    if coordination:
        from delegate.report.coordination import resource_frame  # pyspark: see run_in_process

        frames["resources"] = resource_frame(spark, coordination)
    report = collect(frames, malformed=malformed)
    written: list[Path] = []
    if plan.fmt != "table":
        assert plan.out is not None  # plan_report gives one for every written format
        written = write(report, frames, plan.fmt, plan.out, logs=logs, generated_at=generated_at)
    return ReportResult(report, written, compacted, generated_at)


# --- a report asked of the warm server (services/warm_report, runtime/report_server) ---------


def plan_to_wire(plan: Plan) -> dict[str, Any]:
    since, out = plan.since_day, plan.out
    return {
        **plan._asdict(),
        "since_day": since.isoformat() if since else None,
        "out": str(out) if out else None,
    }


def plan_from_wire(data: Any) -> Plan:
    """A Plan from a request; UsageError when it is not one."""
    if not isinstance(data, dict) or set(data) != set(Plan._fields):
        raise UsageError("a report request needs exactly the fields of a plan")
    texts = ("logs", "store", "fmt")
    flags = ("local", "own", "compact")
    if not all(isinstance(data[name], str) for name in texts) or data["fmt"] not in FORMATS:
        raise UsageError("a report request's logs, store and format must be text")
    if not all(isinstance(data[name], bool) for name in flags):
        raise UsageError("a report request's local, own and compact must be true or false")
    if not all(data[name] is None or isinstance(data[name], str) for name in ("since_day", "out")):
        raise UsageError("a report request's since_day and out must be text or null")
    out = Path(data["out"]) if data["out"] else None
    if out is not None and not out.is_absolute():
        raise UsageError("a report request's out must be an absolute path")
    return Plan(
        data["logs"],
        data["store"],
        data["local"],
        data["own"],
        parse_since(data["since_day"]),
        out,
        data["fmt"],
        data["compact"],
    )


def _tagged(value: Any) -> Any:
    """`value` for JSON, with its dates and datetimes tagged so that they come back as such."""
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_tagged(item) for item in value]
    return value


def _untagged(value: Any) -> Any:
    """`value` from JSON with its tagged dates and datetimes (`_tagged`) as such again."""
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and isinstance(value.get("$datetime"), str):
        return datetime.fromisoformat(value["$datetime"])
    if len(value) == 1 and isinstance(value.get("$date"), str):
        return date.fromisoformat(value["$date"])
    return {key: _untagged(item) for key, item in value.items()}


def result_to_wire(result: ReportResult) -> str:
    return json.dumps(
        {
            "ok": True,
            "result": _tagged(
                {
                    "report": result.report._asdict(),
                    "written": [str(path) for path in result.written],
                    "compacted": result.compacted,
                    "generated_at": result.generated_at,
                }
            ),
        }
    )


def result_from_answer(answer: dict[str, Any]) -> ReportResult:
    """The ReportResult of a server's answer; its DelegateError when it failed."""
    if not answer.get("ok"):
        error = DelegateError(str(answer.get("message") or "the warm report server failed"))
        code = answer.get("exit_code")
        error.exit_code = code if isinstance(code, int) and 0 < code < 256 else 4
        raise error
    result = _untagged(answer["result"])
    return ReportResult(
        Report(**result["report"]),
        [Path(path) for path in result["written"]],
        result["compacted"],
        result["generated_at"],
    )
