"""Per-job log summaries kept between reports, so a report reads only the logs that changed.

A summary is one row per job of what its events.ndjson says (`figures.log_summary`): its marks,
event figures and rejected messages. They are kept as Parquet in the analytics store, with
`_summaries.json` recording, per job folder, the size and modification time of the
events.ndjson summarized and its malformed lines. The next report summarizes again only the
logs whose size or time changed (and new ones), takes the other jobs' rows from the Parquet,
and writes the merged rows as the new generation. Logs that are gone are dropped, as a report
from scratch would.

Delegate writes each job's lines into its own folder; a log holding another job's lines would
make one job's summary depend on two logs, so such a history is always summarized from scratch.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, NamedTuple

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from delegate.adapters.fsio import atomic_write
from delegate.report import local_lines
from delegate.report.figures import (
    LINE_SCHEMA,
    local_frame,
    log_summary,
    parse_lines,
    read_raw,
    usable,
)

MANIFEST = "_summaries.json"
VERSION = 3  # 2: a row carries `retried_by`; 3: egress figures. Older ones: summarized again


class LogFile(NamedTuple):
    path: Path
    size: int
    mtime_ns: int


class Summaries(NamedTuple):
    frame: DataFrame  # one row per job, `log_summary`'s columns
    malformed: int
    read: list[str]  # the job folders whose events.ndjson this report read


def log_files(logs: Path) -> dict[str, LogFile]:
    found = {}
    for path in sorted(logs.glob("*/events.ndjson")):
        try:
            stat = path.stat()
        except FileNotFoundError:
            continue  # removed while we looked
        found[path.parent.name] = LogFile(path, stat.st_size, stat.st_mtime_ns)
    return found


def small_history(logs: Path) -> bool:
    """Whether the logs are few enough megabytes to read in Python and compute as a tiny job
    (local_lines.SMALL_BYTES)."""
    return sum(log.size for log in log_files(logs).values()) <= local_lines.SMALL_BYTES


def _manifest(store: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((store / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and data.get("version") == VERSION
    ok = ok and isinstance(data.get("files"), dict) and isinstance(data.get("generation"), str)
    return data if ok and (store / data["generation"]).is_dir() else None


def _unchanged(entry: Any, log: LogFile) -> bool:
    """Whether a manifest entry ([size, mtime_ns, malformed lines]) still describes `log`."""
    ok = isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], int)
    return ok and entry[:2] == [log.size, log.mtime_ns]


def _read_logs(spark: SparkSession, logs: list[LogFile]) -> tuple[DataFrame, dict[str, list[int]]]:
    """The usable lines of `logs`, and per job folder: [malformed lines, lines of another job].
    A few megabytes are read in Python (report.local_lines) when every line's reading is
    certain; otherwise, and for more, Spark's reader reads them."""
    if sum(log.size for log in logs) <= local_lines.SMALL_BYTES:
        found = local_lines.read(log.path for log in logs)
        if found is not None:
            lines = local_frame(spark, found.rows, LINE_SCHEMA)
            return lines.withColumn("t", F.to_timestamp("ts")).cache(), found.counts
    raw = read_raw(spark, [str(log.path) for log in logs])
    lines, _ = parse_lines(raw)
    counts = (
        raw.withColumn("t", F.to_timestamp("ts"))
        .groupBy("folder")
        .agg(
            F.sum((~usable()).cast("int")).alias("malformed"),
            F.sum((usable() & (F.col("job_id") != F.col("folder"))).cast("int")).alias("foreign"),
        )
        .collect()
    )
    return lines, {row["folder"]: [row["malformed"], row["foreign"]] for row in counts}


def _empty(spark: SparkSession) -> DataFrame:
    lines = spark.createDataFrame([], LINE_SCHEMA).withColumn("t", F.to_timestamp("ts"))
    return log_summary(lines)


def summarize(spark: SparkSession, logs: Path, store: Path) -> Summaries:
    """Every job's log summary, reading only the logs changed since the last report; the
    merged summaries are kept in `store` for the next one."""
    files = log_files(logs)
    manifest = _manifest(store)
    kept = manifest["files"] if manifest else {}
    changed = [key for key, log in files.items() if not _unchanged(kept.get(key), log)]
    fresh, counts = _read_logs(spark, [files[key] for key in changed]) if changed else (None, {})
    if manifest is not None and any(foreign for _, foreign in counts.values()):
        (store / MANIFEST).unlink(missing_ok=True)  # some log holds another job's lines
        return summarize(spark, logs, store)
    malformed = {
        key: counts.get(key, [0, 0])[0] if key in changed else kept[key][2] for key in files
    }
    parts = []
    if manifest is not None:
        stale = changed + [key for key in kept if key not in files]  # re-read, or gone
        old = _read_generation(spark, store, manifest)
        parts.append(old.filter(~F.col("job_id").isin(stale)) if stale else old)
    if fresh is not None:
        parts.append(log_summary(fresh))
    frame = parts[0] if parts else _empty(spark)
    for part in parts[1:]:
        frame = frame.unionByName(part)
    total = sum(malformed.values())
    if not changed and len(kept) == len(files):
        return Summaries(frame, total, [])  # nothing new: the kept generation is the summary
    if any(foreign for _, foreign in counts.values()):
        return Summaries(frame, total, changed)  # not kept: see the module doc
    frame = _keep(spark, frame, store, files, malformed, manifest)
    return Summaries(frame, total, changed)


def _read_generation(spark: SparkSession, store: Path, manifest: dict[str, Any]) -> DataFrame:
    """The kept summaries; with the schema the manifest records, Spark need not run a job to
    read it from the Parquet footers."""
    reader = spark.read
    if isinstance(manifest.get("schema"), str):
        reader = reader.schema(StructType.fromJson(json.loads(manifest["schema"])))
    return reader.parquet(str(store / manifest["generation"]))


def _keep(
    spark: SparkSession,
    frame: DataFrame,
    store: Path,
    files: dict[str, LogFile],
    malformed: dict[str, int],
    manifest: dict[str, Any] | None,
) -> DataFrame:
    """Write `frame` as a new generation, record it, and return it, cached as it was written
    (the report's tables are computed from it next)."""
    generation = f"summaries-{time.time_ns()}"
    try:
        store.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError:
        return frame  # a store we cannot write: this report is right, the next reads it all
    if not os.access(store, os.W_OK):
        return frame
    frame = frame.cache()
    frame.coalesce(1).write.parquet(str(store / generation))
    record = {
        "version": VERSION,
        "generation": generation,
        "schema": frame.schema.json(),
        "files": {k: [f.size, f.mtime_ns, malformed[k]] for k, f in files.items()},
    }
    atomic_write(store / MANIFEST, json.dumps(record).encode(), mode=0o600)
    _forget_old(store, keep={generation, manifest["generation"] if manifest else ""})
    return frame


def _forget_old(store: Path, keep: set[str], age_s: float = 3600) -> None:
    """Remove generations older than an hour other than `keep`: a report still reading the
    one before this (two reports at once) keeps it."""
    now = time.time()
    for folder in store.glob("summaries-*"):
        if folder.name not in keep and now - folder.stat().st_mtime > age_s:
            shutil.rmtree(folder, ignore_errors=True)
