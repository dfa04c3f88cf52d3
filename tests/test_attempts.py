"""Attempts, interrupted work picked up again, and `why` (issue 20, items 1, 2 and 5), on real
tmux with real supervisors and monitors."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from delegate.core.errors import UsageError
from delegate.core.model import Job, JobState
from delegate.core.retry import (
    NextAttempt,
    RetryRule,
    backoff_s,
    effective_state,
    next_attempt,
    parse_backoff,
)
from delegate.core.timefmt import parse_timestamp
from delegate.core.why import transitions, why_text
from delegate.runtime.monitor import RECENT_ENDINGS
from delegate.services.jobs.finish import end_job

from .helpers import (
    assert_one_line_error,
    cli_env,
    delegate_cmd,
    json_lines,
    retry_until,
    run_cli,
    submit_shell,
)
from .test_monitor import open_state, pane_pid, submit_no_wait, wait_running
from .tmux_fixtures import kill_processes_of

# Fails the first two times it runs in its workdir, then succeeds.
FLAKY = 'n=$(cat runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > runs; [ "$n" -ge 3 ]'


def _job(status: JobState, error: str | None = None, **fields: object) -> Job:
    stamp = "2026-11-25T10:00:00.000000Z"
    return Job("aaaaaaaa", status, stamp, stamp, "t", error=error, **fields)  # type: ignore[arg-type]


# --- the rules alone -------------------------------------------------------------------------


def race_monitors(home: Path, tmux_env: dict[str, str]) -> None:
    """Two `monitor --once` at the same time, then one more: what a retry must survive."""
    racing = [
        subprocess.Popen(
            delegate_cmd("monitor", "--once", "--json"),
            env=cli_env(home, tmux_env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for proc in racing:
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert run_cli(home, "monitor", "--once", env=tmux_env, timeout=120).returncode == 0


def test_which_endings_are_followed_by_another_attempt():
    rule = RetryRule(2, ("error", "idle_timeout"), (1.0, 4.0)).to_dict()
    failed = _job(JobState.ERROR, "agent_error: agent exited with status 1", retry=rule)
    assert next_attempt(failed) == NextAttempt("retry", 1.0, False)
    assert next_attempt(failed._replace(attempt=2), 0.0).delay_s == 2.0
    assert next_attempt(failed._replace(attempt=3)) is None  # 1 + 2 retries used up
    assert next_attempt(failed._replace(error="wall_timeout")) is None  # not listed
    assert next_attempt(failed._replace(status=JobState.CANCELLED)) is None
    assert next_attempt(failed._replace(retried_by="bbbbbbbb")) is None  # made already
    assert effective_state(failed) is JobState.QUEUED  # dependents wait for the last attempt
    assert effective_state(failed._replace(attempt=3)) is JobState.ERROR
    gone = _job(JobState.ERROR, "tmux_gone", on_interrupt="requeue", conversation_id="c1")
    assert next_attempt(gone) == NextAttempt("requeue", 0.0, True)
    assert next_attempt(gone._replace(on_interrupt=None)) is None
    assert next_attempt(gone._replace(error="agent_error: boom")) is None
    delays = [backoff_s(n, 1.0, 4.0, 0.999) for n in (1, 2, 3, 4)]
    assert delays[0] < delays[1] < delays[2] and delays[3] <= 4.0


@pytest.mark.parametrize("text", ["4s..1s", "1s", "x..2", "0..3", "1s..2q"])
def test_a_bad_backoff_is_refused(text: str):
    with pytest.raises(UsageError):
        parse_backoff(text)


def _steps(*entries: dict) -> str:
    return why_text(transitions(entries, {"idle_timeout_s": 600.0}))


def test_why_names_an_inferred_ending_as_inferred():
    start = {
        "kind": "status_changed",
        "ts": "2026-11-25T14:02:00.000000Z",
        "previous": "pending",
        "status": "running",
        "cause": {"source": "agent", "event": "started", "observed": True},
    }
    lost = {
        "kind": "status_changed",
        "ts": "2026-11-25T14:40:00.000000Z",
        "previous": "running",
        "status": "error",
        "error": "lost: tmux on /tmp/s could not be asked for 61 s (grace 60 s): permission",
        "cause": {"source": "monitor", "actor": "monitor", "observed": False, "evidence": {}},
    }
    text = _steps(start, lost)
    assert "(agent reported started)" in text
    assert "inferred by the monitor" in text and "could not be asked for 61 s" in text
    host = {**lost, "error": "host_lost", "cause": {**lost["cause"], "evidence": {"silent_s": 90}}}
    assert "its agent host stopped answering (inferred by the monitor)" in _steps(start, host)
    launch = {
        **lost,
        "previous": "pending",
        "error": "launch_failed: tmux new-session failed",
        "cause": {"source": "launcher", "actor": "submit", "observed": True},
    }
    assert "could not be launched: tmux new-session failed (observed by submit)" in _steps(launch)


# --- retries on real tmux ----------------------------------------------------------------------


def _attempts(home: Path, first: str) -> list[Job]:
    state = open_state(home)
    return state.attempts(state.registry.get(first))


def test_a_job_that_fails_twice_then_succeeds_under_three_retries(
    home: Path, tmux_env, tmp_path: Path
):
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        FLAKY,
        "--retries",
        "3",
        "--retry-on",
        "error",
        "--backoff",
        "1s..4s",
        timeout=180,
    )
    assert result.returncode == 0, result.stderr  # the last attempt succeeded
    assert (tmp_path / "runs").read_text().strip() == "3"
    state = open_state(home)
    first = next(j for j in state.registry.list() if j.retry_of is None)
    chain = _attempts(home, first.job_id)
    assert [(j.attempt or 1, j.status) for j in chain] == [
        (1, JobState.ERROR),
        (2, JobState.ERROR),
        (3, JobState.COMPLETED),
    ]
    assert [j.retry_of for j in chain] == [None, chain[0].job_id, chain[1].job_id]
    waits = []
    for before, after in itertools.pairwise(chain):
        assert after.not_before is not None
        ended_line = state.audit.read_events(before.job_id, "status_changed")[-1]["ts"]
        end_gap = parse_timestamp(ended_line) - parse_timestamp(before.updated_at)
        assert abs(end_gap.total_seconds()) < 0.1  # linking the next attempt kept its end time
        ended, due = parse_timestamp(before.updated_at), parse_timestamp(after.not_before)
        started = parse_timestamp(after.started_at or "")
        assert started >= due  # it waited out its backoff
        waits.append((due - ended).total_seconds())
    assert 0.7 <= waits[0] < waits[1] <= 2.1, waits  # 1 s, then 2 s, less up to a quarter
    shown = json.loads(run_cli(home, "show", first.job_id, "--json", env=tmux_env).stdout)
    assert [(a["job_id"], a["status"]) for a in shown["attempts"]] == [
        (j.job_id, j.status.value) for j in chain
    ]
    assert shown["attempts"][0]["reason"].startswith("agent_error: agent exited with status 1")
    table = run_cli(home, "show", first.job_id, env=tmux_env).stdout
    assert "attempts" in table and chain[2].job_id in table
    listed = json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)
    assert [(r["job_id"], r["attempt"]) for r in listed] == [(chain[2].job_id, "3/4")]
    story = json.loads(run_cli(home, "why", chain[2].job_id, env=tmux_env).stdout)
    said = [(a["label"], a["why"]) for a in story["attempts"]]
    assert [label for label, _ in said] == ["1/4", "2/4", "3/4"]
    assert "the agent exited with status 1 (the wrapper's exit report)" in said[0][1]
    assert "queued since " in said[1][1] and said[2][1].endswith(story["why"].split("; ")[-1])


def test_bad_retry_input_is_one_line_and_records_nothing(home: Path, tmux_env, tmp_path: Path):
    for args in (
        ("--retries", "2", "--retry-on", "error,sunspots"),
        ("--retries", "2", "--retry-on", "cancelled"),
        ("--retries", "2", "--backoff", "9s..1s"),
        ("--retries", "2", "--backoff", "soon"),
        ("--retry-on", "error"),
        ("--on-interrupt", "maybe"),
    ):
        result = submit_shell(home, tmux_env, tmp_path, "true", "--no-wait", *args)
        assert_one_line_error(result)
    assert open_state(home).registry.list() == []
    running = submit_no_wait(home, tmux_env, tmp_path, "sleep 300")
    wait_running(home, running)
    result = run_cli(home, "retry", running, env=tmux_env)
    assert_one_line_error(result)
    assert "only an ended job is retried" in result.stderr
    assert [j.job_id for j in open_state(home).registry.list()] == [running]


def test_retry_by_hand_starts_the_same_spec_once(home: Path, tmux_env, tmp_path: Path):
    result = submit_shell(home, tmux_env, tmp_path, "echo ran >> log.txt; exit 4")
    assert result.returncode == 1
    first = open_state(home).registry.list()[0]
    again = run_cli(home, "retry", first.job_id, "--wait", env=tmux_env)
    assert again.returncode == 1, again.stderr
    state = open_state(home)
    second = state.registry.get(state.registry.get(first.job_id).retried_by or "")
    assert (second.attempt, second.retry_of, second.workdir) == (2, first.job_id, first.workdir)
    assert (tmp_path / "log.txt").read_text() == "ran\nran\n"  # the same prompt, run again
    assert (state.audit.job_dir(second.job_id) / "prompt").read_bytes() == (
        state.audit.job_dir(first.job_id) / "prompt"
    ).read_bytes()
    twice = run_cli(home, "retry", first.job_id, env=tmux_env)
    assert_one_line_error(twice)
    assert f"retried already as {second.job_id}" in twice.stderr
    new_prompt = run_cli(home, "retry", second.job_id, "--prompt", "true", "--wait", env=tmux_env)
    assert new_prompt.returncode == 0, new_prompt.stderr
    assert len(state.registry.list()) == 3


# --- interrupted work picked up again --------------------------------------------------------

RECORDING_PROFILE = """
[profiles.rec]
command = ["bash", "{{prompt_file}}"]
prompt = "file"
preamble = false
resume = ["bash", "{script}", "--resume", "{{conversation_id}}"]
"""


def test_a_reboot_requeues_exactly_the_job_that_asked_resuming_its_conversation(
    home: Path, tmux_env, tmp_path: Path
):
    argv_file = tmp_path / "resumed-argv.txt"
    script = tmp_path / "record.sh"
    script.write_text(f'printf "%s\\n" "$@" > {argv_file}\n')
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(RECORDING_PROFILE.format(script=script))

    def submit_rec(*args: str) -> str:
        result = run_cli(
            home,
            "submit",
            "--agent",
            "rec",
            "--workdir",
            str(tmp_path),
            "--prompt",
            "sleep 300",
            "--no-wait",
            "--json",
            *args,
            env=tmux_env,
        )
        assert result.returncode == 0, result.stderr
        return str(json.loads(result.stdout)["job_id"])

    plain = [submit_rec(), submit_rec()]
    requeued = submit_rec("--on-interrupt", "requeue")
    for job_id in (*plain, requeued):
        wait_running(home, job_id)
        pane_pid(home, job_id)
    state = open_state(home)
    state.registry.update(requeued, conversation_id="conv-1234")  # as its channel records one
    # the power goes: every process of the toolkit and the agents, then tmux itself
    kill_processes_of(home)
    subprocess.run(["tmux", "-L", tmux_env["DELEGATE_TMUX_SOCKET"], "kill-server"], check=False)
    # two monitors at once, then one more: one attempt, whoever ends the job
    race_monitors(home, tmux_env)
    for job_id in plain:
        job = state.registry.get(job_id)
        assert (job.status, job.error, job.retried_by) == (JobState.ERROR, "tmux_gone", None)
    interrupted = state.registry.get(requeued)
    assert (interrupted.status, interrupted.error) == (JobState.ERROR, "tmux_gone")
    attempts = [j for j in state.registry.list() if j.retry_of == requeued]
    assert [j.job_id for j in attempts] == [interrupted.retried_by]
    retry_until(lambda: argv_file.exists() and argv_file.read_text(), timeout=60)
    assert argv_file.read_text().split() == ["--resume", "conv-1234"]
    resumed = attempts[0]
    assert (resumed.attempt, resumed.conversation_id) == (2, "conv-1234")
    assert len([j for j in state.registry.list() if j.retry_of]) == 1  # none for the others
    why = json.loads(run_cli(home, "why", plain[0], env=tmux_env).stdout)["why"]
    assert "error at " in why and "its tmux server on " in why and "was gone" in why
    assert "(observed by the monitor)" in why


def test_a_retry_its_ender_never_made_is_made_once_by_the_next_monitor(
    home: Path, tmux_env, tmp_path: Path
):
    """As if the process that ended the job died right after: the job ends through end_job
    alone (no follow_up; nothing of it is left for a monitor's pass to settle), more jobs end
    after it than a monitor looks back at, and no monitor ran meanwhile. `monitor --once`,
    two at once and then one more, makes its one attempt (its idempotency key), which runs."""
    state = open_state(home)
    job, _created = state.registry.register(agent="shell", workdir=str(tmp_path))
    job_id = job.job_id
    state.registry.update(job_id, retry=RetryRule(1, ("error",), (1.0, 1.0)).to_dict())
    (state.audit.job_dir(job_id, create=True) / "prompt").write_bytes(b"echo ran >> runs")
    end_job(state, job_id, JobState.ERROR, reason="agent_error: boom", actor="test")
    assert state.registry.get(job_id).retried_by is None
    assert state.registry.follow_ups() == [job_id]  # noted with its end
    for _ in range(RECENT_ENDINGS + 5):  # its end scrolls out of the latest endings
        other, _created = state.registry.register(agent="shell")
        end_job(state, other.job_id, JobState.CANCELLED, actor="test")
    race_monitors(home, tmux_env)
    attempts = [j for j in state.registry.list() if j.retry_of == job_id]
    assert [j.job_id for j in attempts] == [state.registry.get(job_id).retried_by]
    assert len(state.audit.read_events(job_id, "retried")) == 1
    assert state.registry.follow_ups() == []  # settled: the next passes do nothing for it
    ended = retry_until(
        lambda: (j := state.registry.get(attempts[0].job_id)).status.terminal and j, timeout=60
    )
    assert (ended.status, ended.attempt) == (JobState.COMPLETED, 2)
    assert (tmp_path / "runs").read_text() == "ran\n"  # its prompt, in its folder, once


# --- why, for each ending on real tmux ---------------------------------------------------------


def test_why_reads_as_a_sentence_naming_the_fact_for_each_ending(
    home: Path, tmux_env, tmp_path: Path
):
    def why(job_id: str) -> str:
        result = run_cli(home, "why", job_id, env=tmux_env)  # JSON when piped
        assert result.returncode == 0, result.stderr
        return str(json.loads(result.stdout)["why"])

    def ended(job_id: str) -> None:
        state = open_state(home)
        retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=60)

    done = submit_no_wait(home, tmux_env, tmp_path, "true")
    failed = submit_no_wait(
        home, tmux_env, tmp_path, "while [ ! -e go ]; do sleep 0.1; done; exit 3"
    )
    idle = submit_no_wait(home, tmux_env, tmp_path, "sleep 300", "--idle-timeout", "1")
    killed = submit_no_wait(home, tmux_env, tmp_path, "sleep 300")
    cancelled = submit_no_wait(home, tmux_env, tmp_path, "sleep 300")
    dependent = submit_no_wait(home, tmux_env, tmp_path, "true", "--after", failed)
    (tmp_path / "go").touch()
    wait_running(home, killed)
    os.kill(pane_pid(home, killed), signal.SIGKILL)  # the wrapper dies without a word
    wait_running(home, cancelled)
    assert run_cli(home, "cancel", cancelled, env=tmux_env).returncode == 0
    for job_id in (done, failed, idle, killed, cancelled, dependent):
        ended(job_id)
    assert "running since " in why(done) and "(agent reported started)" in why(done)
    assert "the agent exited with status 0 (the wrapper's exit report)" in why(done)
    assert "error at " in why(failed)
    assert "the agent exited with status 3 (the wrapper's exit report)" in why(failed)
    said = why(idle)
    assert "no activity for 1s (timeout rule: deadline " in said and "passed), observed by" in said
    assert "pane died with signal 9 (observed by" in why(killed)
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert "cancelled at " in why(cancelled) and f"by {user} (`cancel`)" in why(cancelled)
    assert f"its dependency {failed} ended error (rule --after)" in why(dependent)
    shown = json.loads(run_cli(home, "show", failed, "--json", env=tmux_env).stdout)
    last = shown["transitions"][-1]
    assert (last["status"], last["source"], last["observed"]) == ("error", "agent", True)
    assert last["sentence"] in why(failed)
