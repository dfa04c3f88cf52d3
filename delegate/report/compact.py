"""Incremental compaction: new lines of every events.ndjson into Parquet partitioned by day.

`_manifest.json` in the store records, per job log, the byte offset already compacted (the logs
are append-only), and the malformed lines seen. A compaction reads only the bytes past those
offsets, up to the last complete line. Local paths are read directly; any other URI Spark reads
(hdfs://, s3a://, file://) goes through Hadoop's FileSystem API in the Spark JVM. If a
compaction dies between writing Parquet and the manifest, the next one appends those lines
again; the report drops exact duplicates, so the figures stay right.
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

from delegate.adapters.fsio import atomic_write
from delegate.report.figures import (
    COLUMNS,
    CORRUPT,
    LINE_SCHEMA,
    RAW_SCHEMA,
    STORED_SCHEMA,
    parse_lines,
)

MANIFEST = "_manifest.json"


class LocalFiles:
    """The store and the logs on this machine's file system."""

    def __init__(self, logs: str, store: str) -> None:
        self.logs, self.store = Path(logs), Path(store)

    def logs_with_size(self) -> list[tuple[str, str, int]]:
        return [
            (p.parent.name, str(p), p.stat().st_size)
            for p in sorted(self.logs.glob("*/events.ndjson"))
        ]

    def read_range(self, location: str, start: int, end: int) -> bytes:
        with open(location, "rb") as handle:
            handle.seek(start)
            return handle.read(end - start)

    def read_text(self, location: str) -> str | None:
        try:
            return Path(location).read_text()
        except FileNotFoundError:
            return None

    def write(self, location: str, data: bytes) -> None:
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(location), data, mode=0o600)

    def writer(self, location: str) -> Any:
        Path(location).parent.mkdir(parents=True, exist_ok=True)
        return open(location, "wb")

    def exists(self, location: str) -> bool:
        return Path(location).exists()

    def delete(self, location: str) -> None:
        target = Path(location)
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)


class HadoopFiles:
    """Any URI Spark reads (hdfs://, s3a://, file://...), through Hadoop's FileSystem API in
    the Spark JVM, so compaction works wherever the logs are."""

    def __init__(self, spark: SparkSession, logs: str, store: str) -> None:
        self.logs, self.store = logs.rstrip("/"), store.rstrip("/")
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "no JVM behind this SparkSession"
        self._jvm: Any = jvm
        self._conf = spark.sparkContext._jsc.hadoopConfiguration()

    def _path(self, location: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(location)

    def _fs(self, location: str) -> Any:
        return self._path(location).getFileSystem(self._conf)

    def logs_with_size(self) -> list[tuple[str, str, int]]:
        pattern = f"{self.logs}/*/events.ndjson"
        found = self._fs(pattern).globStatus(self._path(pattern)) or []
        out = [
            (s.getPath().getParent().getName(), s.getPath().toString(), int(s.getLen()))
            for s in found
        ]
        return sorted(out)

    def read_range(self, location: str, start: int, end: int) -> bytes:
        stream = self._fs(location).open(self._path(location))
        try:
            stream.seek(start)
            data: bytes = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream, end - start)
            return data
        finally:
            stream.close()

    def read_text(self, location: str) -> str | None:
        if not self.exists(location):
            return None
        fs = self._fs(location)
        length = int(fs.getFileStatus(self._path(location)).getLen())
        return self.read_range(location, 0, length).decode("utf-8")

    def write(self, location: str, data: bytes) -> None:
        stream = self._fs(location).create(self._path(location), True)
        try:
            stream.write(data)
        finally:
            stream.close()

    def writer(self, location: str) -> Any:
        return self._fs(location).create(self._path(location), True)

    def exists(self, location: str) -> bool:
        return bool(self._fs(location).exists(self._path(location)))

    def delete(self, location: str) -> None:
        self._fs(location).delete(self._path(location), True)


Files = LocalFiles | HadoopFiles


def files_for(spark: SparkSession, logs: str, store: str) -> Files:
    if ("://" in logs and not logs.startswith("file:///")) or "://" in store:
        return HadoopFiles(spark, logs, store)
    return LocalFiles(logs, store)


class Tails(NamedTuple):
    staging: str | None
    offsets: dict[str, int]
    lines: int


def _manifest(files: Files) -> dict[str, Any]:
    text = files.read_text(f"{files.store}/{MANIFEST}")
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {"offsets": {}, "malformed": 0}


def collect_tails(files: Files, offsets: dict[str, int]) -> Tails:
    """Copy every log's complete lines past its offset into one staging file in the store,
    one log at a time, so a large first compaction never holds the history in memory."""
    new_offsets = dict(offsets)
    staging = f"{files.store}/_staging/batch-{os.getpid()}-{time.monotonic_ns()}.ndjson"
    out = None
    count = 0
    try:
        for key, location, size in files.logs_with_size():
            start = offsets.get(key, 0)
            if size <= start:
                continue
            chunk = files.read_range(location, start, size)
            end = chunk.rfind(b"\n") + 1  # a line still being written waits for next time
            if end <= 0:
                continue
            out = out or files.writer(staging)
            out.write(chunk[:end])
            new_offsets[key] = start + end
            count += chunk.count(b"\n", 0, end)
    finally:
        if out is not None:
            out.close()
    return Tails(staging if count else None, new_offsets, count)


def _read_staging(spark: SparkSession, staging: str) -> tuple[DataFrame, int]:
    raw = (
        spark.read.schema(RAW_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(staging)
        .cache()
    )
    lines, malformed = parse_lines(raw)
    return lines, malformed.count()


def compact(spark: SparkSession, logs: str | Path, store: str | Path) -> dict[str, int]:
    """Append the new lines to the store; return {"lines": new lines, "malformed": ...}."""
    files = files_for(spark, str(logs), str(store))
    manifest = _manifest(files)
    tails = collect_tails(files, manifest.get("offsets", {}))
    if tails.staging is None:
        return {"lines": 0, "malformed": 0}
    try:
        lines, malformed = _read_staging(spark, tails.staging)
        lines.withColumn("day", F.to_date("t")).write.mode("append").partitionBy("day").parquet(
            f"{files.store}/events"
        )
    finally:
        files.delete(tails.staging)
    manifest = {
        "offsets": tails.offsets,
        "malformed": int(manifest.get("malformed", 0)) + malformed,
    }
    files.write(f"{files.store}/{MANIFEST}", json.dumps(manifest).encode())
    return {"lines": tails.lines, "malformed": malformed}


def has_store(spark: SparkSession, logs: str | Path, store: str | Path) -> bool:
    files = files_for(spark, str(logs), str(store))
    return files.exists(f"{files.store}/events")


def read_store(spark: SparkSession, logs: str | Path, store: str | Path) -> tuple[DataFrame, int]:
    """Compacted lines plus any lines written since the last compaction, and malformed count."""
    files = files_for(spark, str(logs), str(store))
    manifest = _manifest(files)
    if files.exists(f"{files.store}/events"):
        stored = spark.read.schema(STORED_SCHEMA).parquet(f"{files.store}/events")
        lines = stored.select(*COLUMNS, "t")
    else:
        lines = spark.createDataFrame([], LINE_SCHEMA).withColumn("t", F.to_timestamp("ts"))
    malformed = int(manifest.get("malformed", 0))
    tails = collect_tails(files, manifest.get("offsets", {}))
    if tails.staging is not None:
        try:
            fresh, bad = _read_staging(spark, tails.staging)
            fresh = fresh.localCheckpoint()  # the staging file goes away below
        finally:
            files.delete(tails.staging)
        lines = lines.unionByName(fresh)
        malformed += bad
    return lines, malformed
