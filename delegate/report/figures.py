"""The report's figures, computed with Spark from the audit logs.

Definitions (the tests recompute each one in plain Python):
- An event is one (job, seq) among `published`/`received` lines, at its earliest time: the
  publisher's and the subscriber's lines of one event count once; exact duplicate lines once.
- duration: `registered` to the first terminal `status_changed` (completed, error, cancelled);
  none while the job runs.
- time to first event: `registered` to the first event.
- longest silence: the longest gap between two consecutive events (none below two events).
- rejected: `rejected` lines by reason. Malformed lines (not JSON objects, or no usable
  job/kind/ts) are counted and left out, never fatal.
- per agent / per session: jobs, completed, error, cancelled, success rate = completed over
  ended jobs, p50/p95 of durations (exact percentiles, linear interpolation).
- per day (UTC): submitted (registered), completed and failed (error) by the day they ended.
- error: the job's `error` in status.json, else the `error` of its first terminal
  `status_changed` line. failure reason: for a job whose status is `error`, that text up to its
  first `:` (`agent_exited: exit status 3` is `agent_exited`), `unknown` when there is none.
- failures: per failure reason, the failed jobs (most first, then by reason) and up to three
  examples, the most recently registered first.
- the time range covered: the earliest line of a counted job to the latest line of one.
- attempts and retries: each job's `retried_by` is the `attempt` of its first `retried` line;
  chains of attempts and what they count are defined in report/retries.py.
- denied tool calls: a job's `denied_tools` in status.json (one tool name per call its agent
  CLI denied; anything but a list of names counts as none). Totals: the calls denied, and the
  completed jobs with at least one (`completed_with_denials`); per tool (`denied`): its calls
  and the jobs that had one, most calls first, then by name.
- memory, CPU time and egress, the slowest and hungriest jobs: report/usage.py.
"""

from __future__ import annotations

import glob
import itertools
import json
from datetime import date
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from delegate.report import retries, usage
from delegate.report.common import Report
from delegate.report.denials import denial_totals, denied_per_tool

TERMINAL = ("completed", "error", "cancelled")

# Only the fields the report reads; the envelope is left unparsed.
LINE_SCHEMA = StructType(
    [
        StructField("ts", StringType()),
        StructField("kind", StringType()),
        StructField("job_id", StringType()),
        StructField("seq", LongType()),
        StructField("event", StringType()),
        StructField("status", StringType()),
        StructField("previous", StringType()),
        StructField("error", StringType()),
        StructField("reason", StringType()),
        StructField("attempt", StringType()),  # a `retried` line: the attempt that follows
        *usage.EGRESS_FIELDS,  # an `egress` line: one connection through a job's proxy
    ]
)
CORRUPT = "_corrupt_record"
RAW_SCHEMA = StructType([*LINE_SCHEMA.fields, StructField(CORRUPT, StringType())])
STATUS_SCHEMA = StructType(
    [
        StructField("job_id", StringType()),
        StructField("status", StringType()),
        StructField("agent", StringType()),
        StructField("session", StringType()),
        StructField("error", StringType()),
        StructField("cost_usd", DoubleType()),
        StructField("tokens_in", LongType()),
        StructField("tokens_out", LongType()),
        StructField("group", StringType()),
        StructField("denied_tools", ArrayType(StringType())),
    ]
)
_NUMBERS = {"cost_usd": float, "tokens_in": int, "tokens_out": int}
COLUMNS = [f.name for f in LINE_SCHEMA.fields]
# Lines as compaction stores them: read with this schema, a store written before a column was
# added reads it as null instead of failing (or of losing it, when Spark takes its schema from
# an older file).
STORED_SCHEMA = StructType([*LINE_SCHEMA.fields, StructField("t", TimestampType())])


EXAMPLES = 3  # example job ids per failure reason
RETRIED = "retried"  # the audit line on an attempt that another follows (services/jobs/retry)


# What a small local job needs from Spark: no UI, no progress bars, few shuffle partitions
# (adaptive execution merges them further), and a JVM that starts quickly.
SMALL_JOB = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.adaptive.enabled": "true",
}
# A history of a few megabytes (summaries.small_history) is a few thousand rows in each stage:
# one shuffle partition and no adaptive re-planning between stages, and expressions interpreted
# rather than compiled to Java (compiling takes longer than running them on so few rows). On
# 100 jobs this took the final collect from 6-11 s to 2.4-3.2 s, the first summary 8 s to 6 s.
TINY_INPUT = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


def tune_for_tiny_input(spark: SparkSession) -> None:
    """TINY_INPUT's settings, from now on in this session (until `tune_for_any_input`)."""
    for key, value in TINY_INPUT.items():
        spark.conf.set(key, value)


def tune_for_any_input(spark: SparkSession) -> None:
    """Back to SMALL_JOB's settings after TINY_INPUT's: a warm session (runtime/report_server)
    runs many reports, and the next one's history may not be tiny."""
    for key in TINY_INPUT:
        if key in SMALL_JOB:
            spark.conf.set(key, SMALL_JOB[key])
        else:
            spark.conf.unset(key)


# One collector thread and no optimizing compiler: a report is over before either pays off.
FAST_START_JVM = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_session(
    master: str | None = None,
    *,
    app: str = "delegate-report",
    verbose: bool = False,
    class_archive: str = "",
) -> SparkSession:
    """A small Spark for a report (SMALL_JOB, FAST_START_JVM), its logs at error level
    (warnings too when `verbose`); `class_archive`: the JVM options of its class archive
    (services/class_archive)."""
    log_config = Path(__file__).with_name("log4j2.properties")
    builder = SparkSession.builder.appName(app)
    for key, value in SMALL_JOB.items():
        builder = builder.config(key, value)
    java_options = f"{FAST_START_JVM} {class_archive}".strip()
    if not verbose:
        java_options += f" -Dlog4j.configurationFile=file:{log_config}"
    builder = builder.config("spark.driver.extraJavaOptions", java_options)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in builder._options:
        builder = builder.master("local[*]")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    return session


def parse_lines(raw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(usable lines with a parsed time `t`, malformed lines) from lines read with RAW_SCHEMA."""
    parsed = raw.withColumn("t", F.to_timestamp("ts"))
    return parsed.filter(usable()).select(*COLUMNS, "t"), parsed.filter(~usable())


def usable() -> Column:
    """A line the report counts: JSON, with a job, a kind and a time (`t`, parsed)."""
    return (
        F.col(CORRUPT).isNull()
        & F.col("job_id").isNotNull()
        & F.col("kind").isNotNull()
        & F.col("t").isNotNull()
    )


def read_ndjson(spark: SparkSession, paths: list[str]) -> tuple[DataFrame, int]:
    """Lines of events.ndjson files and the number of malformed lines among them."""
    if not paths:
        return spark.createDataFrame([], LINE_SCHEMA).withColumn("t", F.to_timestamp("ts")), 0
    lines, malformed = parse_lines(read_raw(spark, paths))
    return lines, malformed.count()


def read_raw(spark: SparkSession, paths: list[str]) -> DataFrame:
    """The lines of `paths` as RAW_SCHEMA with their job `folder`, cached: Spark refuses a
    query on the corrupt column of an uncached source. Each read is cached as its own: Spark's
    cache matches plans, not file contents, so a second read of the same grown files would get
    the first one's rows."""
    return (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(paths)
        .withColumn("folder", F.regexp_extract(F.input_file_name(), _FOLDER, 1))
        .withColumn("_read", F.lit(next(_READS)))
        .cache()
    )


_READS = itertools.count()  # tells reads apart (read_raw)
_FOLDER = r"/([^/]+)/events\.ndjson$"  # the job folder of a log, from Spark's file name


def read_status(spark: SparkSession, pattern: str) -> DataFrame:
    """Every job's status.json. Local files are read here: Spark's JSON reader costs a few
    milliseconds per file, and a long history has one small file per job."""
    if "://" in pattern and not pattern.startswith("file://"):
        return spark.read.schema(STATUS_SCHEMA).option("mode", "DROPMALFORMED").json(pattern)
    rows = []
    for path in glob.glob(pattern.removeprefix("file://")):
        try:
            with open(path, "rb") as handle:
                record = json.load(handle)
        except (OSError, ValueError):
            continue  # being rewritten right now, or damaged: the job still counts from its log
        if isinstance(record, dict) and isinstance(record.get("job_id"), str):
            rows.append(tuple(_value(f.name, record.get(f.name)) for f in STATUS_SCHEMA.fields))
    return local_frame(spark, rows, STATUS_SCHEMA)


def local_frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: StructType) -> DataFrame:
    """`rows` (plain values of `schema`'s types) as a DataFrame held in the JVM.

    createDataFrame would hand them to Spark as a Python RDD, which starts Python workers to
    read (seconds, for a small report); here they travel as one text of JSON lines, which the
    JVM splits and Spark's JSON reader reads back as they were."""
    names = schema.names
    text = "\n".join(json.dumps(dict(zip(names, row, strict=True))) for row in rows)
    jvm: Any = spark.sparkContext._jvm
    java = jvm.java.util
    strings = (
        jvm.java.util.regex.Pattern.compile("\n")
        .splitAsStream(text)
        .collect(java.stream.Collectors.toList())
        if rows
        else java.ArrayList()
    )
    dataset = spark._jsparkSession.createDataset(
        strings, jvm.org.apache.spark.sql.Encoders.STRING()
    )
    return DataFrame(spark.read.schema(schema)._jreader.json(dataset), spark)


def _value(name: str, value: Any) -> Any:
    """A status field as its schema wants it; anything else (damaged, missing) is null."""
    if name == "denied_tools":
        names = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return value if names else None
    kind = _NUMBERS.get(name)
    if kind is None:
        return value if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return kind(value)


def _seconds(later: Any, earlier: Any) -> Any:
    return (F.unix_micros(later) - F.unix_micros(earlier)) / 1e6


def _event_stats(lines: DataFrame) -> DataFrame:
    """Per job: events, the first one's time, the longest silence, permission requests."""
    events = (
        lines.filter(F.col("kind").isin("published", "received") & F.col("seq").isNotNull())
        .groupBy("job_id", "seq")
        .agg(F.min("t").alias("t"), F.first("event", ignorenulls=True).alias("event"))
    )
    by_time = Window.partitionBy("job_id").orderBy("t", "seq")
    gaps = events.withColumn("gap", _seconds(F.col("t"), F.lag("t").over(by_time)))
    return gaps.groupBy("job_id").agg(
        F.count("*").alias("events"),
        F.min("t").alias("first_event_at"),
        F.max("gap").alias("longest_silence_s"),
        F.sum(F.when(F.col("event") == "permission_required", 1).otherwise(0)).alias(
            "permission_requests"
        ),
    )


def _marks(lines: DataFrame) -> DataFrame:
    """Per job: registered, ended (and the error it ended with), first and last line seen, the
    latest status it changed to, and the attempt that followed it."""
    ends = (F.col("kind") == "status_changed") & F.col("status").isin(*TERMINAL)
    retried = (F.col("kind") == RETRIED) & F.col("attempt").isNotNull()
    return lines.groupBy("job_id").agg(
        F.min(F.when(F.col("kind") == "registered", F.col("t"))).alias("registered_at"),
        F.min(F.when(ends, F.col("t"))).alias("ended_at"),
        F.min_by(F.when(ends, F.col("error")), F.when(ends, F.col("t"))).alias("ended_error"),
        F.min("t").alias("first_seen_at"),
        F.max("t").alias("last_seen_at"),
        F.max_by(
            F.when(F.col("kind") == "status_changed", F.col("status")),
            F.when(F.col("kind") == "status_changed", F.col("t")),
        ).alias("last_status"),
        F.min_by(F.when(retried, F.col("attempt")), F.when(retried, F.col("t"))).alias(
            "retried_by"
        ),
    )


def _rejected(lines: DataFrame) -> DataFrame:
    """Per job: rejected messages, in all and by reason (a map)."""
    return (
        lines.filter((F.col("kind") == "rejected") & F.col("reason").isNotNull())
        .dropDuplicates(COLUMNS)
        .groupBy("job_id", "reason")
        .count()
        .groupBy("job_id")
        .agg(
            F.sum("count").alias("rejected"),
            F.map_from_entries(F.collect_list(F.struct("reason", "count"))).alias(
                "rejected_by_reason"
            ),
        )
    )


def _status_fields(status: DataFrame) -> DataFrame:
    """What status.json says of each job; its error renamed, the log's may stand in for it."""
    return status.select(
        "job_id",
        "status",
        "agent",
        "session",
        F.col("error").alias("status_error"),
        "cost_usd",
        "tokens_in",
        "tokens_out",
        "group",
        "denied_tools",
    )


def _failure_reason(error: Any) -> Any:
    """The error's text up to its first `:`; `unknown` when there is none."""
    return F.coalesce(
        F.nullif(F.trim(F.split(error, ":").getItem(0)), F.lit("")),
        F.lit("unknown"),
    )


def log_summary(lines: DataFrame) -> DataFrame:
    """One row per job of what its log lines say (marks, event figures, rejected messages):
    everything the report needs from the lines, small enough to keep between reports."""
    # An exact duplicate line counts once. Events (grouped by job and seq) and the status marks
    # (min/max) are immune to duplicates already; only counted lines need de-duplicating, which
    # spares a shuffle of every line.
    return (
        _marks(lines)
        .join(_event_stats(lines), "job_id", "left")
        .join(_rejected(lines), "job_id", "left")
        .join(usage.egress_by_job(lines), "job_id", "left")
    )


def jobs_from_summary(
    summary: DataFrame, status: DataFrame, records: list[tuple[Any, ...]] | None = None
) -> DataFrame:
    """One row per job from its log summary (`log_summary`) joined with its status.json and,
    when given, its record's figures (`records`: usage.record_rows)."""
    spark = summary.sparkSession
    figures = None if records is None else local_frame(spark, records, usage.RECORD_SCHEMA)
    return (
        usage.with_records(summary, figures)
        .join(_status_fields(status), "job_id", "left")
        .select(
            "job_id",
            F.coalesce("status", "last_status", F.lit("pending")).alias("status"),
            F.coalesce("agent", F.lit("-")).alias("agent"),
            F.coalesce("session", F.lit("-")).alias("session"),
            "registered_at",
            "ended_at",
            _seconds(F.col("ended_at"), F.col("registered_at")).alias("duration_s"),
            _seconds(F.col("first_event_at"), F.col("registered_at")).alias(
                "time_to_first_event_s"
            ),
            F.coalesce("events", F.lit(0)).alias("events"),
            "longest_silence_s",
            F.coalesce("permission_requests", F.lit(0)).alias("permission_requests"),
            F.coalesce("rejected", F.lit(0)).alias("rejected"),
            "rejected_by_reason",
            "cost_usd",
            "tokens_in",
            "tokens_out",
            F.coalesce("status_error", "ended_error").alias("error"),
            "first_seen_at",
            "last_seen_at",
            "retried_by",
            "group",
            "denied_tools",
            *usage.job_columns(),
        )
        .withColumn(
            "failure_reason",
            F.when(F.col("status") == "error", _failure_reason(F.col("error"))),
        )
    )


def group_frame(jobs: DataFrame, key: str) -> DataFrame:
    """Per `key` (agent, session, queue group): outcomes, success rate, p50/p95 durations,
    cost, tokens."""
    ended = F.col("status").isin(*TERMINAL)
    return (
        jobs.groupBy(key)
        .agg(
            F.count("*").alias("jobs"),
            F.sum((F.col("status") == "completed").cast("int")).alias("completed"),
            F.sum((F.col("status") == "error").cast("int")).alias("error"),
            F.sum((F.col("status") == "cancelled").cast("int")).alias("cancelled"),
            F.sum(ended.cast("int")).alias("ended"),
            F.percentile(F.col("duration_s"), F.lit(0.5)).alias("p50_duration_s"),
            F.percentile(F.col("duration_s"), F.lit(0.95)).alias("p95_duration_s"),
            F.sum("cost_usd").alias("cost_usd"),
            F.sum("tokens_in").alias("tokens_in"),
            F.sum("tokens_out").alias("tokens_out"),
        )
        .withColumn(
            "success_rate",
            F.when(F.col("ended") > 0, F.col("completed") / F.col("ended")),
        )
        .drop("ended")
        .orderBy(key)
    )


def day_frame(jobs: DataFrame) -> DataFrame:
    """Per day (UTC): jobs submitted that day, and completed, failed and their cost by the day
    they ended."""
    submitted = (
        jobs.filter(F.col("registered_at").isNotNull())
        .groupBy(F.to_date("registered_at").alias("day"))
        .agg(F.count("*").alias("submitted"))
    )
    finished = (
        jobs.filter(F.col("ended_at").isNotNull())
        .groupBy(F.to_date("ended_at").alias("day"))
        .agg(
            F.sum((F.col("status") == "completed").cast("int")).alias("completed"),
            F.sum((F.col("status") == "error").cast("int")).alias("failed"),
            F.sum("cost_usd").alias("cost_usd"),
        )
    )
    return (
        submitted.join(finished, "day", "full")
        .select(
            "day",
            F.coalesce("submitted", F.lit(0)).alias("submitted"),
            F.coalesce("completed", F.lit(0)).alias("completed"),
            F.coalesce("failed", F.lit(0)).alias("failed"),
            "cost_usd",
        )
        .orderBy("day")
    )


def failure_frame(jobs: DataFrame) -> DataFrame:
    """Per failure reason: the failed jobs (most first) and up to EXAMPLES of them, latest
    registered first."""
    latest_first = F.sort_array(
        F.collect_list(F.struct(F.coalesce("registered_at", "first_seen_at"), "job_id")),
        asc=False,
    )
    return (
        jobs.filter(F.col("failure_reason").isNotNull())
        .groupBy(F.col("failure_reason").alias("reason"))
        .agg(
            F.count("*").alias("jobs"),
            F.transform(F.slice(latest_first, 1, EXAMPLES), lambda s: s["job_id"]).alias(
                "examples"
            ),
        )
        .orderBy(F.desc("jobs"), "reason")
    )


def compute_frames(
    lines: DataFrame,
    status: DataFrame,
    *,
    since: date | None = None,
    records: list[tuple[Any, ...]] | None = None,
) -> dict[str, DataFrame]:
    """The report's tables as DataFrames (for Parquet output); `lines` carry a parsed `t`.

    With `since`, only jobs registered on or after that day (UTC) are counted; `records`: the
    job records' figures (usage.record_rows), when the report has them."""
    return frames_from_summary(log_summary(lines), status, since=since, records=records)


def frames_from_summary(
    summary: DataFrame,
    status: DataFrame,
    *,
    since: date | None = None,
    records: list[tuple[Any, ...]] | None = None,
) -> dict[str, DataFrame]:
    """`compute_frames` from the jobs' log summaries (`log_summary`) rather than their lines."""
    jobs = jobs_from_summary(summary, status, records)
    if since is not None:
        jobs = jobs.filter(F.to_date("registered_at") >= F.lit(since))
    jobs = jobs.cache()  # every other table is computed from it
    return {
        "jobs": jobs.drop("egress_hosts"),  # per host: the hosts table
        "agents": group_frame(jobs, "agent"),
        "sessions": group_frame(jobs, "session"),
        "groups": group_frame(jobs.filter(F.col("group").isNotNull()), "group"),
        "days": day_frame(jobs),
        "failures": failure_frame(jobs),
        **usage.frames(jobs),
    }


def _utc(frame: DataFrame) -> list[Column]:
    # Timestamps leave Spark as UTC text: PySpark would make them naive local datetimes.
    return [
        F.date_format(f.name, "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").alias(f.name)
        if f.dataType.typeName() == "timestamp"
        else F.col(f.name)
        for f in frame.schema.fields
    ]


def _all_rows(frames: dict[str, DataFrame]) -> dict[str, list[dict[str, Any]]]:
    """Every table's rows in one Spark job: each row as JSON text tagged with its table, so the
    tables (built from one cached jobs frame) share one action instead of one each."""
    as_json = [
        frame.select(
            F.lit(name).alias("table"),
            F.monotonically_increasing_id().alias("n"),
            F.to_json(F.struct(*_utc(frame)), {"ignoreNullFields": "false"}).alias("row"),
        )
        for name, frame in frames.items()
    ]
    union = as_json[0]
    for part in as_json[1:]:
        union = union.unionByName(part)
    tables: dict[str, list[tuple[int, dict[str, Any]]]] = {name: [] for name in frames}
    for record in union.collect():
        tables[record["table"]].append((record["n"], json.loads(record["row"])))
    out = {name: [r for _, r in sorted(rows, key=lambda r: r[0])] for name, rows in tables.items()}
    for name, frame in frames.items():
        days = [f.name for f in frame.schema.fields if f.dataType.typeName() == "date"]
        for row in out[name] if days else ():
            for day in days:  # dates come back as dates, as collect() gives them
                row[day] = None if row[day] is None else date.fromisoformat(row[day])
    return out


def compute(
    lines: DataFrame,
    status: DataFrame,
    *,
    malformed: int = 0,
    since: date | None = None,
    records: list[tuple[Any, ...]] | None = None,
) -> Report:
    frames = compute_frames(lines, status, since=since, records=records)
    return collect(frames, malformed=malformed)


def collect(frames: dict[str, DataFrame], *, malformed: int = 0) -> Report:
    """Bring the tables to the driver as plain rows."""
    rows = _all_rows(frames)
    jobs = sorted(rows["jobs"], key=lambda j: (str(j["registered_at"]), j["job_id"]))
    seen = [j["first_seen_at"] for j in jobs if j["first_seen_at"]]
    last = [j["last_seen_at"] for j in jobs if j["last_seen_at"]]
    found = retries.number_attempts(jobs)
    by_agent = retries.per_key(found, "agent")
    agents = [{**row, **by_agent.get(row["agent"], retries.count([]))} for row in rows["agents"]]
    totals = {
        "jobs": len(jobs),
        "events": sum(j["events"] for j in jobs),
        "rejected": sum(j["rejected"] for j in jobs),
        "permission_requests": sum(j["permission_requests"] for j in jobs),
        "malformed_lines": malformed,
        "failed": sum(1 for j in jobs if j["status"] == "error"),
        "covers_from": min(seen) if seen else None,  # same-format UTC text: orders as time
        "covers_to": max(last) if last else None,
        **retries.count(found),
        **denial_totals(jobs),
        **usage.totals(jobs),
    }
    resources = rows.get("resources", [])
    failures = rows.get("failures", [])
    return Report(
        jobs,
        agents,
        rows["sessions"],
        rows["days"],
        totals,
        resources,
        sorted(failures, key=lambda f: (-f["jobs"], f["reason"])),
        sorted(rows.get("groups", []), key=lambda g: str(g["group"])),
        denied_per_tool(jobs),
        rows.get("usage_agents", []),
        rows.get("usage_days", []),
        usage.ranked(rows.get("top_jobs", [])),
        rows.get("hosts", []),
    )
