"""What jobs used: memory and CPU time (a job run with limits), and the network through the
egress proxy (a sandboxed job whose network is an allowlist); the slowest and hungriest jobs.

Definitions (tests/test_report_resources.py works each one out by hand):
- peak memory and CPU seconds: a job's `peak_memory_bytes` and `cpu_s` in its record, which
  its wrapper reads from the job's cgroups when the agent exits (runtime/limited). Only a
  report of its own state dir reads the records (`record_rows`); a job without the figure
  (no limits, or another state dir's logs) has none, never 0.
- egress: the `egress` audit lines the wrapper writes, one per connection through the job's
  proxy (runtime/egress): host, port, allowed, bytes `sent` (agent to host) and `received`.
  A connection is refused when the allowlist refused it (`allowed` false, no `error`); one
  that failed otherwise (a host that did not answer, a request naming no host) is counted but
  not refused. Exact duplicate lines count once. A job has egress figures when its record says
  it ran behind the proxy or its log has an egress line: such a job that made no connection
  has 0 of each.
- per agent, and per day (UTC, the day the job ended, or of its last line while it has not):
  jobs; jobs with a memory or CPU figure (`limited_jobs`) and the highest peak memory and the
  sum of CPU seconds over them; jobs with egress figures (`sandboxed_jobs`) and the sums of
  their connections, refused connections, bytes sent and received. Only the agents and days
  with such a job have a row.
- top jobs: the TOP jobs with the longest duration, the highest peak memory, the most CPU
  seconds (each among the jobs that have that figure), most first, then by job id.
- hosts: per host and port reached through a proxy: the jobs that connected, connections,
  refused connections, bytes sent and received; most connections first, then host and port.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from delegate.core.model import Job

EGRESS = "egress"  # the audit line of one connection through the proxy (runtime/wrapper)
TOP = 5  # jobs in each top list
MEASURES = ("duration_s", "peak_memory_bytes", "cpu_s")  # what the top lists rank by

# The fields of an egress line the report reads (figures.LINE_SCHEMA ends with them).
EGRESS_FIELDS = [
    StructField("host", StringType()),
    StructField("port", LongType()),
    StructField("allowed", BooleanType()),
    StructField("sent", LongType()),
    StructField("received", LongType()),
]
# What a report of its own state dir takes from the job records (`record_rows`).
RECORD_SCHEMA = StructType(
    [
        StructField("job_id", StringType()),
        StructField("peak_memory_bytes", LongType()),
        StructField("cpu_s", DoubleType()),
        StructField("egress_proxy", BooleanType()),
    ]
)
# The per-job figures of an egress summary (`egress_by_job`), each summed over its hosts.
EGRESS_SUMS = ("connections", "refused", "sent", "received")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def record_rows(jobs: Iterable[Job]) -> list[tuple[Any, ...]]:
    """RECORD_SCHEMA's rows of the jobs with a figure or an egress proxy (the rest have none)."""
    rows = []
    for job in jobs:
        sandbox = (job.launch or {}).get("sandbox")
        proxy = isinstance(sandbox, dict) and sandbox.get("network") == "allowlist"
        peak, cpu = _count(job.peak_memory_bytes), _seconds(job.cpu_s)
        if peak is not None or cpu is not None or proxy:
            rows.append((job.job_id, peak, cpu, proxy))
    return rows


def egress_by_job(lines: DataFrame) -> DataFrame:
    """Per job with egress lines: its connections, refused, bytes sent and received, and the
    same per host and port (`egress_hosts`, an array), from `lines` (figures' line columns)."""
    egress = lines.filter(F.col("kind") == EGRESS).dropDuplicates()  # every column: exact
    refused = ~F.coalesce(F.col("allowed"), F.lit(False)) & F.col("error").isNull()
    per_host = egress.groupBy("job_id", "host", "port").agg(
        F.count("*").alias("connections"),
        F.sum(refused.cast("long")).alias("refused"),
        F.sum(F.coalesce("sent", F.lit(0))).alias("sent"),
        F.sum(F.coalesce("received", F.lit(0))).alias("received"),
    )
    return per_host.groupBy("job_id").agg(
        *(F.sum(name).alias(f"egress_{name}") for name in EGRESS_SUMS),
        F.collect_list(F.struct("host", "port", *EGRESS_SUMS)).alias("egress_hosts"),
    )


def with_records(summary: DataFrame, records: DataFrame | None) -> DataFrame:
    """`summary` with each job's record figures (RECORD_SCHEMA's), null without `records`."""
    if records is not None:
        return summary.join(records, "job_id", "left")
    return summary.select(
        "*",
        *(F.lit(None).cast(f.dataType).alias(f.name) for f in RECORD_SCHEMA.fields[1:]),
    )


def job_columns() -> list[Column | str]:
    """A job's figures, from its summary with records (`with_records`): peak memory and CPU
    seconds, and its egress sums (0 for a job behind a proxy that made no connection, null
    for a job with none) and hosts."""
    proxied = F.coalesce(F.col("egress_proxy"), F.lit(False)) | F.col("egress_hosts").isNotNull()
    return [
        "peak_memory_bytes",
        "cpu_s",
        *(
            F.when(proxied, F.coalesce(f"egress_{name}", F.lit(0))).alias(f"egress_{name}")
            for name in EGRESS_SUMS
        ),
        "egress_hosts",
    ]


def _figures(jobs: DataFrame, key: Column) -> DataFrame:
    limited = F.col("peak_memory_bytes").isNotNull() | F.col("cpu_s").isNotNull()
    sandboxed = F.col("egress_connections").isNotNull()
    return (
        jobs.groupBy(key)
        .agg(
            F.count("*").alias("jobs"),
            F.sum(limited.cast("long")).alias("limited_jobs"),
            F.max("peak_memory_bytes").alias("peak_memory_bytes"),
            F.sum("cpu_s").alias("cpu_s"),
            F.sum(sandboxed.cast("long")).alias("sandboxed_jobs"),
            *(F.sum(f"egress_{name}").alias(f"egress_{name}") for name in EGRESS_SUMS),
        )
        .filter((F.col("limited_jobs") > 0) | (F.col("sandboxed_jobs") > 0))
    )


def agent_frame(jobs: DataFrame) -> DataFrame:
    """Per agent with a job that had figures: the module doc's per-agent figures."""
    return _figures(jobs, F.col("agent")).orderBy("agent")


def day_frame(jobs: DataFrame) -> DataFrame:
    """Per day (UTC) with a job that had figures, by the day it ended (or of its last line)."""
    day = F.to_date(F.coalesce("ended_at", "last_seen_at")).alias("day")
    return _figures(jobs, day).orderBy("day")


def top_frame(jobs: DataFrame) -> DataFrame:
    """The TOP jobs by each of MEASURES (`by`), most first: job, agent, outcome, figures."""
    parts = [
        jobs.filter(F.col(measure).isNotNull())
        .orderBy(F.desc(measure), "job_id")
        .limit(TOP)
        .select(
            F.lit(measure).alias("by"),
            "job_id",
            "agent",
            "status",
            "failure_reason",
            "duration_s",
            "peak_memory_bytes",
            "cpu_s",
        )
        for measure in MEASURES
    ]
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


def host_frame(jobs: DataFrame) -> DataFrame:
    """Per host and port reached through a proxy: jobs, connections, refused, bytes."""
    hosts = jobs.select("job_id", F.explode("egress_hosts").alias("h")).select("job_id", "h.*")
    return (
        hosts.groupBy("host", "port")
        .agg(
            F.count("*").alias("jobs"),  # one entry per job and host (egress_by_job)
            *(F.sum(name).alias(name) for name in EGRESS_SUMS),
        )
        .orderBy(F.desc("connections"), "host", "port")
    )


def frames(jobs: DataFrame) -> dict[str, DataFrame]:
    """The usage tables, from the report's (cached) jobs with `job_columns`."""
    return {
        "usage_agents": agent_frame(jobs),
        "usage_days": day_frame(jobs),
        "top_jobs": top_frame(jobs),
        "hosts": host_frame(jobs),
    }


def ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The top lists' rows in MEASURES' order, most first, each with its `rank` (1 to TOP)."""
    ordered = sorted(rows, key=lambda r: (MEASURES.index(r["by"]), -r[r["by"]], r["job_id"]))
    ranks: dict[str, int] = {}
    out = []
    for row in ordered:
        ranks[row["by"]] = ranks.get(row["by"], 0) + 1
        out.append({**row, "rank": ranks[row["by"]]})
    return out


def totals(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Over every job of the report: the per-agent figures of the module doc."""
    limited = [j for j in jobs if j["peak_memory_bytes"] is not None or j["cpu_s"] is not None]
    sandboxed = [j for j in jobs if j["egress_connections"] is not None]
    peaks = [j["peak_memory_bytes"] for j in limited if j["peak_memory_bytes"] is not None]
    cpus = [j["cpu_s"] for j in limited if j["cpu_s"] is not None]
    return {
        "limited_jobs": len(limited),
        "peak_memory_bytes": max(peaks) if peaks else None,
        "cpu_s": sum(cpus) if cpus else None,
        "sandboxed_jobs": len(sandboxed),
        **{
            f"egress_{name}": sum(j[f"egress_{name}"] for j in sandboxed) if sandboxed else None
            for name in EGRESS_SUMS
        },
    }
