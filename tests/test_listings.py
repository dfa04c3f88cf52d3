"""Every listing command: a fitted table at a terminal, JSON lines when piped or with --json,
one note on stderr when there is nothing to show (DESIGN 17)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from delegate.adapters.terminal import Column, fit_widths
from delegate.coord import heartbeats
from delegate.core.model import JobState
from delegate.services.coord import open_coord
from delegate.services.jobs.finish import end_job
from delegate.services.state import State

from .helpers import cli_env, delegate_cmd, json_lines, run_cli
from .pty_run import run_in_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PS_JSON_KEYS = {
    "job_id",
    "job_state",
    "session",
    "session_state",
    "tmux",
    "agent",
    "age_s",
    "last_event",
    "queue_position",
    "host",
    "group",  # issue 20: keys are only ever added, never renamed or dropped
    "waiting_for",
    "attempt",
    "denied_tools",  # what the agent CLI denied, its own API retry, a queued attempt's start
    "agent_retry",
    "not_before",
    "resumes_at",
    "fan_out",
}
LONG_REASON = "agent_error: " + "the test suite failed in a very long and winding way " * 3


def _screen(text: str) -> list[str]:
    return [ANSI.sub("", line) for line in text.splitlines()]


def _publish_entry(state: State, job_id: str, seq: int, event: str, detail: str) -> None:
    """What the audit log holds for a published event (ps reads the last one)."""
    state.audit.append(
        job_id, "published", seq=seq, event=event, envelope={"seq": seq, "detail": detail}
    )


def _jobs_in_every_state(home: Path, count: int = 30) -> dict[str, JobState]:
    state = State.open(env={"DELEGATE_HOME": str(home)})
    registry = state.registry
    kinds = [
        JobState.QUEUED,
        JobState.PENDING,
        JobState.RUNNING,
        JobState.COMPLETED,
        JobState.ERROR,
        JobState.CANCELLED,
    ]
    made: dict[str, JobState] = {}
    for n in range(count):
        kind = kinds[n % len(kinds)]
        job, _ = registry.register(agent="shell", workdir=str(home), session=f"nightly-{n}")
        if kind is JobState.QUEUED:
            registry.admit(job.job_id, {"argv": ["true"]}, lambda _job, _open: False)
        if kind in (JobState.RUNNING, JobState.COMPLETED, JobState.ERROR):
            registry.transition(job.job_id, JobState.RUNNING)
            _publish_entry(state, job.job_id, 1, "started", "booting the very long agent " * 4)
        if kind is JobState.COMPLETED:
            end_job(state, job.job_id, JobState.COMPLETED)
        elif kind is JobState.ERROR:
            end_job(state, job.job_id, JobState.ERROR, reason=LONG_REASON)
        elif kind is JobState.CANCELLED:
            end_job(
                state, job.job_id, JobState.CANCELLED, reason="session stop --mode hard by a person"
            )
        made[job.job_id] = kind
    return made


def test_ps_fits_80_columns_at_a_terminal_and_pipes_json(home: Path, tmux_env):
    made = _jobs_in_every_state(home)
    env = cli_env(home, tmux_env)
    shown = run_in_pty(delegate_cmd("ps", "--all"), env=env, columns=80, separate_stderr=True)
    assert shown.returncode == 0, shown
    lines = _screen(shown.output)
    header = lines[0].split()
    for name in ("JOB", "STATE", "AGENT", "TIME", "REASON", "SESSION", "TMUX", "LAST", "EVENT"):
        assert name in header, lines[0]
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert len(lines) == 1 + len(made)
    for job_id, kind in made.items():
        row = next(line for line in lines if line.startswith(job_id))  # the id in full
        assert kind.value in row
    assert "…" in shown.output  # the long reasons and details were shortened
    assert "queued #1" in shown.output and "queued #5" in shown.output
    assert not re.search(r"\d{4}-\d\d-\d\dT", shown.output)  # no raw timestamps
    assert re.search(r"\b\d+s\b", shown.output)  # humanized durations

    wide = run_in_pty(
        delegate_cmd("ps", "--all", "--wide"), env=env, columns=80, separate_stderr=True
    )
    assert wide.returncode == 0, wide
    wide_lines = _screen(wide.output)
    for name in ("STARTED", "ENDED", "SESSION STATE", "LAST EVENT"):
        assert name in wide_lines[0]
    assert all(job_id in wide.output for job_id in made)
    assert LONG_REASON.strip() in wide.output  # --wide cuts nothing

    as_json = run_cli(home, "ps", "--all", "--json", env=tmux_env)
    assert as_json.returncode == 0, as_json.stderr
    rows = json_lines(as_json.stdout)
    assert [set(r) for r in rows] == [PS_JSON_KEYS] * len(made)
    assert {r["job_id"]: r["job_state"] for r in rows} == {k: v.value for k, v in made.items()}
    queued = [r["queue_position"] for r in rows if r["job_state"] == "queued"]
    assert queued == [1, 2, 3, 4, 5]
    piped = run_cli(home, "ps", "--all", env=tmux_env)
    assert piped.returncode == 0, piped.stderr
    assert [{**r, "age_s": 0} for r in json_lines(piped.stdout)] == [
        {**r, "age_s": 0} for r in rows
    ]


def test_jobs_and_show_at_a_terminal(home: Path, tmux_env):
    made = _jobs_in_every_state(home, count=6)
    env = cli_env(home, tmux_env)
    shown = run_in_pty(delegate_cmd("jobs"), env=env, columns=80, separate_stderr=True)
    lines = _screen(shown.output)
    assert shown.returncode == 0 and lines[0].split()[:3] == ["JOB", "STATE", "AGENT"]
    assert all(len(line) <= 80 for line in lines) and all(j in shown.output for j in made)
    assert not re.search(r"\d{4}-\d\d-\d\dT", shown.output)
    job_id = next(iter(made))
    one = run_in_pty(delegate_cmd("show", job_id), env=env, columns=80, separate_stderr=True)
    assert one.returncode == 0 and job_id in one.output
    assert any(line.startswith("status ") for line in _screen(one.output))  # the summary
    assert run_cli(home, "show", job_id).stdout.startswith("{")  # piped: the JSON record


EMPTY_LISTINGS = [
    ("ps",),
    ("ps", "--all"),
    ("jobs",),
    ("jobs", "--status", "running"),
    ("session", "list"),
    ("session", "list", "--all"),
    ("cron", "list"),
    ("claim", "list"),
    ("lock", "list"),
    ("host", "list"),
    ("agents",),
    ("bb", "list"),
    ("deadlocks",),
]


@pytest.mark.parametrize("argv", EMPTY_LISTINGS, ids=" ".join)
def test_an_empty_listing_says_so_on_stderr_only(home: Path, tmux_env, argv: tuple[str, ...]):
    for extra in ((), ("--json",)):
        result = run_cli(home, *argv, *extra, env=tmux_env)
        assert result.returncode == 0, result.stderr
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("delegate: "), result.stderr


def test_an_empty_listing_at_a_terminal(home: Path, tmux_env):
    shown = run_in_pty(
        delegate_cmd("ps"), env=cli_env(home, tmux_env), columns=80, separate_stderr=True
    )
    assert shown.returncode == 0 and shown.output.strip() == ""
    assert shown.stderr == "delegate: no jobs\n"


def test_agents_of_ended_jobs_are_hidden_unless_all(home: Path, tmux_env):
    made = _jobs_in_every_state(home, count=6)
    ended = [j for j, kind in made.items() if kind.terminal]
    running = [j for j, kind in made.items() if kind is JobState.RUNNING]
    store = open_coord({"DELEGATE_HOME": str(home)})
    for agent in [*ended, *running, "coder", "0badc0de"]:  # the last: no such job
        heartbeats.beat(store, agent, "working", task=agent)
    store.close()
    shown = {r["agent"] for r in json_lines(run_cli(home, "agents", env=tmux_env).stdout)}
    assert shown == {*running, "coder", "0badc0de"}
    every = json_lines(run_cli(home, "agents", "--all", "--json", env=tmux_env).stdout)
    assert {r["agent"] for r in every} == {*ended, *running, "coder", "0badc0de"}
    table = run_in_pty(
        delegate_cmd("agents"), env=cli_env(home, tmux_env), columns=80, separate_stderr=True
    )
    assert "LIVENESS" in table.output and running[0] in table.output
    assert not any(j in table.output for j in ended)

    only_ended = home.parent / "only-ended"
    made = _jobs_in_every_state(only_ended, count=6)
    store = open_coord({"DELEGATE_HOME": str(only_ended)})
    heartbeats.beat(store, next(j for j, k in made.items() if k.terminal), "idle")
    store.close()
    quiet = run_cli(only_ended, "agents", env=tmux_env)
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert "--all" in quiet.stderr and len(quiet.stderr.splitlines()) == 1


def test_fit_widths_shortens_free_columns_only():
    columns = [Column("JOB"), Column("STATE"), Column("DETAIL", free=True), Column("NOTE", True)]
    rows = [["1a2b3c4d", "cancelled", "x" * 60, "y" * 30]]
    natural = fit_widths(columns, rows, 200)
    assert natural == [8, 9, 60, 30]
    fitted = fit_widths(columns, rows, 60)
    assert fitted[:2] == [8, 9]  # fixed columns keep their width
    assert sum(fitted) + 2 * 3 == 60
    assert fitted[2] < 60 and fitted[3] <= 30
    # the widest free column goes first
    assert fit_widths(columns, rows, 100) == [8, 9, 47, 30]
    # never below the floor while the fixed columns leave room for it
    tight = fit_widths(columns, rows, 8 + 9 + 8 + 8 + 6)
    assert tight == [8, 9, 8, 8]
    # with no room even then: free columns go on shrinking, fixed ones never do
    cramped = fit_widths(columns, rows, 30)
    assert cramped[:2] == [8, 9] and all(w >= 4 for w in cramped[2:])
    assert fit_widths([Column("ID")], [["a" * 50]], 10) == [50]  # nothing free: kept whole
