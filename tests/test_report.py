"""`delegate report` on a real local SparkSession, checked against plain Python.

The expected figures are computed here, line by line with json and datetime, not by the code
under test; the edge cases are hand-written logs with hand-worked answers.
"""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from delegate.report.compact import compact, read_store
from delegate.report.figures import compute, read_ndjson, read_status
from delegate.report.generator import Spec, generate

from .helpers import assert_one_line_error, run_cli

TERMINAL = {"completed", "error", "cancelled"}
READ = ("ts", "kind", "job_id", "seq", "event", "status", "previous", "error", "reason")


def _time(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def plain_report(logs: Path) -> dict[str, Any]:
    """Every figure of the report, the slow and obvious way."""
    lines, malformed, seen = [], 0, set()
    for path in sorted(logs.glob("*/events.ndjson")):
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]  # a last line without newline is unfinished
        for raw in complete.splitlines():
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except ValueError:
                malformed += 1
                continue
            if not isinstance(obj, dict) or not obj.get("job_id") or not obj.get("kind"):
                malformed += 1
                continue
            if _time(obj.get("ts")) is None:
                malformed += 1
                continue
            key = tuple(json.dumps(obj.get(c)) for c in READ)
            if key not in seen:
                seen.add(key)
                lines.append(obj)
    status = {}
    for path in logs.glob("*/status.json"):
        try:
            record = json.loads(path.read_text())
            status[record["job_id"]] = record
        except (ValueError, KeyError):
            continue
    per_job: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "registered": [],
            "ended": [],
            "changes": [],
            "events": {},
            "rejected": {},
            "times": [],
        }
    )
    for obj in lines:
        job, t, kind = per_job[obj["job_id"]], _time(obj["ts"]), obj["kind"]
        job["times"].append(t)
        if kind == "registered":
            job["registered"].append(t)
        elif kind == "status_changed":
            job["changes"].append((t, obj.get("status")))
            if obj.get("status") in TERMINAL:
                job["ended"].append((t, obj.get("error")))
        elif kind in ("published", "received") and obj.get("seq") is not None:
            seq = obj["seq"]
            if seq not in job["events"] or t < job["events"][seq][0]:
                job["events"][seq] = (t, obj.get("event"))
        elif kind == "rejected" and obj.get("reason"):
            job["rejected"][obj["reason"]] = job["rejected"].get(obj["reason"], 0) + 1
    jobs = {}
    for job_id, job in per_job.items():
        registered = min(job["registered"]) if job["registered"] else None
        ended, ended_error = min(job["ended"], key=lambda e: e[0]) if job["ended"] else (None, None)
        last_status = max(job["changes"], key=lambda c: c[0])[1] if job["changes"] else None
        record = status.get(job_id, {})
        state = record.get("status") or last_status or "pending"
        error = record.get("error") if isinstance(record.get("error"), str) else ended_error
        reason = None
        if state == "error":
            reason = (error or "").split(":")[0].strip() or "unknown"
        times = sorted((t, seq) for seq, (t, _event) in job["events"].items())
        gaps = [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(times)]
        jobs[job_id] = {
            "status": state,
            "error": error,
            "failure_reason": reason,
            "first_seen": min(job["times"]),
            "last_seen": max(job["times"]),
            "agent": record.get("agent") or "-",
            "session": record.get("session") or "-",
            "registered": registered,
            "ended": ended,
            "duration_s": (ended - registered).total_seconds() if ended and registered else None,
            "time_to_first_event_s": (times[0][0] - registered).total_seconds()
            if times and registered
            else None,
            "events": len(times),
            "longest_silence_s": max(gaps) if gaps else None,
            "permission_requests": sum(
                1 for _t, event in job["events"].values() if event == "permission_required"
            ),
            "rejected_by_reason": job["rejected"] or None,
        }

    def group(key: str) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for job in jobs.values():
            g = out.setdefault(
                job[key], {"jobs": 0, "completed": 0, "error": 0, "cancelled": 0, "durations": []}
            )
            g["jobs"] += 1
            if job["status"] in TERMINAL:
                g[job["status"]] += 1
            if job["duration_s"] is not None:
                g["durations"].append(job["duration_s"])
        for g in out.values():
            ended = g["completed"] + g["error"] + g["cancelled"]
            g["success_rate"] = g["completed"] / ended if ended else None
            g["p50_duration_s"] = _percentile(g["durations"], 0.5)
            g["p95_duration_s"] = _percentile(g["durations"], 0.95)
            del g["durations"]
        return out

    days: dict[str, dict[str, int]] = defaultdict(
        lambda: {"submitted": 0, "completed": 0, "failed": 0}
    )
    for job in jobs.values():
        if job["registered"]:
            days[job["registered"].date().isoformat()]["submitted"] += 1
        if job["ended"] and job["status"] == "completed":
            days[job["ended"].date().isoformat()]["completed"] += 1
        if job["ended"] and job["status"] == "error":
            days[job["ended"].date().isoformat()]["failed"] += 1
    by_reason: dict[str, list[str]] = defaultdict(list)
    for job_id, job in jobs.items():
        if job["failure_reason"]:
            by_reason[job["failure_reason"]].append(job_id)
    failures = [
        {
            "reason": reason,
            "jobs": len(ids),
            "examples": sorted(
                ids,
                key=lambda i: (jobs[i]["registered"] or jobs[i]["first_seen"], i),
                reverse=True,
            )[:3],
        }
        for reason, ids in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    ]
    return {
        "failures": failures,
        "covers": (
            min((j["first_seen"] for j in jobs.values()), default=None),
            max((j["last_seen"] for j in jobs.values()), default=None),
        ),
        "jobs": jobs,
        "agents": group("agent"),
        "sessions": group("session"),
        "days": dict(days),
        "malformed": malformed,
    }


def spark_report(spark, logs: Path, **kwargs):
    lines, malformed = read_ndjson(spark, [str(p) for p in sorted(logs.glob("*/events.ndjson"))])
    return compute(
        lines, read_status(spark, str(logs / "*" / "status.json")), malformed=malformed, **kwargs
    )


def close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)


def assert_same(report, expected: dict[str, Any]) -> None:
    assert report.totals["malformed_lines"] == expected["malformed"]
    assert {j["job_id"] for j in report.jobs} == set(expected["jobs"])
    for job in report.jobs:
        want = expected["jobs"][job["job_id"]]
        for field in (
            "status",
            "agent",
            "session",
            "events",
            "permission_requests",
            "error",
            "failure_reason",
        ):
            assert job[field] == want[field], (job["job_id"], field)
        for field in ("duration_s", "time_to_first_event_s", "longest_silence_s"):
            assert close(job[field], want[field]), (job["job_id"], field, job[field], want[field])
        assert job["rejected_by_reason"] == want["rejected_by_reason"], job["job_id"]
    for name in ("agents", "sessions"):
        key = name[:-1]
        got = {row[key]: row for row in getattr(report, name)}
        assert set(got) == set(expected[name])
        for value, want in expected[name].items():
            for field, number in want.items():
                assert close(got[value][field], number), (name, value, field)
    assert report.failures == expected["failures"]
    first, last = expected["covers"]
    assert _time(report.totals["covers_from"]) == first
    assert _time(report.totals["covers_to"]) == last
    got_days = {row["day"].isoformat(): row for row in report.days}
    assert set(got_days) == set(expected["days"])
    for day, want in expected["days"].items():
        for field, number in want.items():
            assert got_days[day][field] == number, (day, field)


def test_every_figure_matches_plain_python(spark, tmp_path: Path):
    logs = tmp_path / "logs"
    generate(
        logs, Spec(jobs=80, events_per_job=12, seed=7, p_malformed_line=0.01, p_duplicate_line=0.03)
    )
    report = spark_report(spark, logs)
    expected = plain_report(logs)
    assert report.totals["jobs"] == 80
    assert report.totals["malformed_lines"] > 0  # the generator did make some
    assert any(j["status"] == "running" for j in report.jobs)
    assert any(j["rejected_by_reason"] for j in report.jobs)
    assert len(report.failures) >= 2  # the generator's jobs fail for several reasons
    assert_same(report, expected)


def _line(t: str, kind: str, job: str, **fields: Any) -> str:
    return json.dumps({"ts": t, "kind": kind, "job_id": job, **fields}) + "\n"


def write_edge_cases(logs: Path) -> None:
    a, b, c = "0000000a", "0000000b", "0000000c"
    ev = lambda t, kind, seq, event: _line(t, kind, a, seq=seq, event=event)  # noqa: E731
    lines_a = [
        _line("2026-11-21T23:59:50.000000Z", "registered", a, status="pending"),
        ev("2026-11-21T23:59:55.000000Z", "published", 1, "started"),
        _line(
            "2026-11-21T23:59:55.100000Z",
            "status_changed",
            a,
            previous="pending",
            status="running",
            error=None,
        ),
        ev("2026-11-21T23:59:55.500000Z", "received", 1, "started"),
        ev("2026-11-22T00:00:05.000000Z", "published", 2, "progress"),
        ev("2026-11-22T00:00:05.000000Z", "published", 2, "progress"),  # duplicate line
        _line("2026-11-22T00:00:06.000000Z", "rejected", a, reason="bad_signature", seq=2),
        "this line is not json\n",
        '{"kind": "published", "job_id": "0000000a", "seq": 9}\n',  # no time: malformed
        ev("2026-11-22T00:00:35.000000Z", "published", 3, "permission_required"),
        ev("2026-11-22T00:01:35.000000Z", "published", 4, "completed"),
        _line(
            "2026-11-22T00:01:35.000000Z",
            "status_changed",
            a,
            previous="running",
            status="completed",
            error=None,
        ),
    ]
    lines_b = [_line("2026-11-21T10:00:00.000000Z", "registered", b, status="pending")]
    lines_c = [
        _line("2026-11-22T09:00:00.000000Z", "registered", c, status="pending"),
        _line("2026-11-22T09:00:02.000000Z", "published", c, seq=1, event="started"),
        _line(
            "2026-11-22T09:00:02.000000Z",
            "status_changed",
            c,
            previous="pending",
            status="running",
            error=None,
        ),
        _line("2026-11-22T09:00:12.000000Z", "published", c, seq=2, event="progress"),
    ]
    for job, lines, state, agent in (
        (a, lines_a, "completed", "claude"),
        (b, lines_b, "pending", "codex"),
        (c, lines_c, "running", "claude"),
    ):
        (logs / job).mkdir(parents=True)
        (logs / job / "events.ndjson").write_text("".join(lines))
        (logs / job / "status.json").write_text(
            json.dumps({"job_id": job, "status": state, "agent": agent, "session": f"dlg-{job}"})
            + "\n"
        )


def test_edge_cases_by_hand(spark, tmp_path: Path):
    logs = tmp_path / "logs"
    write_edge_cases(logs)
    report = spark_report(spark, logs)
    jobs = {j["job_id"]: j for j in report.jobs}
    a, b, c = jobs["0000000a"], jobs["0000000b"], jobs["0000000c"]
    # across midnight: registered 23:59:50, completed 00:01:35 the next day
    assert (a["status"], a["duration_s"], a["time_to_first_event_s"]) == ("completed", 105.0, 5.0)
    assert a["events"] == 4  # published and received of seq 1 count once, the duplicate once
    assert a["longest_silence_s"] == 60.0
    assert a["permission_requests"] == 1 and a["rejected_by_reason"] == {"bad_signature": 1}
    # no events at all
    assert (b["status"], b["events"], b["duration_s"]) == ("pending", 0, None)
    assert b["time_to_first_event_s"] is None and b["longest_silence_s"] is None
    # still running
    assert (c["status"], c["duration_s"], c["events"], c["longest_silence_s"]) == (
        "running",
        None,
        2,
        10.0,
    )
    assert report.totals["malformed_lines"] == 2
    days = {
        d["day"].isoformat(): (d["submitted"], d["completed"], d["failed"]) for d in report.days
    }
    assert days == {"2026-11-21": (2, 0, 0), "2026-11-22": (1, 1, 0)}
    claude = next(g for g in report.agents if g["agent"] == "claude")
    assert (claude["jobs"], claude["completed"], claude["success_rate"]) == (2, 1, 1.0)
    assert claude["p50_duration_s"] == 105.0
    assert_same(report, plain_report(logs))
    since = spark_report(spark, logs, since=datetime(2026, 11, 22).date())
    assert [j["job_id"] for j in since.jobs] == ["0000000c"]


def test_compaction_is_incremental_and_changes_no_figure(spark, tmp_path: Path):
    logs, store = tmp_path / "logs", tmp_path / "analytics"
    generate(logs, Spec(jobs=30, seed=3))
    first = compact(spark, logs, store)
    assert first["lines"] > 0
    again = compact(spark, logs, store)
    assert again == {"lines": 0, "malformed": 0}  # old JSON is not read again
    # more history arrives: a new job, and lines appended to an old one
    generate(tmp_path / "more", Spec(jobs=3, seed=99))
    for folder in (tmp_path / "more").iterdir():
        shutil.move(str(folder), logs / folder.name)
    old = sorted(logs.glob("*/events.ndjson"))[0]
    job_id = old.parent.name
    with old.open("a") as handle:
        handle.write(_line("2026-11-25T00:00:00.000000Z", "rejected", job_id, reason="not_json"))
        handle.write(
            _line("2026-11-25T00:00:01.000000Z", "rejected", job_id, reason="not_json")[:20]
        )
    pending_tail = sum(p.read_text().count("\n") for p in (logs).glob("*/events.ndjson"))
    lines, malformed = read_store(spark, logs, store)  # compacted + not yet compacted lines
    status = read_status(spark, str(logs / "*" / "status.json"))
    assert_same(compute(lines, status, malformed=malformed), plain_report(logs))
    third = compact(spark, logs, store)
    added = sum(p.read_text().count("\n") for p in logs.glob("*/events.ndjson"))
    assert third["lines"] == added - first["lines"] == pending_tail - first["lines"]
    lines, malformed = read_store(spark, logs, store)
    assert_same(compute(lines, status, malformed=malformed), plain_report(logs))
    assert sorted(p.name for p in (store / "events").iterdir() if p.is_dir())[0].startswith("day=")


def test_compaction_through_hadoop_filesystem_uris(spark, tmp_path: Path):
    """The same incremental compaction on a URI (here file://, through Hadoop's FileSystem
    API, the path hdfs:// and s3a:// take)."""
    from delegate.report.compact import HadoopFiles, files_for

    logs = tmp_path / "logs"
    generate(logs, Spec(jobs=10, seed=21))
    logs_uri, store_uri = logs.as_uri(), (tmp_path / "analytics").as_uri()
    assert isinstance(files_for(spark, logs_uri, store_uri), HadoopFiles)
    first = compact(spark, logs_uri, store_uri)
    total = sum(p.read_text().count("\n") for p in logs.glob("*/events.ndjson"))
    assert first["lines"] == total
    generate(tmp_path / "more", Spec(jobs=2, seed=22))
    for folder in (tmp_path / "more").iterdir():
        shutil.move(str(folder), logs / folder.name)
    second = compact(spark, logs_uri, store_uri)
    assert (
        second["lines"]
        == sum(p.read_text().count("\n") for p in logs.glob("*/events.ndjson")) - total
    )
    lines, malformed = read_store(spark, logs_uri, store_uri)
    status = read_status(spark, str(logs / "*" / "status.json"))
    assert_same(compute(lines, status, malformed=malformed), plain_report(logs))


def test_html_report_renders_in_headless_chromium(spark, tmp_path: Path):
    from delegate.report.output import write

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "make installs chromium for this test"
    logs = tmp_path / "logs"
    generate(logs, Spec(jobs=25, seed=5))
    [page] = write(spark_report(spark, logs), None, "html", tmp_path / "out")
    assert "http" not in page.read_text().split("<body>")[0]  # nothing fetched from the network
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    for chart in ("durations", "outcomes", "agents"):
        section = dom.stdout.split(f'id="chart-{chart}"', 1)[1].split("</figure>", 1)[0]
        assert "<svg" in section and ("<path" in section or "<rect" in section), chart
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri()],
        capture_output=True,
        timeout=120,
        check=True,
    )
    from matplotlib import image

    pixels = image.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05  # a real page, not a blank one


def _coordination(home: Path) -> None:
    """Locks and claims on an injected clock: holds of 30 s and 10 s on `db`, a claim that
    expired after 60 s and was taken over, and a grant that waited 2.5 s."""
    from delegate.coord import leases
    from delegate.coord.store import CoordStore

    now = [1_800_000_000_000]
    store = CoordStore(home / "coord.db", now=lambda: now[0])
    leases.acquire(store, "lock", "db", "a", ttl_s=600)
    now[0] += 30_000
    leases.release(store, "lock", "db", "a")
    leases.acquire(store, "lock", "db", "b", ttl_s=600)
    now[0] += 10_000
    leases.release(store, "lock", "db", "b")
    leases.acquire(store, "claim", "t1", "c", ttl_s=60)
    now[0] += 100_000
    leases.acquire(store, "claim", "t1", "d", ttl_s=60)
    with store.write() as conn:  # as a grant that had to wait would log it
        store.record(conn, "lock_acquired", "e", "db", token=3, ttl_ms=1000, waited_ms=2500)
    store.close()


def test_report_cli_json_and_bad_input(tmp_path: Path):
    home = tmp_path / "state"
    generate(home / "logs", Spec(jobs=12, seed=11))
    _coordination(home)
    out = tmp_path / "out"
    result = run_cli(
        home,
        "report",
        "--format",
        "json",
        "--out",
        str(out),
        "--compact",
        "--master",
        "local[1]",
        "--verbose",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # --verbose lets Spark's own lines through (without it they go to analytics/spark.log)
    assert "WARN" in result.stderr or "log4j" in result.stderr.lower(), result.stderr[-3000:]
    data = json.loads((out / "report.json").read_text())
    assert data["totals"]["jobs"] == 12
    assert datetime.fromisoformat(data["generated_at"]).tzinfo is not None
    held = {(r["type"], r["resource"]): r for r in data["resources"]}
    db, t1 = held[("lock", "db")], held[("claim", "t1")]
    assert (db["grants"], db["holds"], db["avg_hold_s"], db["max_hold_s"]) == (3, 2, 20.0, 30.0)
    assert db["max_wait_s"] == 2.5 and abs(db["avg_wait_s"] - 2.5 / 3) < 1e-9
    assert (t1["grants"], t1["holds"], t1["avg_hold_s"], t1["broken"]) == (2, 1, 60.0, 0)
    assert "compacted" in result.stderr
    for args in (
        ["--since", "yesterday"],
        ["--format", "xml"],
        ["--logs", str(tmp_path / "nowhere")],
    ):
        assert_one_line_error(run_cli(home, "report", *args))


def test_report_without_java_says_what_is_missing(tmp_path: Path):
    home = tmp_path / "state"
    generate(home / "logs", Spec(jobs=2))
    result = run_cli(home, "report", env={"PATH": "/nonexistent", "JAVA_HOME": ""})
    assert_one_line_error(result)
    assert result.returncode == 69 and "Java" in result.stderr


def test_cost_and_tokens_reach_the_report(spark, tmp_path: Path):
    """What agents' channels report (status.json: cost_usd, tokens) per job, agent and day."""
    logs = tmp_path / "logs"
    jobs = {
        "0000000a": ("claude", 0.5, 100, 10),
        "0000000b": ("claude", 0.25, 50, 5),
        "0000000c": ("shell", None, None, None),
    }
    for job_id, (agent, cost, tokens_in, tokens_out) in jobs.items():
        folder = logs / job_id
        folder.mkdir(parents=True)
        lines = [
            {
                "ts": "2026-11-20T10:00:00Z",
                "kind": "registered",
                "job_id": job_id,
                "status": "pending",
            },
            {
                "ts": "2026-11-20T10:00:05Z",
                "kind": "status_changed",
                "job_id": job_id,
                "previous": "running",
                "status": "completed",
            },
        ]
        (folder / "events.ndjson").write_text("".join(json.dumps(x) + "\n" for x in lines))
        status = {
            "job_id": job_id,
            "status": "completed",
            "agent": agent,
            "session": "s",
            "error": None,
            "cost_usd": cost,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
        }
        (folder / "status.json").write_text(json.dumps(status))
    (logs / "0000000c" / "status.json").write_text(  # damaged numbers count as none
        json.dumps(
            {
                "job_id": "0000000c",
                "status": "completed",
                "agent": "shell",
                "cost_usd": "lots",
                "tokens_in": True,
            }
        )
    )
    report = spark_report(spark, logs)
    by_job = {j["job_id"]: j for j in report.jobs}
    assert (by_job["0000000a"]["cost_usd"], by_job["0000000a"]["tokens_in"]) == (0.5, 100)
    assert by_job["0000000c"]["cost_usd"] is None and by_job["0000000c"]["tokens_in"] is None
    agents = {a["agent"]: a for a in report.agents}
    assert agents["claude"]["cost_usd"] == 0.75
    assert (agents["claude"]["tokens_in"], agents["claude"]["tokens_out"]) == (150, 15)
    assert agents["shell"]["cost_usd"] is None
    [day] = report.days
    assert day["cost_usd"] == 0.75
