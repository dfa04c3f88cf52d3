"""`delegate show` for people (issue 33): a summary first, in the words every view uses, then
only the fields that are set, grouped; `--all` for every field; `launch` as a shell line; the
JSON (piped or --json) as it always was."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from delegate.cli import show
from delegate.core.model import Job, JobState
from delegate.services.state import State
from delegate.services.why import explain

from .helpers import cli_env, delegate_cmd, run_cli
from .pty_run import run_in_pty

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
ARGV = ["claude", "-p", "--settings", "/tmp/a folder/settings.json", "--append", "it's long " * 12]


def job(**fields: Any) -> Job:
    base: dict[str, Any] = {
        "job_id": "1a2b3c4d",
        "status": JobState.ERROR,
        "created_at": "2026-11-24T13:00:00Z",
        "updated_at": "2026-11-24T13:04:12Z",
        "auth_token": "secret",
        "agent": "claude",
        "workdir": "/work/repo",
        "started_at": "2026-11-24T13:00:00Z",
        "error": "agent_exited: exit status 3",
    }
    return Job(**{**base, **fields})


def rendered(made: Job, *, every: bool = False, width: int = 100, **extra: Any) -> list[str]:
    record = {**made.public_dict(), "audit_log": "/state/logs/1a2b3c4d/events.ndjson", **extra}
    return show.view(made, record, every=every, width=width)


def value_of(lines: list[str], label: str) -> str:
    line = next(line for line in lines if line.strip().startswith(label + " "))
    return line.strip().removeprefix(label).strip()


def test_the_summary_comes_first_in_the_words_of_every_view():
    made = job(
        cost_usd=0.1234,
        tokens_in=12345,
        tokens_out=678,
        attempt=2,
        retry={"retries": 2, "on": ["error"], "backoff": [1.0, 60.0]},
        peak_memory_bytes=200 * 1024 * 1024,
        cpu_s=3.25,
    )
    lines = rendered(made, hosts_reached=["api.anthropic.com:443"], hosts_refused=["x.io:443"])
    assert lines[0] == (
        "job 1a2b3c4d failed after 4m 12s: the agent exited without reporting: exit status 3"
        " (agent_exited)"
    )
    summary = lines[: lines.index("Queue")]
    labels = [line.split("  ")[0] for line in summary[2:] if line.strip()]
    assert labels[:3] == ["status", "reason", "agent"]
    assert value_of(lines, "status") == "error"
    assert value_of(lines, "reason") == (
        "the agent exited without reporting: exit status 3 (agent_exited)"
    )
    assert value_of(lines, "took") == "4m 12s"
    assert value_of(lines, "workdir") == "/work/repo"
    assert value_of(lines, "cost") == "$0.1234"
    assert value_of(lines, "tokens") == "12,345 in, 678 out"
    assert value_of(lines, "attempt") == "2/3"
    assert value_of(lines, "peak memory") == "200 MiB"
    assert value_of(lines, "CPU") == "3.2 s"
    assert value_of(lines, "hosts reached") == "api.anthropic.com:443"
    assert value_of(lines, "hosts refused") == "x.io:443"
    assert value_of(lines, "audit log") == "/state/logs/1a2b3c4d/events.ndjson"
    assert "secret" not in "\n".join(lines)


def test_denials_and_an_open_job_say_what_ps_says():
    made = job(status=JobState.COMPLETED, error=None, denied_tools=["Bash", "Bash", "WebFetch"])
    lines = rendered(made)
    assert value_of(lines, "status") == "completed, 3 tool calls denied"
    assert value_of(lines, "denied tools") == "Bash x2, WebFetch"
    assert not any(line.startswith("reason") for line in lines)
    running = rendered(job(status=JobState.RUNNING, error=None))
    assert running[0] == "job 1a2b3c4d is running"
    assert value_of(running, "ended") == "-" and value_of(running, "so far") != "-"
    for unset in ("peak memory", "CPU", "hosts reached", "denied tools"):
        assert not any(line.startswith(unset + " ") for line in running)


def test_only_the_fields_that_are_set_grouped():
    made = job(
        group="nightly",
        after=["5e6f7a8b"],
        after_rule="succeeded",
        session="nightly-docs",
        worktree={"repo": "/work/repo", "branch": "delegate/1a2b3c4d", "path": "/wt/1a2b"},
        max_cost_usd=2.0,
        wall_timeout_s=3600.0,
    )
    lines = rendered(made, limits="memory 200 MiB")
    titles = [line for line in lines if line and not line.startswith(" ") and line[0].isupper()]
    assert titles == ["Queue", "Worktree", "Session", "Limits and sandbox", "Budget", "Record"]
    assert value_of(lines, "group") == "nightly"
    assert value_of(lines, "after") == "5e6f7a8b"
    assert value_of(lines, "worktree branch") == "delegate/1a2b3c4d"
    assert value_of(lines, "worktree") == "/work/repo"  # the summary says where it worked
    assert value_of(lines, "limits") == "memory 200 MiB"
    assert value_of(lines, "wall timeout") == "1h"
    assert value_of(lines, "max cost") == "$2"
    text = "\n".join(lines)
    for unset in ("retried as", "fan out", "max tokens", "conversation id", "idempotency key"):
        assert f"  {unset} " not in text


def test_all_shows_every_field_with_a_dash_where_unset():
    made = job()
    lines = rendered(made, every=True)
    text = "\n".join(lines)
    for key in made.public_dict():
        if key in show.SUMMARY_KEYS:
            continue
        label = show.LABELS.get(key, key.replace("_", " "))
        assert re.search(rf"^  {re.escape(label)} +\S", text, re.M), key
    assert value_of(lines, "idempotency key") == "-"
    assert value_of(lines, "fan out") == "-"
    assert "Other" not in lines  # every field of the record has its group


def test_every_record_field_is_in_the_summary_or_a_group():
    known = set(show.SUMMARY_KEYS).union(*show.GROUPS.values())
    assert set(Job._fields) - {"auth_token"} <= known


@pytest.mark.parametrize("width", [60, 80, 120])
def test_launch_is_a_shell_line_folded_not_cut(width: int):
    made = job(launch={"argv": ARGV, "channel": "stream-json", "mcp": True})
    lines = rendered(made, width=width)
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    start = next(i for i, line in enumerate(lines) if line.startswith("  argv "))
    folded = [lines[start].strip().removeprefix("argv").strip()]
    folded += [line.strip() for line in lines[start + 1 :] if line.startswith(" " * 21)]
    assert shlex.split(" ".join(folded)) == ARGV  # every word, quoted as a shell would
    assert "'/tmp/a folder/settings.json'" in " ".join(folded)
    assert "…" not in "\n".join(lines) and '["claude"' not in "\n".join(lines)
    assert value_of(lines, "mcp") == "yes"


def test_show_at_a_terminal_and_piped(home: Path):
    job_id = run_cli(home, "register", "--cmd", "make test", "--session", "docs").stdout.strip()
    state = State.open(env={"DELEGATE_HOME": str(home)})
    state.registry.update(job_id, group="nightly", cost_usd=0.5, tokens_in=10, tokens_out=2)
    at_terminal = run_in_pty(delegate_cmd("show", job_id), env=cli_env(home), columns=80)
    assert at_terminal.returncode == 0, at_terminal.output
    lines = [ANSI.sub("", line).rstrip() for line in at_terminal.output.splitlines()]
    assert lines[0] == f"job {job_id} is pending"
    assert value_of(lines, "status") == "pending" and value_of(lines, "cost") == "$0.5"
    assert value_of(lines, "group") == "nightly" and value_of(lines, "session") == "docs"
    assert value_of(lines, "command") == "make test"
    assert all(len(line) <= 80 for line in lines)
    every = run_in_pty(delegate_cmd("show", job_id, "--all"), env=cli_env(home), columns=80)
    assert "fan out" in every.output and "fan out" not in at_terminal.output

    # piped or --json: the record, its transitions and attempts, as it always was
    piped = run_cli(home, "show", job_id)
    assert piped.stdout == run_cli(home, "show", job_id, "--json").stdout
    assert piped.stdout == run_cli(home, "show", job_id, "--all").stdout
    record = json.loads(piped.stdout)
    story = explain(state, job_id)
    expected = {
        **state.registry.get(job_id).public_dict(),
        "audit_log": str(state.audit.events_path(job_id)),
        "transitions": story["transitions"],
        "attempts": story["attempts"],
    }
    assert record == json.loads(json.dumps(expected))
    assert piped.stdout == json.dumps(expected, sort_keys=True, ensure_ascii=False) + "\n"
