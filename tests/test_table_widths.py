"""Tables that fit (issue 33): at any width from 60 columns up, `ps`, `jobs`, `approvals`,
`worktree list`, `group list` and `cron list` keep every column with its header whole,
shorten free text first (ellipsized), never cut an id, and no line runs past the width.

Each table is rendered by its own command's columns and cells with crafted long values, and
`ps` once end to end through the real CLI at COLUMNS=80."""

from __future__ import annotations

import io
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from delegate.adapters.terminal import Column, fit_widths, layout, print_table
from delegate.cli import approvals, cron, group, jobs, worktree
from delegate.core.model import Job, JobState
from delegate.services.jobs.approvals import WaitingRequest
from delegate.services.ps import Row as PsRow
from delegate.services.worktrees import WorktreeRow

from .helpers import cli_env, delegate_cmd, run_cli
from .pty_run import run_in_pty

WIDTHS = [60, 61, 72, 80, 100, 120]
LONG_SESSION = "nightly-refactor-of-the-payment-service-" + "x" * 30
LONG_REASON = "agent_exited: the agent's process ended with status 137 (killed: out of memory) " * 2
LONG_PATH = "/home/someone/work/a-very-long-repository-name/.delegate/worktrees/" + "d" * 40
NOW = datetime(2026, 11, 24, 14, 2, tzinfo=UTC)


def ps_rows(wide: bool) -> tuple[list[Column], list[list[str]], list[str]]:
    made = [
        PsRow(
            job_id=f"{i}a2b3c4d",
            job_state=state,
            session=LONG_SESSION + str(i),
            session_state="stopped",
            tmux=tmux,
            agent="claude-with-a-long-profile-name",
            age_s=3600.0,
            last_event="progress",
            duration_s=3725.0,
            end_reason=LONG_REASON,
            started_at="2026-11-24T13:00:00+00:00",
            ended_at="2026-11-24T14:02:05+00:00",
            last_detail="ran the tests: 3 failed, " + "y" * 60,
            attempt="2/3",
        )
        for i, (state, tmux) in enumerate([("completed", "exited 137"), ("running", "alive")])
    ]
    return jobs.ps_columns(wide), [jobs.ps_cells(r, wide) for r in made], [r.job_id for r in made]


def jobs_rows() -> tuple[list[Column], list[list[str]], list[str]]:
    made = [
        Job(
            job_id=f"{i}b2b3c4d",
            status=JobState.ERROR,
            created_at="2026-11-20T09:00:00+00:00",
            updated_at="2026-11-20T09:00:01+00:00",
            auth_token="t",
            started_at="2026-11-20T09:00:01+00:00",
            agent="codex-with-a-long-profile-name",
            session=LONG_SESSION,
            error=LONG_REASON,
        )
        for i in range(2)
    ]
    return jobs.JOBS_COLUMNS, [jobs.jobs_cells(j, NOW) for j in made], [j.job_id for j in made]


def approvals_rows(on_hosts: bool) -> tuple[list[Column], list[list[str]], list[str]]:
    made = [
        WaitingRequest(
            job_id="3c2b3c4d",
            request_id="r-5e6f7a8b",
            tool="mcp__filesystem__write_file_somewhere_far",
            summary="write a file",
            asked_at="2026-11-24T14:00:00+00:00",
            deadline=time.time() + 300,
            host="build-host-in-another-datacenter" if on_hosts else None,
            call="rm -rf build && make -j8 all test " + "--flag " * 20,
        )
    ]
    columns = approvals.columns(on_hosts)
    rows = [approvals.cells(r, on_hosts, time.time()) for r in made]
    return columns, rows, ["3c2b3c4d", "r-5e6f7a8b"]


def worktree_rows() -> tuple[list[Column], list[list[str]], list[str]]:
    made = [
        WorktreeRow(
            job_id="4d2b3c4d",
            state="completed",
            branch="delegate/feature-with-a-very-long-branch-name-" + "b" * 20,
            path=LONG_PATH,
            repo="/home/someone/work/repo",
            present=True,
            ahead=12,
            behind=3,
            changed=None,
            unpushed=2,
            stray=5,
            size=123_456_789,
            age_s=9 * 86400,
            problem="git could not read the worktree: fatal: not a git repository " * 2,
        )
    ]
    return worktree.LIST_COLUMNS, [worktree._cells(r) for r in made], ["4d2b3c4d"]


def group_rows() -> tuple[list[Column], list[list[str]], list[str]]:
    made = [
        group.GroupRow("nightly-builds-of-every-service-" + "g" * 30, 4, True, 2, 17, 20.0, 3.5)
    ]
    return group.LIST_COLUMNS, [group.list_cells(r) for r in made], []


def cron_rows() -> tuple[list[Column], list[list[str]], list[str]]:
    made: list[dict[str, Any]] = [
        {
            "name": "nightly-docs-rebuild-of-the-whole-site-" + "n" * 20,
            "schedule": "0 2 * * 1-5",
            "description": "at 02:00, Monday through Friday, every week of every month " * 2,
            "next_run": "2026-11-25T02:00:00+00:00",
            "last_job_id": "5e2b3c4d",
            "last_state": "completed",
        }
    ]
    return cron.LIST_COLUMNS, [cron.list_cells(r) for r in made], ["5e2b3c4d"]


TABLES = {
    "ps": lambda: ps_rows(False),
    "jobs": jobs_rows,
    "approvals": lambda: approvals_rows(False),
    "approvals-on-hosts": lambda: approvals_rows(True),
    "worktree-list": worktree_rows,
    "group-list": group_rows,
    "cron-list": cron_rows,
}


def render(columns: list[Column], rows: list[list[str]], width: int) -> str:
    out = io.StringIO()
    print_table(columns, rows, empty="none", width=width, file=out)
    return out.getvalue()


def assert_fits(text: str, columns: list[Column], ids: list[str], width: int) -> None:
    lines = text.rstrip("\n").splitlines()
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"wider than {width}:\n" + "\n".join(too_long)
    header = lines[0]
    for column in columns:
        assert f" {column.header} " in f" {header} ", (column.header, header)
    assert "…" not in header
    for job_id in ids:
        assert any(job_id in line.split() for line in lines), (job_id, text)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("table", list(TABLES))
def test_every_listing_fits_with_whole_headers_and_ids(table: str, width: int):
    columns, rows, ids = TABLES[table]()
    text = render(columns, rows, width)
    assert_fits(text, columns, ids, width)
    natural = fit_widths(columns, rows, 10_000)
    if sum(natural) + 2 * (len(natural) - 1) > width:  # the long free text was shortened
        assert "…" in text or len(text.splitlines()) > len(rows) + 1


@pytest.mark.parametrize("width", [60, 80, 120])
def test_free_text_goes_first(width: int):
    """Free columns are shortened before fixed ones fold and before the gap closes up; a wide
    window shows fixed columns whole."""
    columns, rows, _ = ps_rows(False)
    widths, gap = layout(columns, rows, width)
    natural = fit_widths(columns, rows, 10_000)
    fixed = [i for i, c in enumerate(columns) if not c.free]
    if width >= 100:
        assert gap == 2 and all(widths[i] == natural[i] for i in fixed)
    for i, column in enumerate(columns):
        assert widths[i] >= len(column.header)
        if not column.wrap and not column.free:
            assert widths[i] == natural[i]  # an id: never narrower


def test_fit_widths_keeps_headers_whole_when_cramped():
    columns = [Column("JOB"), Column("STATE", wrap=True), Column("REASON", free=True)]
    rows = [["1a2b3c4d", "completed 2/3", "r" * 80]]
    assert fit_widths(columns, rows, 20) == [8, 13, 6]  # no folding asked: the header floor
    assert fit_widths(columns, rows, 20, gap=1, level="words") == [8, 9, 6]  # at its space
    assert fit_widths(columns, rows, 20, gap=1, level="fold") == [8, 5, 6]
    assert layout(columns, rows, 40) == ([8, 13, 15], 2)
    assert layout(columns, rows, 30) == ([8, 13, 7], 1)
    text = render(columns, rows, 25)
    assert_fits(text, columns, ["1a2b3c4d"], 25)
    assert "completed" in text and "2/3" in text  # folded, not cut


def test_ps_wide_cuts_nothing():
    columns, rows, _ = ps_rows(True)
    text = render_unfitted(columns, rows)
    assert LONG_SESSION + "0" in text and "…" not in text


def render_unfitted(columns: list[Column], rows: list[list[str]]) -> str:
    out = io.StringIO()
    print_table(columns, rows, empty="none", width=60, file=out, fit=False)
    return out.getvalue()


# --- end to end: `ps` at a terminal of 80 columns --------------------------------------------


def test_ps_through_the_real_cli_at_80_columns(home: Path):
    job_id = run_cli(home, "register", "--cmd", "true", "--session", LONG_SESSION).stdout.strip()
    assert len(job_id) == 8
    shown = run_in_pty(delegate_cmd("ps", "--all"), env=cli_env(home), columns=80)
    assert shown.returncode == 0, shown.output
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.output)  # the terminal's colours
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and lines[0].lstrip().startswith("JOB"), text
    columns = jobs.ps_columns(False)
    assert_fits("\n".join(lines), columns, [job_id], 80)
    assert LONG_SESSION[:8] in text and LONG_SESSION not in text  # shortened, not dropped
