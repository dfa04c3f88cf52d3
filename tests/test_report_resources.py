"""The report shows what jobs used (issue 32, item 4): peak memory and CPU seconds of the jobs
run with limits, the egress of the sandboxed ones, the slowest and hungriest jobs, and the hosts
reached, on a real local SparkSession.

The history is written by the toolkit's own writers in a real state directory: each job
registered (a sandboxed one with its box in `launch`, as submit records it), started and ended
through `end_job`; a limited job's figures put in its record as runtime/limited puts them
(`registry.update(peak_memory_bytes=..., cpu_s=...)`); each egress line written by the real
egress proxy (runtime/egress) for a real connection through it, to a local server or refused.
The expected figures are worked out here by hand.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import pytest

pytest.importorskip("pyspark")

from delegate.core.model import JobState
from delegate.core.sandbox import Box
from delegate.report import figures, usage
from delegate.report.common import Report
from delegate.report.text import print_report
from delegate.runtime.egress import EgressProxy
from delegate.services.jobs.finish import end_job
from delegate.services.report import run_report
from delegate.services.state import State

from .test_report_incremental import _from_scratch

GENERATED = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
MiB = 1024 * 1024
REPLY = 1000  # bytes the local server sends back on each connection
BAD = "?"  # the host of a request that named none (runtime/egress)


class Upstream(NamedTuple):
    port: int
    host: str = "127.0.0.1"


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """A TCP server on 127.0.0.1 that reads each connection to its end, then replies REPLY
    bytes and closes."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass
            conn.sendall(b"r" * REPLY)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield Upstream(server.getsockname()[1])
    server.close()


def _head(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _connect(path: Path, request: bytes, payload: bytes = b"") -> bytes:
    """One connection through the proxy at `path`: the request head, then (when the proxy
    lets it through) `payload` and everything the host sends back; the proxy's answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(path))
        conn.sendall(request)
        answer = _head(conn)
        if answer.startswith(b"HTTP/1.1 200"):
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := conn.recv(65536):
                got += chunk
            assert len(got) == REPLY
        return answer


def _tunnel(target: str) -> bytes:
    return f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()


class Planned(NamedTuple):
    agent: str
    ends: str = "completed"  # or "error"
    peak: int | None = None  # peak_memory_bytes in its record
    cpu: float | None = None  # cpu_s in its record
    proxy: bool = False  # sandboxed, its network an allowlist (through the egress proxy)
    sent: tuple[int, ...] = ()  # one connection to the upstream per figure: bytes sent
    refused: int = 0  # connections to a host off the allowlist
    bad: int = 0  # requests that named no host
    wait_s: float = 0.0  # how long it runs


# `slow` runs longest; claude's jobs have every kind of figure; codex's `quiet` sat behind a
# proxy and connected nowhere, `cpu_only` has a CPU figure and no memory figure; shell's
# jobs have none.
PLAN = {
    "both": Planned("claude", peak=300 * MiB, cpu=12.5, proxy=True, sent=(100, 50), refused=1),
    "limited": Planned("claude", "error", peak=500 * MiB, cpu=30.0),
    "slow": Planned("claude", wait_s=0.4),
    "quiet": Planned("codex", proxy=True),
    "cpu_only": Planned("codex", cpu=2.0),
    "plain": Planned("shell"),
    "sandboxed": Planned("codex", "error", proxy=True, sent=(10,), refused=1, bad=1),
}


def _box(hosts: tuple[str, ...]) -> dict[str, Any]:
    return Box("/usr/bin/bwrap", ("/home",), network="allowlist", allow_hosts=hosts).to_dict()


def _run(state: State, planned: Planned, upstream: Upstream, folder: Path) -> str:
    """One job as the toolkit runs it (module doc); its id."""
    launch = {"sandbox": _box((upstream.host,))} if planned.proxy else {}
    job, _ = state.registry.register(agent=planned.agent, workdir="/tmp", launch=launch)
    state.registry.transition(job.job_id, JobState.RUNNING)
    if planned.proxy:
        proxy = EgressProxy(
            folder / f"{job.job_id}.sock",
            (upstream.host,),
            # what the wrapper's _egress_said writes for each connection
            lambda said: state.audit.append(job.job_id, usage.EGRESS, **said),
        )
        for size in planned.sent:
            target = f"{upstream.host}:{upstream.port}"
            assert _connect(proxy.path, _tunnel(target), b"s" * size).startswith(b"HTTP/1.1 200")
        for _ in range(planned.refused):
            assert _connect(proxy.path, _tunnel("evil.example:443")).startswith(b"HTTP/1.1 403")
        for _ in range(planned.bad):
            assert _connect(proxy.path, b"NONSENSE\r\n\r\n").startswith(b"HTTP/1.1 400")
        proxy.close()  # every connection said
    time.sleep(planned.wait_s)
    if planned.peak is not None or planned.cpu is not None:  # as runtime/limited.ended does
        state.registry.update(job.job_id, peak_memory_bytes=planned.peak, cpu_s=planned.cpu)
    if planned.ends == "completed":
        end_job(state, job.job_id, JobState.COMPLETED)
    else:
        end_job(state, job.job_id, JobState.ERROR, reason="agent_exited: exit status 1")
    return job.job_id


@pytest.fixture
def history(state: State, upstream: Upstream, tmp_path: Path) -> dict[str, str]:
    """PLAN's jobs run; their ids by name."""
    sockets = tmp_path / "s"
    sockets.mkdir()
    return {name: _run(state, planned, upstream, sockets) for name, planned in PLAN.items()}


def _json_report(state: State, out: Path) -> dict[str, Any]:
    [path] = run_report(state, master="local[1]", fmt="json", out=out).written
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _figures(row: dict[str, Any]) -> tuple[Any, ...]:
    return (
        row["jobs"],
        row["limited_jobs"],
        row["peak_memory_bytes"],
        row["cpu_s"],
        row["sandboxed_jobs"],
        row["egress_connections"],
        row["egress_refused"],
        row["egress_sent"],
        row["egress_received"],
    )


# (jobs, with limits, highest peak, CPU seconds, behind a proxy, connections, refused, sent,
# received), worked out from PLAN
CLAUDE = (3, 2, 500 * MiB, 42.5, 1, 3, 1, 150, 2 * REPLY)
CODEX = (3, 1, None, 2.0, 2, 3, 1, 10, REPLY)


def test_usage_per_agent_per_day_and_in_totals(
    spark, state: State, history: dict[str, str], upstream: Upstream, tmp_path: Path
):
    assert usage.EGRESS == "egress"  # the kind the wrapper writes (runtime/wrapper._egress_said)
    data = _json_report(state, tmp_path / "out")
    agents = {row["agent"]: _figures(row) for row in data["usage_agents"]}
    assert agents == {"claude": CLAUDE, "codex": CODEX}  # shell's jobs had no figure: no row
    totals = data["totals"]
    assert (totals["limited_jobs"], totals["peak_memory_bytes"], totals["cpu_s"]) == (
        3,
        500 * MiB,
        44.5,
    )
    assert (totals["sandboxed_jobs"], totals["egress_connections"], totals["egress_refused"]) == (
        3,
        6,
        2,
    )
    assert (totals["egress_sent"], totals["egress_received"]) == (160, 3 * REPLY)

    jobs = {job["job_id"]: job for job in data["jobs"]}
    by_name = {name: jobs[job_id] for name, job_id in history.items()}
    # no figure is none, never 0; a job behind a proxy that connected nowhere has 0 of each
    for name in ("slow", "plain"):
        job = by_name[name]
        assert job["peak_memory_bytes"] is None and job["cpu_s"] is None, name
        assert job["egress_connections"] is None and job["egress_sent"] is None, name
    quiet = by_name["quiet"]
    assert (quiet["egress_connections"], quiet["egress_sent"], quiet["peak_memory_bytes"]) == (
        0,
        0,
        None,
    )
    assert by_name["cpu_only"]["peak_memory_bytes"] is None
    assert by_name["sandboxed"]["egress_refused"] == 1  # the request naming no host: not refused
    assert "egress_hosts" not in quiet  # per host: the hosts table

    # per day: every job here ended the same day, unless the test ran across midnight (UTC)
    days: dict[str, list[str]] = {}
    for name, job in by_name.items():
        days.setdefault(job["ended_at"][:10], []).append(name)
    assert [row["day"] for row in data["usage_days"]] == sorted(
        day for day, names in days.items() if set(names) - {"slow", "plain"}
    )
    if len(days) == 1:  # every job of the day, shell's too
        [row] = data["usage_days"]
        assert _figures(row) == (7, 3, 500 * MiB, 44.5, 3, 6, 2, 160, 3 * REPLY)


def test_top_jobs_and_hosts(
    spark, state: State, history: dict[str, str], upstream: Upstream, tmp_path: Path
):
    data = _json_report(state, tmp_path / "out")
    names = {job_id: name for name, job_id in history.items()}
    top: dict[str, list[tuple[int, str, Any]]] = {}
    for row in data["top_jobs"]:
        top.setdefault(row["by"], []).append((row["rank"], names[row["job_id"]], row[row["by"]]))
    assert top["peak_memory_bytes"] == [(1, "limited", 500 * MiB), (2, "both", 300 * MiB)]
    assert top["cpu_s"] == [(1, "limited", 30.0), (2, "both", 12.5), (3, "cpu_only", 2.0)]
    slowest = top["duration_s"]
    assert [rank for rank, _, _ in slowest] == [1, 2, 3, 4, 5]  # 5 of the 7
    assert slowest[0][1] == "slow" and slowest[0][2] >= 0.4
    assert [d for _, _, d in slowest] == sorted((d for _, _, d in slowest), reverse=True)
    limited = next(r for r in data["top_jobs"] if r["by"] == "cpu_s" and r["rank"] == 1)
    assert (limited["agent"], limited["status"], limited["failure_reason"]) == (
        "claude",
        "error",
        "agent_exited",
    )

    hosts = [
        (h["host"], h["port"], h["jobs"], h["connections"], h["refused"], h["sent"], h["received"])
        for h in data["hosts"]
    ]
    assert hosts == [
        (upstream.host, upstream.port, 2, 3, 0, 160, 3 * REPLY),
        ("evil.example", 443, 2, 2, 2, 0, 0),
        (BAD, 0, 1, 1, 0, 0, 0),
    ]


def _table(out: str, title: str) -> dict[str, list[str]]:
    """A printed table's rows by their first cell (after its title's line and its header)."""
    text = out.split(title, 1)[1].split("\n\n", 1)[0]
    return {line.split()[0]: line.split()[1:] for line in text.splitlines()[2:]}


def test_usage_in_the_terminal_page_and_parquet(
    spark, state: State, history: dict[str, str], upstream: Upstream, tmp_path: Path, capsys
):
    data = _json_report(state, tmp_path / "out")
    report = Report(**{name: data[name] for name in Report._fields})
    print_report(report, width=160, generated_at=GENERATED, tz=UTC)
    out = capsys.readouterr().out
    assert (
        "resources: 3 of 7 jobs with limits: peak memory 500 MiB, CPU 44.5 s; 3 jobs behind an"
        " egress proxy: 6 connections, 2 refused, 160 B sent, 2.9 KiB received"
    ) in out
    assert _table(out, "resources per agent") == {
        "claude": ["3", "2", "500", "MiB", "42.5", "s", "1", "3", "1", "150", "B", "2", "KiB"],
        "codex": ["3", "1", "-", "2.0", "s", "2", "3", "1", "10", "B", "1000", "B"],
    }
    cpu = _table(out, "most CPU time")
    ranked = [history[name] for name in ("limited", "both", "cpu_only")]
    assert [row[0] for row in cpu.values()] == ranked
    assert list(cpu) == ["1", "2", "3"] and cpu["1"][1:3] == ["claude", "error"]
    assert "slowest jobs" in out and "most memory" in out
    hosts = _table(out, "hosts through an egress proxy")
    assert hosts[f"{upstream.host}:{upstream.port}"] == ["2", "3", "0", "160", "B", "2.9", "KiB"]
    assert hosts["evil.example:443"] == ["2", "2", "2", "0", "B", "0", "B"]
    assert "(no host named)" in out  # the request that named none

    [page] = run_report(state, master="local[1]", fmt="html", out=tmp_path / "page").written
    html = page.read_text()
    assert "3 of 7 jobs with limits: peak memory 500 MiB, CPU 44.5 s" in html
    for table in ("usage-agents", "usage-days", "top-duration-s", "top-cpu-s", "hosts"):
        assert f'id="{table}-table"' in html, table

    written = run_report(state, master="local[1]", fmt="parquet", out=tmp_path / "pq").written
    names = {"usage_agents", "usage_days", "top_jobs", "hosts", "jobs"}
    assert {p.name for p in written} >= {f"{name}.parquet" for name in names}


def test_without_figures_the_report_says_so(spark, state: State, tmp_path: Path, capsys):
    for agent in ("shell", "claude"):
        job, _ = state.registry.register(agent=agent, workdir="/tmp")
        state.registry.transition(job.job_id, JobState.RUNNING)
        end_job(state, job.job_id, JobState.COMPLETED)
    data = _json_report(state, tmp_path / "out")
    assert data["usage_agents"] == [] and data["usage_days"] == [] and data["hosts"] == []
    assert (data["totals"]["limited_jobs"], data["totals"]["sandboxed_jobs"]) == (0, 0)
    assert data["totals"]["peak_memory_bytes"] is None and data["totals"]["cpu_s"] is None
    assert {row["by"] for row in data["top_jobs"]} == {"duration_s"}  # every job has one
    report = Report(**{name: data[name] for name in Report._fields})
    print_report(report, width=120, generated_at=GENERATED, tz=UTC)
    out = capsys.readouterr().out
    assert "resources: no job has memory, CPU or egress figures" in out
    assert "resources per agent" not in out and "most memory" not in out


def test_egress_survives_summaries_and_equals_a_report_from_scratch(
    spark, state: State, history: dict[str, str], upstream: Upstream, tmp_path: Path
):
    """The egress figures travel through the per-job summaries kept between reports (and
    through the Python reading of a small history) as a report from scratch computes them."""
    first = _json_report(state, tmp_path / "first")
    again = _json_report(state, tmp_path / "again")  # from the kept summaries
    scratch = _from_scratch(spark, state.layout.logs)  # Spark's reader, no records
    assert again["hosts"] == first["hosts"] == scratch["hosts"]
    for key in ("egress_connections", "egress_refused", "egress_sent", "egress_received"):
        assert again["totals"][key] == scratch["totals"][key] == first["totals"][key]
    # without the records (another state dir's logs) there is no memory or CPU figure
    assert scratch["totals"]["limited_jobs"] == 0 and scratch["totals"]["cpu_s"] is None
    # ... and the quiet job behind a proxy, known only from its record, has no egress figure
    assert scratch["totals"]["sandboxed_jobs"] == 2
    assert figures.LINE_SCHEMA.names[-len(usage.EGRESS_FIELDS) :] == [
        f.name for f in usage.EGRESS_FIELDS
    ]
