"""What people see of denied tool calls, of an agent CLI retrying its own API, and of a queued
attempt waiting to resume: `ps` (table and JSON), `show`, `why`, `jobs`, `watch` and
`submit --wait`'s outcome line, the dashboard's rows (JSON and the page), `top`'s rows, and the
report. Records are written through the registry as the wrapper writes them (core/outcome's
contract); the commands are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.core.errors import CorruptRecord
from delegate.core.eventlines import outcome_line
from delegate.core.model import Job, JobState
from delegate.core.outcome import (
    agent_retry_sentence,
    agent_retry_words,
    denied_summary,
    outcome_words,
    record_note,
    resumes_words,
    status_note,
)
from delegate.core.timefmt import local_minute, record_timestamp
from delegate.core.why import present_fact, transitions
from delegate.runtime.dashboard import snapshot
from delegate.runtime.top import rows as view
from delegate.services import ps
from delegate.services.jobs.finish import end_job
from delegate.services.state import State

from .helpers import cli_env, delegate_cmd, json_lines, run_cli, submit_shell
from .pty_run import run_in_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
T0 = datetime(2026, 11, 25, 14, 0, 0, tzinfo=UTC)
RATE_LIMIT = {
    "attempt": 4,
    "max_retries": 10,
    "retry_delay_ms": 4375,
    "error_status": 429,
    "error": "rate_limit",
    "at": record_timestamp(T0),
}
# The commands run later than the records are written: a retry an hour and a half minute long
# reads `1h 00m` for its first 30 s, so the exact text holds under a slow test machine.
LONG_DELAY_MS = 3_630_000


# --- the words, with a fixed clock ---------------------------------------------------------


def test_the_words_of_each_fact():
    assert agent_retry_words(RATE_LIMIT, now=T0) == "rate limited, retry 4/10 in 4s"
    later = T0 + timedelta(seconds=2)
    assert agent_retry_words(RATE_LIMIT, now=later) == "rate limited, retry 4/10 in 2s"
    gone_by = T0 + timedelta(minutes=5)  # the delay is over: never a negative countdown
    assert agent_retry_words(RATE_LIMIT, now=gone_by) == "rate limited, retry 4/10 in 0s"
    server = {**RATE_LIMIT, "attempt": 2, "retry_delay_ms": 1000, "error_status": 500}
    server["error"] = "server_error"
    assert agent_retry_words(server, now=T0) == "API error 500, retry 2/10 in 1s"
    codex = {"attempt": 2, "max_retries": 5, "error": "reconnecting", "at": RATE_LIMIT["at"]}
    assert agent_retry_words(codex, now=T0) == "reconnecting, retry 2/5"
    assert agent_retry_words({"error": "overloaded"}, now=T0) == "API error (overloaded), retry"
    unsaid = {**RATE_LIMIT, "max_retries": 0}  # the wrapper's 0: the CLI did not say
    assert agent_retry_words(unsaid, now=T0) == "rate limited, retry 4 in 4s"
    assert agent_retry_sentence("claude", {**unsaid, "attempt": 0}).endswith("(rate_limit)")

    assert agent_retry_sentence("claude", RATE_LIMIT) == (
        "Claude Code is retrying its API after HTTP 429 (rate_limit): attempt 4 of 10"
    )
    assert (
        agent_retry_sentence("codex", codex) == "Codex is reconnecting to its API: attempt 2 of 5"
    )
    assert agent_retry_sentence("mine", {"error_status": 503}) == (
        "the agent (mine) is retrying its API after HTTP 503"
    )

    assert outcome_words("completed", ["Bash", "Bash"]) == "completed, 2 tool calls denied"
    assert outcome_words("completed", ["Bash"]) == "completed, 1 tool call denied"
    assert outcome_words("completed", []) == "completed"
    assert outcome_words("error", ["Bash"]) == "error"  # an error is no success to qualify
    assert denied_summary(["Bash", "Write", "Bash"]) == "Bash x2, Write"

    resume = "2026-11-25T14:05:07.000000Z"
    assert resumes_words(resume, now=T0, tz=UTC) == "waiting, resumes 14:05"
    assert resumes_words("2026-11-26T01:00:00Z", now=T0, tz=UTC) == "waiting, resumes Nov 26 01:00"
    assert status_note("queued", not_before=resume, now=T0, tz=UTC) == "waiting, resumes 14:05"
    passed = T0 + timedelta(minutes=6)  # its time has come: it waits for a slot like any other
    assert status_note("queued", not_before=resume, now=passed, tz=UTC) == ""
    # an ended job's last retry is history, not what it does now
    assert status_note("completed", agent_retry=RATE_LIMIT, now=T0) == ""
    assert status_note("running", agent_retry=RATE_LIMIT, now=T0) == agent_retry_words(
        RATE_LIMIT, now=T0
    )

    record = {"job_id": "1a2b3c4d", "status": "completed", "denied_tools": ["Bash", "Bash"]}
    record |= {"started_at": "2026-11-25T14:00:00Z", "updated_at": "2026-11-25T14:04:12Z"}
    assert outcome_line(record) == "job 1a2b3c4d completed, 2 tool calls denied (Bash x2) in 4m 12s"
    assert outcome_line({**record, "denied_tools": None}) == "job 1a2b3c4d completed in 4m 12s"


def test_why_tells_the_denials_and_what_holds_the_job_now():
    entries = [
        {"ts": "2026-11-25T14:00:00Z", "kind": "registered", "status": "pending"},
        {"ts": "2026-11-25T14:00:01Z", "kind": "status_changed", "previous": "pending"}
        | {"status": "running", "cause": {"source": "agent", "event": "started"}},
        {"ts": "2026-11-25T14:04:12Z", "kind": "status_changed", "previous": "running"}
        | {"status": "completed", "cause": {"source": "agent", "event": "completed"}},
    ]
    job = {"status": "completed", "denied_tools": ["Bash", "Bash", "WebFetch"]}
    ended = transitions(entries, job)[-1]["sentence"]
    assert ended.endswith(
        "the agent reported completed; 3 tool calls denied by its agent CLI (Bash x2, WebFetch)"
    )
    running = {"status": "running", "agent": "claude", "agent_retry": RATE_LIMIT}
    assert present_fact(running, T0) == (
        "Claude Code is retrying its API after HTTP 429 (rate_limit): attempt 4 of 10"
    )
    queued = {"status": "queued", "attempt": 2, "not_before": "2026-11-25T14:05:00Z"}
    said = present_fact(queued, T0, previous_error="rate_limited: resets at 2026-11-25T14:05Z")
    resume = local_minute(queued["not_before"], now=T0)
    assert said == f"waiting, resumes {resume} after the rate limit of attempt 1"
    assert present_fact({**queued, "status": "running"}, T0) is None


# --- records as the wrapper leaves them, and the real commands ------------------------------


class Made(NamedTuple):
    denied: str  # completed, three calls denied
    one_denied: str  # completed, one call denied
    limited: str  # running, Claude Code retrying after a 429
    server: str  # running, retrying after a 500 whose delay has passed
    codex: str  # running, codex reconnecting
    rate_limited: str  # the attempt that ended rate-limited ...
    waiting: str  # ... and the attempt after it, queued until its reset
    not_before: str


def _open(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


def _running(state: State, agent: str, **fields: Any) -> str:
    job, _ = state.registry.register(agent=agent, workdir=str(state.layout.home))
    state.registry.transition(job.job_id, JobState.RUNNING)
    if fields:
        state.registry.update(job.job_id, **fields)
    return job.job_id


def _completed(state: State, denied: list[str]) -> str:
    job_id = _running(state, "claude")
    state.registry.update(job_id, denied_tools=denied)  # as the wrapper does, before `completed`
    end_job(state, job_id, JobState.COMPLETED, cause={"source": "agent", "event": "completed"})
    return job_id


def _records(home: Path) -> Made:
    state = _open(home)
    now = datetime.now(UTC)
    denied = _completed(state, ["Bash", "Bash", "WebFetch"])
    one_denied = _completed(state, ["Bash"])
    limited = _running(
        state,
        "claude",
        agent_retry={**RATE_LIMIT, "retry_delay_ms": LONG_DELAY_MS, "at": record_timestamp(now)},
    )
    an_hour_ago = record_timestamp(now - timedelta(hours=1))
    server = {"attempt": 2, "max_retries": 10, "retry_delay_ms": 1000, "error_status": 500}
    server = _running(
        state, "claude", agent_retry={**server, "error": "server_error", "at": an_hour_ago}
    )
    codex = {"attempt": 2, "max_retries": 5, "error": "reconnecting", "at": record_timestamp(now)}
    codex = _running(state, "codex", agent_retry=codex)
    reset = record_timestamp(now + timedelta(hours=2))
    rate_limited = _running(state, "claude")
    end_job(state, rate_limited, JobState.ERROR, reason=f"rate_limited: resets at {reset}")
    waiting, _ = state.registry.register(agent="claude", workdir=str(home))
    state.registry.admit(
        waiting.job_id,
        {"argv": ["true"]},
        lambda _job, _open: False,
        changes={"attempt": 2, "retry_of": rate_limited, "not_before": reset},
    )
    state.registry.update(rate_limited, retried_by=waiting.job_id, stamp=False)
    return Made(denied, one_denied, limited, server, codex, rate_limited, waiting.job_id, reset)


def _screen(text: str) -> list[str]:
    return [ANSI.sub("", line).rstrip() for line in text.splitlines()]


def _row(lines: list[str], job_id: str) -> str:
    return next(line for line in lines if line.startswith(job_id))


LIMITED = "rate limited, retry 4/10 in 1h 00m"
SERVER = "API error 500, retry 2/10 in 0s"
CODEX = "reconnecting, retry 2/5"
DENIED = "completed, 3 tool calls denied"
ONE_DENIED = "completed, 1 tool call denied"


def test_ps_at_a_terminal_and_as_json(home: Path, tmux_env: dict[str, str]):
    made = _records(home)
    env = cli_env(home, tmux_env)
    resumes = f"waiting, resumes {local_minute(made.not_before)}"
    wide = run_in_pty(delegate_cmd("ps"), env=env, columns=140, separate_stderr=True)
    assert wide.returncode == 0, wide
    lines = _screen(wide.output)
    expected = {
        made.denied: ("completed", DENIED),
        made.one_denied: ("completed", ONE_DENIED),
        made.limited: ("running", LIMITED),
        made.server: ("running", SERVER),
        made.codex: ("running", CODEX),
        made.waiting: ("queued 2", resumes),
    }
    for job_id, (state, reason) in expected.items():
        row = _row(lines, job_id)
        assert re.match(rf"{job_id}\s+{state}\s", row), row
        assert f"  {reason}  " in row, (row, reason)  # the REASON cell, whole
    assert not any(line.startswith(made.rate_limited) for line in lines)  # its next attempt is

    # at 80 columns the table still fits: the REASON cells are shortened, never a line wider
    narrow = run_in_pty(delegate_cmd("ps"), env=env, columns=80, separate_stderr=True)
    assert narrow.returncode == 0, narrow
    lines = _screen(narrow.output)
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    for job_id, (state, reason) in expected.items():
        row = _row(lines, job_id)
        assert re.match(rf"{job_id}\s+{state}\s", row) and f"  {reason[:8]}" in row, row

    # --wide cuts nothing, whatever the width
    every = run_in_pty(delegate_cmd("ps", "--wide"), env=env, columns=80, separate_stderr=True)
    assert all(reason in every.output for _state, reason in expected.values())

    piped = run_cli(home, "ps", "--json", env=tmux_env)
    assert piped.returncode == 0, piped.stderr
    rows = {r["job_id"]: r for r in json_lines(piped.stdout)}
    assert rows[made.denied]["denied_tools"] == ["Bash", "Bash", "WebFetch"]
    assert rows[made.limited]["agent_retry"]["error_status"] == 429
    assert rows[made.limited]["denied_tools"] is None
    assert rows[made.waiting]["not_before"] == made.not_before
    assert rows[made.waiting]["resumes_at"] == made.not_before  # still ahead: when it starts
    assert rows[made.denied]["resumes_at"] is None


def test_show_why_jobs_and_the_outcome_line(home: Path, tmux_env: dict[str, str]):
    made = _records(home)
    env = cli_env(home, tmux_env)

    def show(job_id: str) -> str:
        shown = run_in_pty(delegate_cmd("show", job_id), env=env, columns=100, separate_stderr=True)
        assert shown.returncode == 0, shown
        status = next(line for line in _screen(shown.output) if line.startswith("status "))
        return status.removeprefix("status").strip()

    assert show(made.denied) == DENIED
    assert show(made.one_denied) == ONE_DENIED
    assert show(made.limited) == f"running ({LIMITED})"
    assert show(made.codex) == f"running ({CODEX})"
    assert show(made.waiting) == f"queued (waiting, resumes {local_minute(made.not_before)})"
    record = json.loads(run_cli(home, "show", made.denied, "--json", env=tmux_env).stdout)
    assert record["denied_tools"] == ["Bash", "Bash", "WebFetch"] and "auth_token" not in record
    record = json.loads(run_cli(home, "show", made.limited, "--json", env=tmux_env).stdout)
    assert record["agent_retry"]["attempt"] == 4

    def why(job_id: str) -> str:
        said = run_in_pty(delegate_cmd("why", job_id), env=env, columns=200, separate_stderr=True)
        assert said.returncode == 0, said
        return " ".join(_screen(said.output)).strip()

    assert re.search(
        r"; completed at \d\d:\d\d:\d\d: the agent reported completed; 3 tool calls denied by"
        r" its agent CLI \(Bash x2, WebFetch\)$",
        why(made.denied),
    ), why(made.denied)
    assert why(made.limited).endswith(
        "; now Claude Code is retrying its API after HTTP 429 (rate_limit): attempt 4 of 10"
    )
    assert why(made.codex).endswith("; now Codex is reconnecting to its API: attempt 2 of 5")
    waiting = why(made.waiting)
    resume = local_minute(made.not_before)
    assert f"now waiting, resumes {resume} after the rate limit of attempt 1" in waiting
    story = json.loads(run_cli(home, "why", made.limited, "--json", env=tmux_env).stdout)
    assert story["why"].endswith("attempt 4 of 10")

    listed = run_in_pty(delegate_cmd("jobs"), env=env, columns=140, separate_stderr=True)
    lines = _screen(listed.output)
    assert _row(lines, made.denied).endswith(DENIED)
    assert _row(lines, made.limited).endswith(LIMITED)

    # the outcome line `watch` and `submit --wait` print on stderr, said by the same code
    watched = run_cli(home, "watch", made.denied, env=tmux_env)
    assert watched.returncode == 0, watched.stderr
    assert re.search(
        rf"^job {made.denied} completed, 3 tool calls denied \(Bash x2, WebFetch\) in \d+s$",
        watched.stderr,
        re.M,
    ), watched.stderr


@pytest.mark.timeout(120)
def test_submit_wait_says_a_completion_with_denials(
    home: Path, tmux_env: dict[str, str], tmp_path: Path
):
    """A real job whose record gets its denials before its `completed`, as the wrapper sets
    them from Claude Code's result line (here the job's own script writes them)."""
    deny = (
        "from delegate.services.state import State; import os; "
        "State.open().registry.update(os.environ['DELEGATE_JOB_ID'], denied_tools=['Bash', 'Bash'])"
    )
    done = submit_shell(home, tmux_env, tmp_path, f'"{sys.executable}" -c "{deny}"')
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert re.fullmatch(
        r"job [0-9a-f]{8} completed, 2 tool calls denied \(Bash x2\) in \d+s", lines[-2]
    ), done.stderr
    assert lines[-1].startswith("audit log: ")


# --- the dashboard and top ------------------------------------------------------------------


def _dashboard_rows(state: State) -> dict[str, dict[str, Any]]:
    jobs = ps._listed_jobs(state, show_all=False, limit=10, group=None)
    context = ps.row_context(state, jobs)
    return {j.job_id: snapshot.row_dict(ps.row_for(state, j, context), j.cost_usd) for j in jobs}


def test_dashboard_rows_and_top_rows_say_the_same(home: Path, tmux_env: dict[str, str]):
    made = _records(home)
    state = State.open(env=cli_env(home, tmux_env))
    rows = _dashboard_rows(state)
    json.dumps(rows)  # what the page is sent
    denied = rows[made.denied]
    assert (denied["state"], denied["denied_tools"], denied["note"]) == (
        "completed",
        ["Bash", "Bash", "WebFetch"],
        DENIED,
    )
    assert rows[made.limited]["agent_retry"]["retry_delay_ms"] == LONG_DELAY_MS
    assert rows[made.limited]["note"] == LIMITED
    assert rows[made.waiting]["not_before"] == made.not_before
    detail = snapshot.job_detail(state, made.denied)
    assert detail["job"]["denied_tools"] == ["Bash", "Bash", "WebFetch"]

    resumes = f"waiting, resumes {local_minute(made.not_before)}"
    shown = view.columns()
    for job_id, said in (
        (made.denied, DENIED),
        (made.one_denied, ONE_DENIED),
        (made.limited, LIMITED),
        (made.server, SERVER),
        (made.codex, CODEX),
        (made.waiting, resumes),
    ):
        assert view.what_happens(rows[job_id]) == said
        assert view.cells(rows[job_id], shown, event_width=40)[-1] == said
        # at 80 columns the row still fits, the text cut with an ellipsis
        line = view.cells(rows[job_id], shown, event_width=view.event_width(80, shown))
        assert sum(len(c) + 2 for c in line) + 2 <= 80
    detail_lines = view.detail_lines(state, made.denied)
    assert f"{DENIED} (Bash x2, WebFetch)" in detail_lines


@pytest.mark.timeout(120)
def test_top_shows_the_texts_live(home: Path, tmux_env: dict[str, str]):
    from textual.pilot import Pilot

    from delegate.runtime.top.app import DENIED_STYLE, JobsTable, TopApp

    made = _records(home)
    state = State.open(env=cli_env(home, tmux_env))
    app = TopApp(state)
    found: dict[str, str] = {}

    def cell(job_id: str, column: str) -> str:
        table = app.query_one(JobsTable)
        keys = [str(k.value) for k in table.rows]
        return str(table.get_cell(job_id, column)) if job_id in keys else ""

    async def steps(pilot: Pilot[int]) -> None:
        for _ in range(2000):
            if cell(made.waiting, "event"):
                break
            await pilot.pause(0.005)
        for job_id in (made.denied, made.limited, made.server, made.codex, made.waiting):
            found[job_id] = cell(job_id, "event")
        state_cell = app.query_one(JobsTable).get_cell(made.denied, "state")
        found["style"] = " ".join(str(span.style) for span in state_cell.spans)
        await pilot.press("q")

    async def main() -> None:
        async with app.run_test(size=(140, 24)) as pilot:
            await steps(pilot)

    asyncio.run(main())
    assert found[made.denied] == DENIED
    assert found[made.limited] == LIMITED
    assert found[made.server] == SERVER
    assert found[made.codex] == CODEX
    assert found[made.waiting] == f"waiting, resumes {local_minute(made.not_before)}"
    assert found["style"] == DENIED_STYLE  # not the plain success's dim


@pytest.mark.timeout(120)
def test_the_dashboard_page_says_the_same(home: Path, tmux_env: dict[str, str]):
    from .browser import CHROMIUM, CHROMIUM_ARGS
    from .test_dashboard import start_server, stop_server

    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("starlette")
    playwright = pytest.importorskip("playwright.sync_api")
    made = _records(home)
    server = start_server(home, tmux_env)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(server.url)
            page.wait_for_selector(f'#jobs tr[data-job="{made.waiting}"]')

            def cell(job_id: str, kind: str) -> str:
                return str(page.inner_text(f'#jobs tr[data-job="{job_id}"] td.{kind}'))

            assert cell(made.denied, "state") == DENIED
            assert "state-denied" in str(
                page.get_attribute(f'#jobs tr[data-job="{made.denied}"] td.state', "class")
            )
            assert cell(made.one_denied, "state") == ONE_DENIED
            assert cell(made.limited, "state") == "running"
            assert cell(made.limited, "event") == LIMITED
            assert cell(made.server, "event") == SERVER
            assert cell(made.codex, "event") == CODEX
            resume = page.evaluate(f"minute(Date.parse({json.dumps(made.not_before)}))")
            assert cell(made.waiting, "event") == f"waiting, resumes {resume}"
            # the browser's clock and zone are this machine's: the same minute as Python's
            assert resume == local_minute(made.not_before)
            browser.close()
    finally:
        stop_server(server)


# --- the report -----------------------------------------------------------------------------


def test_the_report_counts_denied_tool_calls(spark, tmp_path: Path, capsys):
    from delegate.report.figures import compute, read_ndjson, read_status
    from delegate.report.page import to_html
    from delegate.report.text import print_report

    logs = tmp_path / "logs"
    jobs = {
        "0000000a": ("completed", ["Bash", "Bash", "WebFetch"]),
        "0000000b": ("completed", ["Bash"]),
        "0000000c": ("completed", None),
        "0000000d": ("error", ["Write"]),  # denied, and failed: no completion to qualify
        "0000000e": ("completed", "Bash"),  # damaged: counts as none
    }
    for job_id, (status, denied) in jobs.items():
        folder = logs / job_id
        folder.mkdir(parents=True)
        lines = [
            {"ts": "2026-11-20T10:00:00Z", "kind": "registered", "job_id": job_id}
            | {"status": "pending"},
            {"ts": "2026-11-20T10:00:05Z", "kind": "status_changed", "job_id": job_id}
            | {"previous": "running", "status": status},
        ]
        (folder / "events.ndjson").write_text("".join(json.dumps(x) + "\n" for x in lines))
        record = {"job_id": job_id, "status": status, "agent": "claude", "denied_tools": denied}
        (folder / "status.json").write_text(json.dumps(record))
    read, malformed = read_ndjson(spark, [str(p) for p in sorted(logs.glob("*/events.ndjson"))])
    report = compute(read, read_status(spark, str(logs / "*" / "status.json")), malformed=malformed)
    assert report.totals["denied_tool_calls"] == 5
    assert report.totals["completed_with_denials"] == 2
    assert report.denied == [
        {"tool": "Bash", "calls": 3, "jobs": 2},
        {"tool": "WebFetch", "calls": 1, "jobs": 1},
        {"tool": "Write", "calls": 1, "jobs": 1},
    ]
    by_job = {j["job_id"]: j for j in report.jobs}
    assert by_job["0000000e"]["denied_tools"] is None

    print_report(report, width=100)
    out = capsys.readouterr().out
    assert (
        "denied: 2 jobs completed with denied tool calls; 5 calls denied: Bash 3, WebFetch 1,"
        " Write 1" in out
    )
    assert re.search(r"^0000000a .* 3 tool calls denied\s*$", out, re.M), out
    page = to_html(report)
    assert "completed, 3 tool calls denied" in page and 'id="denied-table"' in page


# --- any value a record file may hold -------------------------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
RETRY_KEYS = ["attempt", "max_retries", "retry_delay_ms", "error_status", "error", "at", "x"]
RETRY = st.one_of(
    JSON,
    st.dictionaries(
        st.sampled_from(RETRY_KEYS),
        JSON
        | st.integers(min_value=0, max_value=10**6)
        | st.sampled_from(
            ["rate_limit", "reconnecting", "2026-11-25T14:00:00.000000Z", "9999-12-31T23:59:59Z"]
        ),
        max_size=7,
    ),
)
DENIED_TOOLS = st.one_of(JSON, st.lists(st.text(max_size=10), max_size=5))
STATES = st.sampled_from(["queued", "pending", "running", "completed", "error", "cancelled"])


def _record(status: str, denied: object, retry: object, not_before: object) -> dict[str, Any]:
    return {
        "job_id": "0badf00d",
        "status": status,
        "created_at": "2026-11-25T14:00:00.000000Z",
        "updated_at": "2026-11-25T14:01:00.000000Z",
        "started_at": "2026-11-25T14:00:01.000000Z",
        "auth_token": "secret",
        "agent": "claude",
        "denied_tools": denied,
        "agent_retry": retry,
        "not_before": not_before,
    }


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=STATES,
    denied=DENIED_TOOLS,
    retry=RETRY,
    not_before=st.one_of(JSON, st.just("2026-11-25T14:05:00.000000Z")),
)
def test_any_value_loads_validated_or_is_refused_and_never_breaks_a_view(
    status: str, denied: object, retry: object, not_before: object
):
    data = json.loads(json.dumps(_record(status, denied, retry, not_before)))  # as from a file
    try:
        job = Job.from_dict(data)
    except ValueError:
        return
    # what loaded is what the views were promised
    assert job.denied_tools is None or all(isinstance(t, str) for t in job.denied_tools)
    if job.agent_retry is not None:
        assert isinstance(job.agent_retry, dict)
        for key in ("attempt", "max_retries", "retry_delay_ms", "error_status"):
            value = job.agent_retry.get(key)
            assert value is None or (not isinstance(value, bool) and math.isfinite(value))
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job  # it round-trips
    public = job.public_dict()
    for now in (T0, T0 + timedelta(days=400)):
        record_note(public, now)
        present_fact(public, now, previous_error="rate_limited: no reset time")
        agent_retry_sentence(public["agent"], public["agent_retry"])
    outcome_line(public)
    row = {"job_id": job.job_id, "state": status, "denied_tools": job.denied_tools}
    row |= {"agent_retry": job.agent_retry, "not_before": job.not_before}
    view.cells(row, view.columns(), event_width=20)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(denied=DENIED_TOOLS, retry=RETRY)
def test_a_record_file_with_any_value_reads_or_is_quarantined(
    tmp_path_factory: pytest.TempPathFactory, denied: object, retry: object
):
    home = tmp_path_factory.mktemp("home")
    state = _open(home)
    path = state.registry.path_for("0badf00d")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_record("running", denied, retry, None)))
    try:
        job = state.registry.get("0badf00d")
    except CorruptRecord:
        return
    context = ps.RowContext(T0, ps.tmux_facts(state, []), {}, {})
    row = ps.row_for(state, job, context, ("", ""))
    json.dumps(snapshot.row_dict(row, None))
    assert row.to_dict()["agent_retry"] == job.agent_retry
