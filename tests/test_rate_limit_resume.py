"""A rate-limited attempt resumes at its reset, whoever is running (issue 29).

An agent that reports its usage limit ends the attempt `rate_limited: resets at T`; the next
attempt waits queued until `not_before` (T plus up to `DELEGATE_RATE_LIMIT_JITTER_S`) and must
start then, resuming the recorded conversation, whether only a monitor follows the jobs, only
a `submit --wait`, or only the jobs' own supervisors. Each case runs on real tmux through
`delegate` commands alone (the processes a case must do without are killed; the registry is
only read), and asserts the attempt was launched after `not_before`, within a small bound of
it, by the one who was left, with `--resume <conversation>` in its argv.

The agent is a shell stand-in, not a real CLI (none is installed here, and no real CLI can be
told to run out of its limit on cue): it records its argv in `runs`, names its conversation
through `delegate hook` as Claude Code's SessionStart hook does, and says it is out of its limit
on the claude-stream channel (a `result` line, the reset 1 to 2 s away: only what the wrapper
reads there may end a job `rate_limited`); run with `--resume ID` it finishes. The profile
that runs it has a `resume` command, as the claude and codex profiles do. A second stand-in
speaks `codex exec --json` (the codex-json channel) for the thread's running token totals.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from delegate.config.settings import RATE_LIMIT_JITTER_ENV, rate_limit_jitter_s
from delegate.core.caps import due_in_s
from delegate.core.errors import ConfigError
from delegate.core.model import Job, JobState
from delegate.core.retry import RATE_LIMIT_JITTER_S, next_attempt
from delegate.core.timefmt import local_time, parse_iso, parse_timestamp, record_timestamp
from delegate.services.jobs.retry import (
    NOT_CARRIED,
    attempt_note,
    attempt_request,
    carried_usage,
    spec_of,
)
from delegate.services.jobs.submit import SubmitRequest
from delegate.services.state import State

from .helpers import popen_cli, retry_until, run_cli
from .test_monitor import kill_supervisor, open_state, start_monitor, stop_monitor, supervisor_pid

CONVERSATION = "conv-7"
JITTER_S = 0.5  # DELEGATE_RATE_LIMIT_JITTER_S here: the tests wait 1 to 2.5 s, not up to 7
LAUNCH_BOUND_S = 0.5  # the launch is claimed at most this long after `not_before` (a timer)
START_BOUND_S = 2.0  # ... and its agent has started (its wrapper said `started`)

STAND_IN = textwrap.dedent("""\
    # a stand-in for an agent CLI out of its usage limit (see the test module's docstring)
    echo "$(date +%s.%N) $*" >> runs
    echo '{"hook_event_name": "SessionStart", "source": "startup", "session_id": "CONVERSATION"}' \\
        | delegate hook
    if [ "$1" = "--resume" ]; then
        echo '{"type": "result", "subtype": "success", "result": "resumed '"$2"'"}'
        exit 0
    fi
    if [ -p gate ]; then read -r _ < gate; fi  # held until the test lets it go on
    said="Claude AI usage limit reached|$(( $(date +%s) + 2 ))"
    echo '{"type": "result", "is_error": true, "result": "'"$said"'"}'
""")


def _set_up(home: Path, tmp_path: Path, *, gate: bool = False) -> Path:
    """delegate.toml with the stand-in's profile (`limited`); its working folder, with a gate
    (a FIFO) that holds its first run until the test writes to it."""
    script = tmp_path / "limited.sh"
    script.write_text(STAND_IN.replace("CONVERSATION", CONVERSATION))
    work = tmp_path / "work"
    work.mkdir()
    if gate:
        os.mkfifo(work / "gate")
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        textwrap.dedent(f"""
        [profiles.limited]
        command = ["sh", "{script}"]
        resume = ["sh", "{script}", "--resume", "{{conversation_id}}"]
        prompt = "stdin"
        preamble = false
        channel = "claude-stream"
        """)
    )
    return work


@pytest.fixture
def env(tmux_env: dict[str, str]) -> dict[str, str]:
    return {**tmux_env, RATE_LIMIT_JITTER_ENV: str(JITTER_S)}


def _submit_no_wait(home: Path, env: dict[str, str], work: Path) -> str:
    argv = ["submit", "--agent", "limited", "--workdir", str(work), "--prompt", "go"]
    result = run_cli(home, *argv, "--no-wait", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["job_id"])


def _next_attempt_of(state: State, job_id: str) -> str:
    return str(retry_until(lambda: state.registry.get(job_id).retried_by, timeout=30))


def _kill_supervisor(home: Path, job_id: str) -> None:
    kill_supervisor(home, job_id)


def _assert_resumed_on_time(
    state: State,
    first_id: str,
    work: Path,
    *,
    conversation: str = CONVERSATION,
    resume: tuple[str, ...] = ("--resume", CONVERSATION),
) -> str:
    """The attempt after `first_id` was launched after its `not_before` and within the bounds,
    resuming the conversation (`resume`: how its argv ends), and completed; returns who
    launched it (the audit's actor)."""
    first = state.registry.get(first_id)
    assert first.status is JobState.ERROR, first
    assert first.error is not None and first.error.startswith("rate_limited: resets at "), first
    assert first.conversation_id == conversation
    attempt = retry_until(
        lambda: (j := state.registry.get(first.retried_by or "")).status.terminal and j,
        timeout=30,
    )
    assert (attempt.status, attempt.attempt, attempt.retry_of) == (
        JobState.COMPLETED,
        2,
        first.job_id,
    )
    reset = parse_iso(first.error.partition(" resets at ")[2])
    due = parse_timestamp(attempt.not_before or "")
    assert reset is not None and reset <= due <= reset + timedelta(seconds=JITTER_S)
    [claimed] = [
        e["ts"]
        for e in state.audit.read_events(attempt.job_id, "status_changed")
        if e["previous"] == "queued"
    ]
    late_claim = (parse_timestamp(claimed) - due).total_seconds()
    late_start = (parse_timestamp(attempt.started_at or "") - due).total_seconds()
    assert 0 <= late_claim <= LAUNCH_BOUND_S, late_claim
    assert 0 <= late_start <= START_BOUND_S, late_start
    # it resumed the conversation: the profile's resume command, with the recorded id
    assert attempt.conversation_id == conversation
    assert attempt.launch["argv"][-len(resume) :] == list(resume)
    runs = [line.split(" ", 1)[1] for line in (work / "runs").read_text().splitlines()]
    assert runs == ["", " ".join(resume)]
    [launch] = [
        e
        for e in state.audit.read_events(attempt.job_id, "reconciled")
        if e["action"] == "launch_job"
    ]
    return str(launch["actor"])


# --- on real tmux: whoever is left launches it at its time -----------------------------------


def test_a_monitor_alone_resumes_it_at_the_reset(home: Path, env, tmp_path: Path):
    """No supervisor of either attempt: the monitor (its interval far longer than the wait)
    ends the job, makes the attempt and wakes for its `not_before`."""
    work = _set_up(home, tmp_path, gate=True)
    state = open_state(home)
    first = _submit_no_wait(home, env, work)
    retry_until(lambda: state.registry.get(first).status is JobState.RUNNING, timeout=30)
    _kill_supervisor(home, first)
    monitor = start_monitor(home, env, "--interval", "30")
    try:
        (work / "gate").write_text("go\n")  # the agent reports its limit now
        attempt = _next_attempt_of(state, first)
        _kill_supervisor(home, attempt)  # long before its reset: only the monitor is left
        actor = _assert_resumed_on_time(state, first, work)
    finally:
        stop_monitor(monitor)
    assert actor == "monitor"


def test_submit_wait_alone_resumes_it_and_says_when(home: Path, env, tmp_path: Path):
    """`submit --wait` follows the job and says when it resumes; the state dir's supervisor,
    killed meanwhile, is brought back by the waiting submit itself, makes the attempt, launches
    it at its time, and the submit follows it to its end."""
    work = _set_up(home, tmp_path)
    state = open_state(home)
    argv = ["submit", "--agent", "limited", "--workdir", str(work), "--prompt", "go", "--wait"]
    proc = popen_cli(home, *argv, env=env)
    try:
        jobs = retry_until(lambda: [j for j in state.registry.list() if j.retried_by], timeout=30)
        first = jobs[0].job_id
        attempt = str(jobs[0].retried_by)
        _kill_supervisor(home, attempt)
        assert proc.stderr is not None
        said = retry_until(lambda: _line_with(proc, "follows as"), timeout=30)
        queued = state.registry.get(attempt)
        # said while it waits: the last line until the attempt starts
        assert queued.status is JobState.QUEUED
        at = re.escape(local_time(queued.not_before))
        assert re.search(f"resuming conversation {CONVERSATION} at {at} \\(in \\ds\\)$", said), said
        assert f"job {first} ended (rate_limited: resets at " in said
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err  # the final attempt's outcome
    assert f"job {attempt} completed" in err.splitlines()[0]
    actor = _assert_resumed_on_time(state, first, work)
    assert actor.startswith("supervisor:") and actor != f"supervisor:{proc.pid}"  # not a follower's


def _line_with(proc: subprocess.Popen[str], text: str) -> str | None:
    assert proc.stderr is not None
    line = proc.stderr.readline()
    return line.strip() if text in line else None


def test_the_jobs_own_supervisors_alone_resume_it(home: Path, env, tmp_path: Path):
    """Nothing but `submit --no-wait`'s supervisors: the ended job's makes the attempt at once,
    the attempt's launches it at its `not_before`."""
    work = _set_up(home, tmp_path)
    state = open_state(home)
    first = _submit_no_wait(home, env, work)
    attempt = _next_attempt_of(state, first)
    own = supervisor_pid(home, attempt)
    actor = _assert_resumed_on_time(state, first, work)
    assert actor == f"supervisor:{own}"
    ended = parse_timestamp(state.registry.get(first).updated_at)
    [made] = state.audit.read_events(first, "retried")
    assert (parse_timestamp(made["ts"]) - ended).total_seconds() < 2.0  # not after a settling


CODEX_STAND_IN = textwrap.dedent("""\
    # a stand-in for `codex exec --json` out of its usage limit (no real codex here): its first
    # turn reports the thread's running totals, its second its usage limit, 2 s away; resumed
    # (`resume THREAD`), one more turn, the thread's totals grown by 30 and 3 tokens
    echo "$(date +%s.%N) $*" >> runs
    if [ "$1" = "resume" ]; then
        echo '{"type": "thread.started", "thread_id": "'"$2"'"}'
        echo '{"type": "turn.started"}'
        echo '{"type": "turn.completed", "usage": {"input_tokens": 130, "output_tokens": 13}}'
        exit 0
    fi
    echo '{"type": "thread.started", "thread_id": "thread-7"}'
    echo '{"type": "turn.started"}'
    echo '{"type": "turn.completed", "usage": {"input_tokens": 100, "output_tokens": 10}}'
    echo '{"type": "turn.started"}'
    echo '{"type": "turn.failed", "error": {"message": "usage limit hit; try again in 2 seconds"}}'
    exit 1
""")


def test_a_resumed_thread_counts_its_tokens_on_from_the_limit(home: Path, env, tmp_path: Path):
    """A codex-json agent: the attempt resumes the thread at the reset and starts from the
    thread's running totals, so it counts only its own turn (30 and 3), not the thread's."""
    script = tmp_path / "codex.sh"
    script.write_text(CODEX_STAND_IN)
    work = tmp_path / "work"
    work.mkdir()
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        textwrap.dedent(f"""
        [profiles.codexish]
        command = ["sh", "{script}"]
        resume = ["sh", "{script}", "resume", "{{conversation_id}}"]
        channel = "codex-json"
        preamble = false
        """)
    )
    argv = ["submit", "--agent", "codexish", "--workdir", str(work), "--prompt", "go", "--wait"]
    result = run_cli(home, *argv, env=env)
    assert result.returncode == 0, result.stderr  # the final attempt's outcome
    state = open_state(home)
    [first] = [j for j in state.registry.list() if not j.retry_of]
    assert first.conversation_usage == {
        "input_tokens": 100,
        "cached_input_tokens": 0,
        "output_tokens": 10,
    }
    _assert_resumed_on_time(
        state, first.job_id, work, conversation="thread-7", resume=("resume", "thread-7")
    )
    attempt = state.registry.get(str(first.retried_by))
    assert (attempt.tokens_in, attempt.tokens_out) == (30, 3)  # its own turn, not 130 and 13
    assert (first.tokens_in, first.tokens_out) == (100, 10)


# --- the rules alone -------------------------------------------------------------------------

STAMP = "2026-11-25T10:00:00.000000Z"


def _job(**fields: object) -> Job:
    return Job("aaaaaaaa", JobState.ERROR, STAMP, STAMP, "t", **fields)  # type: ignore[arg-type]


def test_the_jitter_past_a_reset_is_a_setting():
    now = datetime(2026, 11, 25, 10, 0, 0, tzinfo=UTC)
    limited = _job(error="rate_limited: resets at 2026-11-25T10:00:03Z", conversation_id="c")
    assert next_attempt(limited, 1.0, now=now).delay_s == 3.0 + RATE_LIMIT_JITTER_S
    assert next_attempt(limited, 1.0, now=now, jitter_s=0.5).delay_s == 3.5
    assert next_attempt(limited, 0.0, now=now, jitter_s=0.0).resume is True
    assert rate_limit_jitter_s({}) is None  # the core's default then
    assert rate_limit_jitter_s({RATE_LIMIT_JITTER_ENV: "0.25"}) == 0.25
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(ConfigError):
            rate_limit_jitter_s({RATE_LIMIT_JITTER_ENV: bad})


def test_a_queued_attempt_is_due_at_its_not_before():
    now = datetime(2026, 11, 25, 10, 0, 0, tzinfo=UTC)
    soon = record_timestamp(now + timedelta(seconds=2.5))
    queued = _job(not_before=soon)._replace(status=JobState.QUEUED)
    assert due_in_s(queued, now) == 2.5
    assert due_in_s(queued, now + timedelta(seconds=9)) == 0.0  # passed: due now
    assert due_in_s(queued._replace(not_before=None), now) is None  # waits for no time
    assert due_in_s(queued._replace(status=JobState.RUNNING), now) is None
    ended = _job(error="rate_limited: resets at 2026-11-25T10:00:02Z")
    note = attempt_note(ended, queued._replace(job_id="bbbbbbbb", attempt=2), now=now)
    assert note == (
        "job aaaaaaaa ended (rate_limited: resets at 2026-11-25T10:00:02Z); attempt 2 follows"
        f" as bbbbbbbb at {local_time(soon, now=now)} (in 2s)"
    )
    resuming = queued._replace(job_id="bbbbbbbb", attempt=2, conversation_id="c")
    assert ", resuming conversation c at " in attempt_note(ended, resuming, now=now)


def _spec_job(**fields: object) -> Job:
    """A job with every part of its spec set to something no default is."""
    spec: dict[str, object] = {
        "agent": "shell",
        "workdir": "/tmp/spec",
        "session": "own-session",
        "wall_timeout_s": 123.0,
        "idle_timeout_s": 45.0,
        "bus": {"url": "sqlite:///tmp/spec/bus.db"},
        "max_running": 3,
        "notify": ["true", "--flag"],
        "after": ["bbbbbbbb"],
        "after_rule": "finished",
        "group": "nightly",
        "retry": {"retries": 2, "on": ["error"], "backoff": [1.0, 2.0]},
        "on_interrupt": "requeue",
        "parent": "cccccccc",
        "detached": True,
        "launch": {
            "argv": ["bash", "/p"],
            "mcp": False,
            "limits": {"memory_bytes": 1 << 30, "pids": 64},
            "sandbox": {"bwrap": "/usr/bin/bwrap", "hide": ["/root"], "network": "none"},
        },
        "max_cost_usd": 1.25,
        "max_tokens": 5000,
        "conversation_id": "conv-9",
    }
    return _job(**{**spec, **fields})


def test_an_attempt_carries_the_whole_spec_of_the_job_it_follows(state: State):
    """Every SubmitRequest field is carried from the job, or named in NOT_CARRIED with why:
    a field added to SubmitRequest and forgotten here fails this test."""
    fields = set(SubmitRequest._fields)
    by_profile = _spec_job()
    by_command = _spec_job(agent="cmd", launch={"argv": ["/bin/sh", "-c", "make"], "mcp": True})
    specs = [spec_of(state, by_profile), spec_of(state, by_command)]
    carried = set(specs[0])
    assert carried == set(specs[1])
    assert not carried & set(NOT_CARRIED), carried & set(NOT_CARRIED)
    assert set(NOT_CARRIED) <= fields, set(NOT_CARRIED) - fields  # no stale reason
    forgotten = fields - carried - set(NOT_CARRIED)
    assert not forgotten, f"SubmitRequest fields an attempt neither carries nor names: {forgotten}"
    assert all(reason.strip() for reason in NOT_CARRIED.values())
    defaults = SubmitRequest._field_defaults
    for job, spec in zip((by_profile, by_command), specs, strict=True):
        request = attempt_request(state, job, b"again", conversation_id="conv-9")
        for name in carried:
            assert getattr(request, name) == spec[name], name
        assert (request.attempt, request.retry_of, request.prompt) == (2, "aaaaaaaa", b"again")
        assert request.idempotency_key == "retry-of-aaaaaaaa"
        assert request.worktree is False  # the job's worktree, if any, is handed over
    for name in carried:  # each is the job's own: set, not left at the default, in one of them
        assert any(spec[name] != defaults.get(name, None) for spec in specs), name
    request = attempt_request(state, by_profile, b"again")
    assert (request.max_cost_usd, request.max_tokens, request.no_mcp) == (1.25, 5000, True)
    assert (request.parent, request.session, request.on_event) == (
        "cccccccc",
        "own-session",
        "true --flag",
    )
    assert attempt_request(state, by_command, b"x").no_mcp is False  # it registered one
    assert attempt_request(state, by_command, b"x").cmd == "make"


def test_a_resuming_attempt_carries_its_conversations_running_totals(state: State):
    totals = {"input_tokens": 1200, "output_tokens": 300}
    job = _spec_job(conversation_usage=totals)
    assert carried_usage(job, "conv-9") == totals
    assert carried_usage(job, None) is None  # a fresh conversation counts from nothing
    assert carried_usage(job, "conv-other") is None
    assert carried_usage(_spec_job(), "conv-9") is None
