"""`delegate report` on 1M and 10M audit events, beside DuckDB on the same files; and a
report of 100 jobs beside a bare local SparkSession start, then again with 10 new jobs.

`--small` (issue 21): a fresh process starting a local SparkSession with Spark's defaults and
running one count, then `delegate report --format json` on 100 jobs (nothing kept from before),
then the same report after 10 new jobs arrive (it reads only their logs). Targets: the first
report <= 1.3x the bare start, the second <= 0.5x the first.

For each size: generate the logs (not timed), compact them to Parquet once (`delegate report
--compact`, timed as "compaction"; that report also keeps the per-job summaries and leaves the
state dir's warm Spark up), then time `delegate report --format json` as a fresh process, which
the warm Spark answers from the kept summaries, the same with `DELEGATE_REPORT_WARM_S=0` (in its
own process, JVM start included: `_cold`), and DuckDB computing the same figures from the
compacted Parquet and status files.
Then, as `report_unsummarized_s`, the same report with the summaries forgotten (it reads every
log). Targets: 10M events in <= 60 s (issue 5); <= 3x DuckDB (issue 21).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import delegate_exe, emit

DUCKDB_SQL = """
WITH lines AS (
    SELECT DISTINCT ts, kind, job_id, seq, event, status, previous, error, reason, t
    FROM read_parquet('{store}/events/*/*.parquet', hive_partitioning = true)
),
events AS (
    SELECT job_id, seq, min(t) AS t, any_value(event) AS event
    FROM lines WHERE kind IN ('published', 'received') AND seq IS NOT NULL
    GROUP BY job_id, seq
),
gaps AS (
    SELECT job_id, event, t,
           epoch_us(t) - epoch_us(lag(t) OVER (PARTITION BY job_id ORDER BY t, seq)) AS gap
    FROM events
),
event_stats AS (
    SELECT job_id, count(*) AS events, min(t) AS first_event_at, max(gap) / 1e6 AS silence,
           sum(CASE WHEN event = 'permission_required' THEN 1 ELSE 0 END) AS permissions
    FROM gaps GROUP BY job_id
),
marks AS (
    SELECT job_id,
           min(t) FILTER (WHERE kind = 'registered') AS registered_at,
           min(t) FILTER (WHERE kind = 'status_changed'
                          AND status IN ('completed', 'error', 'cancelled')) AS ended_at
    FROM lines GROUP BY job_id
),
status AS (
    SELECT job_id, status, agent, session
    FROM read_json('{logs}/*/status.json', columns = {{job_id: 'VARCHAR', status: 'VARCHAR',
                   agent: 'VARCHAR', session: 'VARCHAR'}})
),
jobs AS (
    SELECT m.job_id, coalesce(s.status, 'pending') AS status, coalesce(s.agent, '-') AS agent,
           coalesce(s.session, '-') AS session, m.registered_at, m.ended_at,
           (epoch_us(m.ended_at) - epoch_us(m.registered_at)) / 1e6 AS duration_s,
           (epoch_us(e.first_event_at) - epoch_us(m.registered_at)) / 1e6 AS first_event_s,
           coalesce(e.events, 0) AS events, e.silence, coalesce(e.permissions, 0) AS permissions
    FROM marks m LEFT JOIN status s USING (job_id) LEFT JOIN event_stats e USING (job_id)
)
SELECT 'agent' AS kind, agent AS name, count(*) AS jobs,
       sum((status = 'completed')::INT) AS completed, sum((status = 'error')::INT) AS error,
       quantile_cont(duration_s, 0.5) AS p50, quantile_cont(duration_s, 0.95) AS p95
FROM jobs GROUP BY agent
UNION ALL
SELECT 'session', session, count(*), sum((status = 'completed')::INT),
       sum((status = 'error')::INT), quantile_cont(duration_s, 0.5),
       quantile_cont(duration_s, 0.95)
FROM jobs GROUP BY session
UNION ALL
SELECT 'day', CAST(CAST(registered_at AS DATE) AS VARCHAR), count(*), 0, 0, NULL, NULL
FROM jobs GROUP BY CAST(registered_at AS DATE)
"""


def run(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - started


def measure(events: int, work: Path) -> dict[str, object]:
    from delegate.report.generator import Spec, generate

    home = work / f"state-{events}"
    logs = home / "logs"
    per_job = 100  # about 2 lines per event plus a few status lines: ~205 lines a job
    started = time.perf_counter()
    lines = generate(
        logs, Spec(jobs=max(1, events // (2 * per_job + 5)), events_per_job=per_job, seed=events)
    )
    generated_s = time.perf_counter() - started
    env = {**os.environ, "DELEGATE_HOME": str(home)}
    exe = delegate_exe()
    compact_s = run([exe, "report", "--compact", "--format", "json", "--out", str(work / "c")], env)
    # the compaction's report started the state dir's warm Spark (services/warm_report)
    report_s = run([exe, "report", "--format", "json", "--out", str(work / f"r-{events}")], env)
    figures = json.loads((work / f"r-{events}" / "report.json").read_text())
    cold_env = {**env, "DELEGATE_REPORT_WARM_S": "0"}  # in its own process: a JVM start too
    cold_s = run([exe, "report", "--format", "json", "--out", str(work / "cold")], cold_env)

    import duckdb

    started = time.perf_counter()
    con = duckdb.connect()
    rows = con.execute(DUCKDB_SQL.format(store=home / "analytics", logs=logs)).fetchall()
    duckdb_s = time.perf_counter() - started
    (home / "analytics" / "_summaries.json").unlink()
    unsummarized_s = run([exe, "report", "--format", "json", "--out", str(work / "u")], env)
    from delegate.services import warm_report

    warm_report.stop(home)
    duck_agents = {r[1]: r[2] for r in rows if r[0] == "agent"}
    spark_agents = {a["agent"]: a["jobs"] for a in figures["agents"]}
    return {
        "audit_lines": lines,
        "jobs": figures["totals"]["jobs"],
        "events": figures["totals"]["events"],
        "generate_s": round(generated_s, 1),
        "compaction_s": round(compact_s, 1),
        "report_from_parquet_s": round(report_s, 1),
        "report_from_parquet_cold_s": round(cold_s, 1),
        "report_unsummarized_s": round(unsummarized_s, 1),
        "duckdb_same_figures_s": round(duckdb_s, 2),
        "spark_over_duckdb": round(report_s / duckdb_s, 1),
        "cold_spark_over_duckdb": round(cold_s / duckdb_s, 1),
        "same_jobs_per_agent": duck_agents == spark_agents,
    }


BARE_SPARK = (
    "from pyspark.sql import SparkSession\n"
    "SparkSession.builder.master('local[*]').getOrCreate().range(1).count()\n"
)


def _move_jobs(source: Path, logs: Path) -> None:
    for folder in source.iterdir():
        folder.rename(logs / folder.name)


def _report_twice(exe: str, home: Path, work: Path, seed: int) -> tuple[float, float]:
    """A first report of 100 jobs (nothing kept from before), then one after 10 new jobs."""
    from delegate.report.generator import Spec, generate

    generate(home / "logs", Spec(jobs=100, seed=seed))
    generate(work / "new", Spec(jobs=10, seed=seed + 1))
    env = {**os.environ, "DELEGATE_HOME": str(home)}
    out = str(work / "out")
    first = run([exe, "report", "--format", "json", "--out", out], env)
    _move_jobs(work / "new", home / "logs")
    return first, run([exe, "report", "--format", "json", "--out", out], env)


def measure_small(work: Path, rounds: int, baseline: str | None) -> dict[str, object]:
    """Bare Spark start + count, then the two reports (with `baseline`'s delegate too, when
    given); `rounds` times, interleaved so that all of them see the same machine."""
    import sys

    exes = {"now": delegate_exe(), **({"baseline": baseline} if baseline else {})}
    bare: list[float] = []
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in exes}
    for n in range(rounds):
        bare.append(run([sys.executable, "-c", BARE_SPARK], dict(os.environ)))
        for name, exe in exes.items():
            where = work / f"{name}-{n}"
            times[name].append(_report_twice(exe, where / "state", where, seed=100 + 2 * n))
    out: dict[str, object] = {
        "rounds": rounds,
        "bare_spark_start_and_count_s": [round(v, 2) for v in bare],
    }
    for name, pairs in times.items():
        first = statistics.median(p[0] for p in pairs)
        second = statistics.median(p[1] for p in pairs)
        out[name] = {
            "exe": exes[name],
            "report_100_jobs_s": [round(p[0], 2) for p in pairs],
            "report_after_10_new_jobs_s": [round(p[1], 2) for p in pairs],
            "first_over_bare": round(first / statistics.median(bare), 2),
            "second_over_first": round(second / first, 2),
            "meets_targets": first <= 1.3 * statistics.median(bare) and second <= 0.5 * first,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--work", type=Path, default=None, help="keep the data here")
    parser.add_argument("--small", action="store_true", help="100 jobs beside a bare Spark")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --small")
    parser.add_argument("--baseline", help="another delegate executable to time beside this one")
    args = parser.parse_args()
    if args.small:
        with tempfile.TemporaryDirectory(prefix="delegate-report-bench-") as tmp:
            small = measure_small(args.work or Path(tmp), args.rounds, args.baseline)
        emit({"benchmark": "delegate report of 100 jobs vs a bare SparkSession", **small})
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="delegate-report-bench-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results = {str(size): measure(size, work) for size in sizes}
    out: dict[str, object] = {
        "benchmark": "delegate report vs DuckDB",
        "sizes": results,
        "target": "10M events from compacted Parquet in <= 60 s",
    }
    if len(sizes) >= 2:
        small, large = results[str(sizes[0])], results[str(sizes[-1])]
        out["scaling_report"] = round(
            float(large["report_from_parquet_s"]) / float(small["report_from_parquet_s"]), 2
        )
        out["meets_target"] = float(large["report_from_parquet_s"]) <= 60
    emit(out)


if __name__ == "__main__":
    main()
