"""The report as people read it: failures ranked by reason, durations in words, the time range
covered, start and end times, links to each job's logs; an HTML page checked in headless
Chromium at two widths, and the terminal report at a real terminal.

The expected figures are worked out here from the history itself (`HISTORY`), not by the code
under test.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest

pytest.importorskip("pyspark")

from delegate.core.timefmt import human_duration
from delegate.report.common import to_json
from delegate.report.figures import compute, read_ndjson, read_status

from .browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from .helpers import cli_env, delegate_cmd
from .pty_run import run_in_pty

START = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)
GENERATED = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
JVM_NOISE = re.compile(
    r"WARN|log4j|SLF4J|jdk\.|java|spark|Setting default log level|setLogLevel", re.IGNORECASE
)


class Job(NamedTuple):
    job_id: str
    agent: str
    session: str
    start_s: int  # after START
    duration_s: int | None  # None: still running
    status: str
    error: str | None  # as status.json says it
    line_error: str | None = None  # as the terminal status_changed line says it


# Three failure reasons, four, two and one jobs each; one failure is known only from its log
# line; two sessions hosted several jobs.
HISTORY = [
    Job("10000001", "claude", "nightly", 0, 252, "completed", None),
    Job("10000002", "claude", "nightly", 86400, 3725, "error", "agent_exited: exit status 3"),
    Job("10000003", "codex", "nightly", 2 * 86400, 95, "error", "agent_exited: exit status 1"),
    Job("1000000b", "codex", "dlg-1000000b", 500, 20, "error", "agent_exited: exit status 2"),
    Job("10000007", "claude", "dlg-10000007", 10000, 600, "error", "agent_exited: exit status 3"),
    Job("10000004", "shell", "dlg-10000004", 3600, 30, "error", "idle_timeout"),
    Job("10000005", "codex", "worker-1", 7200, 1800, "error", None, "idle_timeout: 30m silent"),
    Job("10000006", "shell", "worker-1", 9000, 5, "error", "launch_failed: tmux: no server"),
    Job("10000008", "codex", "dlg-10000008", 20000, 61, "completed", None),
    Job("10000009", "claude", "dlg-10000009", 30000, 40, "cancelled", None),
    Job("1000000a", "shell", "dlg-1000000a", 2 * 86400 + 3600, None, "running", None),
]
RUNNING_LAST_EVENT_S = 50  # the running job's last line, after its start


def _ts(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _line(moment: datetime, kind: str, job: str, **fields: Any) -> str:
    return json.dumps({"ts": _ts(moment), "kind": kind, "job_id": job, **fields}) + "\n"


def write_history(logs: Path) -> None:
    for job in HISTORY:
        start = START + timedelta(seconds=job.start_s)
        first = start + timedelta(seconds=min(2, job.duration_s or 2))
        lines = [
            _line(start, "registered", job.job_id, status="pending"),
            _line(first, "published", job.job_id, seq=1, event="started"),
            _line(first, "status_changed", job.job_id, previous="pending", status="running"),
        ]
        if job.duration_s is None:
            later = start + timedelta(seconds=RUNNING_LAST_EVENT_S)
            lines.append(_line(later, "published", job.job_id, seq=2, event="progress"))
        else:
            end = start + timedelta(seconds=job.duration_s)
            event = "completed" if job.status == "completed" else "error"
            lines += [
                _line(end, "published", job.job_id, seq=2, event=event),
                _line(
                    end,
                    "status_changed",
                    job.job_id,
                    previous="running",
                    status=job.status,
                    error=job.line_error or job.error,
                ),
            ]
        folder = logs / job.job_id
        folder.mkdir(parents=True)
        (folder / "events.ndjson").write_text("".join(lines))
        record = {
            "job_id": job.job_id,
            "status": job.status,
            "agent": job.agent,
            "session": job.session,
            "error": job.error,
        }
        (folder / "status.json").write_text(json.dumps(record) + "\n")


# --- what the history says, worked out by hand ----------------------------------------------


def expected_failures() -> list[tuple[str, int, list[str]]]:
    """(reason, jobs, up to three examples latest first), most jobs first."""
    reasons: dict[str, list[Job]] = {}
    for job in HISTORY:
        if job.status == "error":
            text = job.error or job.line_error or ""
            reasons.setdefault(text.split(":")[0], []).append(job)
    ranked = sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [
        (
            reason,
            len(jobs),
            [j.job_id for j in sorted(jobs, key=lambda j: j.start_s, reverse=True)[:3]],
        )
        for reason, jobs in ranked
    ]


def expected_range() -> tuple[datetime, datetime]:
    first = START + timedelta(seconds=min(j.start_s for j in HISTORY))
    last = max(
        START
        + timedelta(seconds=j.start_s + (j.duration_s if j.duration_s else RUNNING_LAST_EVENT_S))
        for j in HISTORY
    )
    return first, last


def test_the_expectations_are_the_ones_the_brief_asks_for():
    """A guard on the hand-worked history: three reasons with different counts, one of them
    with more examples than are shown, and durations that read as minutes and hours."""
    assert [(r, n) for r, n, _ in expected_failures()] == [
        ("agent_exited", 4),
        ("idle_timeout", 2),
        ("launch_failed", 1),
    ]
    assert expected_failures()[0][2] == ["10000003", "10000002", "10000007"]
    assert human_duration(252) == "4m 12s" and human_duration(3725) == "1h 02m"
    first, last = expected_range()
    assert (first, last) == (START, START + timedelta(days=2, seconds=3650))


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("people") / "state"
    write_history(home / "logs")
    return home


def _report(spark: Any, logs: Path) -> Any:
    lines, malformed = read_ndjson(spark, [str(p) for p in sorted(logs.glob("*/events.ndjson"))])
    return compute(lines, read_status(spark, str(logs / "*" / "status.json")), malformed=malformed)


def test_failures_are_ranked_by_reason_with_examples(spark, history: Path):
    report = _report(spark, history / "logs")
    got = [(f["reason"], f["jobs"], f["examples"]) for f in report.failures]
    assert got == expected_failures()
    by_id = {j["job_id"]: j for j in report.jobs}
    assert by_id["10000005"]["error"] == "idle_timeout: 30m silent"  # from its log line
    assert by_id["10000001"]["failure_reason"] is None
    first, last = expected_range()
    assert (report.totals["covers_from"], report.totals["covers_to"]) == (_ts(first), _ts(last))
    assert report.totals["failed"] == sum(1 for j in HISTORY if j.status == "error")
    # what --format json writes keeps its keys and adds the failures; machines keep seconds
    data = to_json(report)
    assert {"jobs", "agents", "sessions", "days", "totals", "resources"} <= set(data)
    assert [(f["reason"], f["jobs"], f["examples"]) for f in data["failures"]] == (
        expected_failures()
    )
    assert next(j for j in data["jobs"] if j["job_id"] == "10000001")["duration_s"] == 252.0


def test_terminal_tables_fit_80_columns(spark, history: Path, capsys: pytest.CaptureFixture[str]):
    from delegate.report.text import print_report

    report = _report(spark, history / "logs")
    print_report(report, width=80, generated_at=GENERATED, tz=UTC)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80, out
    assert "4m 12s" in out and "1h 02m" in out  # durations in words
    assert "Nov 20 08:00" in out and "Nov 22 09:00" in out  # the range covered, local time
    reasons = [line.split()[0] for line in lines if re.match(r"^\s*\w+\s+\d+\s+1000", line)]
    assert reasons == [r for r, _, _ in expected_failures()]
    # a per-session table only for the sessions that hosted more than one job
    sessions = Counter(j.session for j in HISTORY)
    for session, jobs in sessions.items():
        assert (session in out) == (jobs > 1), session


# --- the HTML page in a browser --------------------------------------------------------------

PAGE_FACTS = """() => {
  const rows = (id) => Array.from(document.querySelectorAll(`#${id} tbody tr`)).map(
    (tr) => Array.from(tr.cells).map((td) => td.innerText.trim()));
  const tables = Array.from(document.querySelectorAll("table")).map((t) => ({
    id: t.id, right: t.getBoundingClientRect().right }));
  return {
    scrollWidth: document.documentElement.scrollWidth,
    innerWidth: window.innerWidth,
    tables,
    failures: rows("failures-table"),
    exampleLinks: Array.from(document.querySelectorAll("#failures-table tbody tr")).map(
      (tr) => Array.from(tr.querySelectorAll("a")).map((a) => [a.innerText, a.href])),
    jobs: rows("jobs-table"),
    jobLinks: Array.from(document.querySelectorAll("#jobs-table tbody a.job")).map(
      (a) => [a.innerText, a.href]),
    jobHeaders: Array.from(document.querySelectorAll("#jobs-table thead th")).map(
      (th) => th.innerText.trim()),
    sessions: rows("sessions-table").map((r) => r[0]),
    range: document.getElementById("time-range").innerText,
    generated: document.getElementById("generated-at").innerText,
    charts: Array.from(document.querySelectorAll(".chart svg")).map(
      (s) => s.getBoundingClientRect().width),
  };
}"""


def _save(shot: Path) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    kept = ARTIFACTS / shot.name
    shutil.copyfile(shot, kept)
    print(f"screenshot: {shot}\nscreenshot: {kept}")
    return kept


@pytest.mark.timeout(600)
def test_html_report_in_chromium_at_two_widths(spark, history: Path, tmp_path: Path):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} to look at the page with")
    playwright = pytest.importorskip("playwright.sync_api")
    from delegate.report.output import write

    logs = history / "logs"
    [page_file] = write(
        _report(spark, logs),
        None,
        "html",
        tmp_path / "out",
        logs=str(logs),
        generated_at=GENERATED,
        tz=UTC,
    )
    head = page_file.read_text().split("<body>")[0]
    assert "http" not in head  # nothing fetched from the network
    first, last = expected_range()
    span = human_duration((last - first).total_seconds())
    want_range = f"Covers {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} ({span})"
    assert want_range == "Covers 2026-11-20 08:00 to 2026-11-22 09:00 (2d 01h)"
    failures = expected_failures()
    ended = {j.job_id: j for j in HISTORY}

    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for width in (1280, 800):
                page = browser.new_page(viewport={"width": width, "height": 900})
                page.goto(page_file.as_uri())
                facts = page.evaluate(PAGE_FACTS)
                shot = tmp_path / f"report-{width}px.png"
                page.screenshot(path=str(shot), full_page=True)
                _save(shot)

                # the window's width, and not a pixel more
                assert facts["innerWidth"] == width
                assert facts["scrollWidth"] <= facts["innerWidth"], (width, facts["scrollWidth"])
                for table in facts["tables"]:
                    assert table["right"] <= width, (width, table)
                assert all(w > width * 0.3 for w in facts["charts"]), facts["charts"]
                if width == 1280:
                    assert sum(facts["charts"]) > 0.8 * 1280  # the charts use the width

                # failures ranked by reason, with counts and examples linking to their logs
                shown = [(row[1], int(row[2]), row[4].split()) for row in facts["failures"]]
                assert shown == failures
                assert [row[0] for row in facts["failures"]] == ["1", "2", "3"]
                for (_reason, _count, examples), links in zip(
                    failures, facts["exampleLinks"], strict=True
                ):
                    assert links == [[j, (logs / j).as_uri() + "/"] for j in examples]

                # durations in words, start and end times per job
                header = facts["jobHeaders"]
                col = {name: header.index(name) for name in ("Job", "Started", "Ended")}
                duration = header.index("Duration")
                rows = {row[col["Job"]]: row for row in facts["jobs"]}
                assert set(rows) == set(ended)
                for job_id, job in ended.items():
                    start = START + timedelta(seconds=job.start_s)
                    assert rows[job_id][col["Started"]] == f"{start:%Y-%m-%d %H:%M:%S}"
                    if job.duration_s is None:
                        assert rows[job_id][duration] == "-"
                        assert rows[job_id][col["Ended"]] == "-"
                    else:
                        end = start + timedelta(seconds=job.duration_s)
                        assert rows[job_id][col["Ended"]] == f"{end:%Y-%m-%d %H:%M:%S}"
                        assert rows[job_id][duration] == human_duration(job.duration_s)
                assert rows["10000001"][duration] == "4m 12s"
                assert rows["10000002"][duration] == "1h 02m"
                assert sorted(facts["jobLinks"]) == sorted(
                    [j, (logs / j).as_uri() + "/"] for j in ended
                )

                # the range covered, when the page was made, sessions of several jobs only
                assert facts["range"] == want_range
                assert "2026-11-25 12:00" in facts["generated"]
                assert sorted(facts["sessions"]) == ["nightly", "worker-1"]

                page.close()
            # on paper: nothing wider than an A4 page's 186 mm between its margins (703 px)
            page = browser.new_page(viewport={"width": 700, "height": 900})
            page.emulate_media(media="print")
            page.goto(page_file.as_uri())
            printed = page.evaluate(PAGE_FACTS)
            assert printed["scrollWidth"] <= printed["innerWidth"] == 700
            assert [row[1] for row in printed["failures"]] == [r for r, _, _ in failures]
            pdf = tmp_path / "report.pdf"
            page.pdf(path=str(pdf), format="A4")
            assert pdf.stat().st_size > 10_000
            _save(pdf)
        finally:
            browser.close()


# --- the terminal ------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_report_at_a_terminal_uses_its_width_and_keeps_the_jvm_quiet(history: Path):
    env = cli_env(history)
    result = run_in_pty(
        delegate_cmd("report"), env=env, columns=140, separate_stderr=True, timeout=600
    )
    screen = ANSI.sub("", result.output)
    print(screen)
    print("stderr:", result.stderr)
    assert result.returncode == 0, result
    lines = screen.splitlines()
    assert max(len(line) for line in lines) > 80  # the whole terminal, not 80 columns
    assert max(len(line) for line in lines) <= 140
    assert "4m 12s" in screen and "1h 02m" in screen
    assert "SILENCE" in screen and "REJECTED" in screen  # wide enough for every job column
    for reason, count, examples in expected_failures():
        assert re.search(rf"^\s*{reason}\s+{count}\s+{' '.join(examples)}\s*$", screen, re.M)
    noise = [line for line in result.stderr.splitlines() if JVM_NOISE.search(line)]
    assert noise == [], result.stderr
    # the JVM had things to say: they are in the Spark log, not on the terminal
    log = history / "analytics" / "spark.log"
    assert log.exists()
