"""Incremental compaction: new lines of every events.ndjson into Parquet partitioned by day.

`_manifest.json` in the store records, per job log, the byte offset already compacted (the logs
are append-only), and the malformed lines seen. A compaction reads only the bytes past those
offsets, up to the last complete line. If it dies between writing Parquet and the manifest, the
next one appends those lines again; the report drops exact duplicates, so figures stay right.
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

from ..fsio import atomic_write
from .figures import COLUMNS, CORRUPT, LINE_SCHEMA, RAW_SCHEMA, parse_lines

MANIFEST = "_manifest.json"


class Tails(NamedTuple):
    staging: Path | None
    offsets: dict[str, int]
    lines: int


def _manifest(store: Path) -> dict[str, Any]:
    try:
        data = json.loads((store / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return {"offsets": {}, "malformed": 0}
    return data if isinstance(data, dict) else {"offsets": {}, "malformed": 0}


def collect_tails(logs: Path, store: Path, offsets: dict[str, int]) -> Tails:
    """Copy every log's complete lines past its offset into one staging file."""
    staging_dir = store / "_staging"
    staging_dir.mkdir(parents=True, exist_ok=True)
    staging = staging_dir / f"batch-{os.getpid()}-{time.monotonic_ns()}.ndjson"
    new_offsets = dict(offsets)
    count = 0
    with staging.open("wb") as out:
        for path in sorted(logs.glob("*/events.ndjson")):
            key = path.parent.name
            start = offsets.get(key, 0)
            with path.open("rb") as handle:
                handle.seek(start)
                chunk = handle.read()
            end = chunk.rfind(b"\n") + 1  # a line still being written waits for next time
            if end <= 0:
                continue
            out.write(chunk[:end])
            new_offsets[key] = start + end
            count += chunk[:end].count(b"\n")
    if count == 0:
        staging.unlink()
        return Tails(None, new_offsets, 0)
    return Tails(staging, new_offsets, count)


def _read_staging(spark: SparkSession, staging: Path) -> tuple[DataFrame, int]:
    raw = (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(str(staging))
        .cache()
    )
    lines, malformed = parse_lines(raw)
    return lines, malformed.count()


def compact(spark: SparkSession, logs: Path, store: Path) -> dict[str, int]:
    """Append the new lines to the store; return {"lines": new lines, "malformed": ...}."""
    store.mkdir(parents=True, exist_ok=True)
    manifest = _manifest(store)
    tails = collect_tails(logs, store, manifest.get("offsets", {}))
    if tails.staging is None:
        return {"lines": 0, "malformed": 0}
    try:
        lines, malformed = _read_staging(spark, tails.staging)
        lines.withColumn("day", F.to_date("t")).write.mode("append").partitionBy("day").parquet(
            str(store / "events")
        )
    finally:
        tails.staging.unlink(missing_ok=True)
    manifest = {
        "offsets": tails.offsets,
        "malformed": int(manifest.get("malformed", 0)) + malformed,
    }
    atomic_write(store / MANIFEST, json.dumps(manifest).encode(), mode=0o600)
    return {"lines": tails.lines, "malformed": malformed}


def read_store(spark: SparkSession, logs: Path, store: Path) -> tuple[DataFrame, int]:
    """Compacted lines plus any lines written since the last compaction, and malformed count."""
    manifest = _manifest(store)
    if (store / "events").exists():
        lines = spark.read.parquet(str(store / "events")).select(*COLUMNS, "t")
    else:
        lines = spark.createDataFrame([], LINE_SCHEMA).withColumn("t", F.to_timestamp("ts"))
    malformed = int(manifest.get("malformed", 0))
    tails = collect_tails(logs, store, manifest.get("offsets", {}))
    if tails.staging is not None:
        try:
            fresh, bad = _read_staging(spark, tails.staging)
            fresh = fresh.localCheckpoint()  # the staging file goes away below
        finally:
            tails.staging.unlink(missing_ok=True)
        lines = lines.unionByName(fresh)
        malformed += bad
    shutil.rmtree(store / "_staging", ignore_errors=True)
    return lines, malformed
