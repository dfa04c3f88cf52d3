"""The real `codex` CLI (0.169, installed by `make agents` into .cache/agents) driven through
`delegate` commands, in a real tmux server, against the suite's scripted OpenAI Responses
server (tests/models): what a person sees through `submit`, `show --json`, `ps --json`, `logs`,
`session resume` and `bb read` is what codex really did.

It proves that the built-in codex profile, extended by a `[profiles.codex]` table without a
command (`pass_env` of the scripted key), runs codex so that it can work (a workspace-write
sandbox, `--skip-git-repo-check` only outside a repository); that its usage is counted once
(codex's `input_tokens` include the cached ones) and that `session resume` continues the
recorded thread with `codex exec resume <thread> -`; that codex's own `Reconnecting... 1/1`
lines are a state the record shows while it lasts, not an ending; that a 401, a dead server and
a 500 storm each end the job `error` in codex's own words, well within its timeouts; that a
usage limit ends the attempt `rate_limited` at the clock time codex names and a next attempt
resumes the thread, while `Quota exceeded` is a plain error; and that `delegate mcp` works
through the real codex (tool search, then `bb_put`) with no secret in any argv.

These fail, never skip, when the install is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from delegate.services.state import State
from tests.helpers import json_lines, popen_cli, retry_until, run_cli
from tests.models import (
    HttpError,
    OpenAIServer,
    Text,
    ToolSearch,
    UsageLimit,
    codex_mcp,
    dead_url,
    exec_command,
    rate_limited,
    server_error,
    slow,
    text,
    unauthorized,
    write_codex_config,
)
from tests.models.cli import AGENT_BIN, CODEX
from tests.models.openai import API_KEY

# Extends the built-in profile (no `command`): the scripted provider's key reaches the agent.
EXTEND_CODEX = '[profiles.codex]\npass_env = ["SCRIPTED_OPENAI_API_KEY", "TMPDIR"]\n'
IDLE_S, WALL_S = 60.0, 120.0  # generous but finite: every ending below comes well before them
# What codex 0.169 says when a 429's error is `insufficient_quota` (codex-rs maps that code to
# its QuotaExceeded error, which it does not retry).
QUOTA_EXCEEDED = "Quota exceeded. Check your plan and billing details."
QUOTA = HttpError(
    429,
    body={
        "error": {
            "type": "insufficient_quota",
            "code": "insufficient_quota",
            "message": "You exceeded your current quota, please check your plan and billing.",
        }
    },
)


# -- helpers --------------------------------------------------------------------------------------


def codex_env(
    home: Path, tmux_env: dict[str, str], tmp_path: Path, server: OpenAIServer | str, **extra: str
) -> dict[str, str]:
    """The submitter's environment: the real codex first on PATH, its CODEX_HOME pointing at
    `server`, the scripted key, and the `[profiles.codex]` table that passes that key on."""
    assert CODEX.exists(), f"{CODEX} is missing: `make agents` installs it"
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(EXTEND_CODEX)
    config = write_codex_config(tmp_path / "codex-home", server)
    return {**tmux_env, **config, "PATH": f"{AGENT_BIN}:{tmux_env['PATH']}", **extra}


def submit_codex(
    home: Path, env: dict[str, str], workdir: Path, prompt: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], str, float]:
    """`delegate submit --agent codex --wait` of `prompt` in `workdir`: the result, the job id
    (of its first attempt) and the seconds it took."""
    started = time.monotonic()
    result = run_cli(
        home,
        "submit",
        "--agent",
        "codex",
        "--prompt",
        prompt,
        "--workdir",
        str(workdir),
        "--idle-timeout",
        f"{IDLE_S:g}",
        "--wall-timeout",
        f"{WALL_S:g}",
        "--wait",
        *args,
        env=env,
        timeout=WALL_S + 30,
    )
    elapsed = time.monotonic() - started
    events = json_lines(result.stdout)
    assert events, result.stderr
    return result, events[0]["job_id"], elapsed


def shown(home: Path, env: dict[str, str], job_id: str) -> dict[str, Any]:
    result = run_cli(home, "show", job_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def listed(home: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`ps --json --all`, by job id."""
    result = run_cli(home, "ps", "--json", "--all", env=env)
    assert result.returncode == 0, result.stderr
    return {row["job_id"]: row for row in json_lines(result.stdout)}


def audit(home: Path, env: dict[str, str], job_id: str) -> list[dict[str, Any]]:
    result = run_cli(home, "logs", job_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json_lines(result.stdout)


def published(lines: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    """The envelopes of `event` in a job's audit trail."""
    envelopes = [line["envelope"] for line in lines if "envelope" in line]
    return [envelope for envelope in envelopes if envelope.get("event") == event]


def said(request_body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of the user and assistant messages a Responses request carries."""
    out = []
    for item in request_body.get("input", []):
        if item.get("type") == "message" and item.get("role") in ("user", "assistant"):
            texts = [part.get("text", "") for part in item.get("content", [])]
            out.append((item["role"], "".join(texts)))
    return out


def minute_of(epoch: float) -> str:
    """The reset a codex clock time names, as a record says it: codex prints `resets_at` cut to
    the minute ("try again at 3:20 AM"), so the record's reset is the end of that minute (the
    first time the limit has surely reset), in UTC."""
    floor = int(epoch) - int(epoch) % 60 + 60
    return datetime.fromtimestamp(floor, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- 1. codex that can work -----------------------------------------------------------------------


@pytest.mark.parametrize("repository", [False, True], ids=["plain-folder", "git-repository"])
def test_codex_edits_its_workdir_in_and_outside_a_repository(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer, repository: bool
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    if repository:
        subprocess.run(["git", "init", "-q", str(work)], check=True, capture_output=True)
    openai_server.script(exec_command("touch made-by-codex"), text("touched it"))

    result, job_id, _ = submit_codex(home, env, work, "Make the file.")

    assert result.returncode == 0, result.stderr
    assert (work / "made-by-codex").exists()
    job = shown(home, env, job_id)
    assert job["status"] == "completed" and job["error"] is None
    argv = job["launch"]["argv"]
    assert argv[1] == "exec" and argv[-2:] == ["--json", "-"]
    assert 'sandbox_mode="workspace-write"' in argv
    assert "features.unbounded_connection_retries=false" in argv
    assert ("--skip-git-repo-check" in argv) is not repository
    # the key came through the extended profile's pass_env, and only in its header
    first, second = openai_server.turn_requests
    assert first.header("authorization") == f"Bearer {API_KEY}"
    assert API_KEY.encode() not in first.raw + second.raw
    output = second.body["input"][-1]
    assert output["type"] == "function_call_output" and "exited with code 0" in output["output"]


# -- 2. tokens counted once; a resumed thread -----------------------------------------------------


def _first_then_resumed(
    home: Path, env: dict[str, str], work: Path, server: OpenAIServer
) -> tuple[dict[str, Any], dict[str, Any], subprocess.CompletedProcess[str]]:
    """A job in session `talk` (1300 input of which 400 cached, 50 output), then `session
    resume talk` (700 new input, 20 output): both records and the resume's result."""
    server.script(text("first answer", 1300, 50, cached=400), text("second answer", 700, 20))
    result, first_id, _ = submit_codex(home, env, work, "first question", "--session", "talk")
    assert result.returncode == 0, result.stderr
    first = shown(home, env, first_id)
    resumed = run_cli(
        home, "session", "resume", "talk", "--prompt", "second question", "--wait", env=env
    )
    assert resumed.returncode == 0, resumed.stderr
    second = shown(home, env, json_lines(resumed.stdout)[0]["job_id"])
    return first, second, resumed


def test_codex_tokens_are_counted_once_and_session_resume_continues_the_thread(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    first, second, resumed = _first_then_resumed(home, env, work, openai_server)

    # codex's input_tokens (1300) include the cached ones (400): counted once, not 1700
    assert (first["tokens_in"], first["tokens_out"]) == (1300, 50)
    assert first["conversation_usage"]["input_tokens"] == 1300
    thread = first["conversation_id"]
    assert thread and f"continues conversation {thread}" in resumed.stderr

    assert second["status"] == "completed" and second["conversation_id"] == thread
    assert second["launch"]["argv"][-5:] == ["--json", "resume", "--", thread, "-"]
    # the conversation really continued: the resumed run sent the earlier turns
    request = openai_server.turn_requests[-1]
    assert request.header("session-id") == thread
    turns = said(request.body)
    assert [role for role, _ in turns[-3:]] == ["user", "assistant", "user"]
    assert turns[-3][1].endswith("first question")
    assert turns[-2][1] == "first answer"
    assert turns[-1][1].endswith("second question")


def test_codex_session_resume_counts_only_the_new_tokens(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    _, second, _ = _first_then_resumed(home, env, work, openai_server)
    assert second["conversation_usage"]["input_tokens"] == 2000  # codex's thread total
    assert (second["tokens_in"], second["tokens_out"]) == (700, 20)


# -- 3. reconnecting is a state -------------------------------------------------------------------


def test_codex_reconnecting_is_a_state_not_an_ending(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    # after the 429 the answer streams slowly: the reconnect is seen while it lasts
    openai_server.script(rate_limited(retry_after=0), Text("after the 429", pieces=6, delay=0.5))
    waiting = popen_cli(
        home,
        "submit",
        "--agent",
        "codex",
        "--prompt",
        "Hi.",
        "--workdir",
        str(work),
        "--idle-timeout",
        f"{IDLE_S:g}",
        "--wall-timeout",
        f"{WALL_S:g}",
        "--wait",
        env=env,
    )
    try:

        def retrying() -> dict[str, Any] | None:
            rows = [row for row in listed(home, env).values() if row.get("agent_retry")]
            return rows[0] if rows else None

        row = retry_until(retrying, timeout=30, interval=0.1)
        assert row["job_state"] == "running"
        assert row["agent_retry"]["error"] == "reconnecting"
        assert (row["agent_retry"]["attempt"], row["agent_retry"]["max_retries"]) == (1, 1)
        out, err = waiting.communicate(timeout=WALL_S)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, err
    job_id = json_lines(out)[0]["job_id"]
    job = shown(home, env, job_id)
    assert job["status"] == "completed" and job["error"] is None
    assert job["agent_retry"] is None  # cleared once codex made progress again
    progress = [e["detail"] for e in published(audit(home, env, job_id), "progress")]
    assert (
        "reconnecting: Reconnecting... 1/1 (exceeded retry limit, last status: 429 Too Many"
        " Requests)" in progress
    )


# -- 4. failures in the CLI's words, bounded ------------------------------------------------------


HIGH_DEMAND = "We’re currently experiencing high demand, which may cause temporary errors."


@pytest.mark.parametrize("failure", ["unauthorized", "dead-server", "500-storm"])
def test_codex_failures_end_the_job_in_codex_words_within_its_timeouts(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer, failure: str
):
    server: OpenAIServer | str = dead_url() if failure == "dead-server" else openai_server
    env = codex_env(home, tmux_env, tmp_path, server)
    work = tmp_path / "work"
    work.mkdir()
    if failure == "unauthorized":
        openai_server.script(*[unauthorized()] * 4)
    elif failure == "500-storm":
        openai_server.script(*[server_error()] * 8)

    result, job_id, elapsed = submit_codex(home, env, work, "Hi.")

    assert result.returncode == 1, result.stderr
    assert elapsed < 30 < IDLE_S  # codex gave up by itself: no timeout ended it
    job = shown(home, env, job_id)
    assert job["status"] == "error" and job["agent_retry"] is None
    error = job["error"]
    assert "\n" not in error
    if failure == "unauthorized":
        assert error.startswith("agent_error: unexpected status 401 Unauthorized: invalid")
        assert error.endswith(f"url: {openai_server.url}/v1/responses")
        assert len(openai_server.turn_requests) == 2  # codex retried it once, as configured
    elif failure == "dead-server":
        assert error == "agent_error: Connection failed: error sending request"
    else:
        assert error == f"agent_error: {HIGH_DEMAND}"
        assert len(openai_server.turn_requests) == 4  # 2 turn attempts of 2 requests each
    assert job["retried_by"] is None
    assert f"the agent reported an error: {error.removeprefix('agent_error: ')}" in result.stderr
    # its reconnect came first, as progress
    progress = [e["detail"] for e in published(audit(home, env, job_id), "progress")]
    assert any(detail.startswith("reconnecting: Reconnecting... 1/1 (") for detail in progress)


# -- 5. usage limit, quota ------------------------------------------------------------------------


def _in_kolkata(
    home: Path, tmux_env: dict[str, str], tmp_path: Path, server: OpenAIServer
) -> tuple[dict[str, str], Path]:
    """A codex job's environment in the agent's zone Asia/Kolkata (codex names "9:05 AM" for
    03:35Z), a short resume jitter, and its working folder."""
    env = codex_env(
        home, tmux_env, tmp_path, server, TZ="Asia/Kolkata", DELEGATE_RATE_LIMIT_JITTER_S="0.5"
    )
    work = tmp_path / "work"
    work.mkdir()
    return env, work


def test_codex_usage_limit_ends_the_attempt_rate_limited_and_the_next_resumes_the_thread(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env, work = _in_kolkata(home, tmux_env, tmp_path, openai_server)
    # a minute ago: codex still names it ("try again at 3:39 AM"), and its end has passed, so
    # the next attempt is due at once (the wait itself: the test below)
    resets_at = int(time.time()) - 61
    openai_server.script(UsageLimit(resets_at=resets_at), text("carried on", 700, 7))

    result, first_id, _ = submit_codex(home, env, work, "first question")

    assert result.returncode == 0, result.stderr  # --wait followed the attempts to the last
    first = shown(home, env, first_id)
    assert first["status"] == "error"
    assert first["error"] == f"rate_limited: resets at {minute_of(resets_at)}"
    thread = first["conversation_id"]
    assert thread and first["retried_by"]
    assert f"attempt 2 follows as {first['retried_by']}, resuming conversation {thread}" in (
        result.stderr
    )
    second = shown(home, env, first["retried_by"])
    assert second["status"] == "completed"
    assert (second["attempt"], second["retry_of"]) == (2, first_id)
    assert second["conversation_id"] == thread
    assert second["launch"]["argv"][-5:] == ["--json", "resume", "--", thread, "-"]
    # it resumed the thread: the first question went to the server again, with the new prompt
    assert len(openai_server.turn_requests) == 2
    turns = said(openai_server.turn_requests[1].body)
    assert turns[-2][1].endswith("first question")
    assert turns[-1][1].endswith("Continue where you left off.\n")
    # the failed turn reported no usage: the attempt's own is all there is
    assert (second["tokens_in"], second["tokens_out"]) == (700, 7)


def _limited(home: Path, env: dict[str, str], work: Path, server: OpenAIServer, at: int) -> str:
    """A codex job whose first turn hits a usage limit resetting at `at`, submitted: its id."""
    server.script(UsageLimit(resets_at=at), text("carried on"))
    argv = ["submit", "--agent", "codex", "--prompt", "Hi.", "--workdir", str(work), "--no-wait"]
    result = run_cli(home, *argv, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_codex_usage_limit_attempt_waits_for_the_reset(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(
        home, tmux_env, tmp_path, openai_server, TZ="UTC", DELEGATE_RATE_LIMIT_JITTER_S="0"
    )
    work = tmp_path / "work"
    work.mkdir()
    resets_at = int(time.time()) + 3
    resets_at += resets_at % 60 == 0  # not on the minute, which codex prints exactly
    job_id = _limited(home, env, work, openai_server, resets_at)
    following = retry_until(lambda: shown(home, env, job_id)["retried_by"], timeout=30)
    not_before = shown(home, env, following)["not_before"]  # None: it starts at once
    assert not_before is not None, "the next attempt starts at once, before the reset"
    assert datetime.fromisoformat(not_before.replace("Z", "+00:00")).timestamp() >= resets_at


def test_codex_usage_limit_is_read_in_the_agents_zone_not_the_tmux_servers(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env, work = _in_kolkata(home, tmux_env, tmp_path, openai_server)
    # the tmux server was started earlier, by someone in another zone
    subprocess.run(
        ["tmux", "-L", tmux_env["DELEGATE_TMUX_SOCKET"], "-f", "/dev/null", "new-session", "-d"],
        env={**os.environ, "TZ": "UTC"},
        check=True,
    )
    resets_at = int(time.time()) + 3
    job_id = _limited(home, env, work, openai_server, resets_at)
    ended = retry_until(lambda: shown(home, env, job_id)["error"], timeout=30)
    assert ended == f"rate_limited: resets at {minute_of(resets_at)}"


def test_codex_quota_exceeded_is_a_plain_error_and_no_attempt_follows(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    openai_server.script(QUOTA, text("never asked for"))

    result, job_id, elapsed = submit_codex(home, env, work, "Hi.")

    assert result.returncode == 1, result.stderr
    assert elapsed < 30
    job = shown(home, env, job_id)
    assert (job["status"], job["error"]) == ("error", f"agent_error: {QUOTA_EXCEEDED}")
    assert job["retried_by"] is None and job["not_before"] is None
    assert len(openai_server.turn_requests) == 1  # codex does not retry it either
    assert list(listed(home, env)) == [job_id]  # nothing queued after it
    assert "follows as" not in result.stderr


# -- 6. MCP through the real codex ----------------------------------------------------------------


def test_codex_puts_on_the_blackboard_through_delegate_mcp_with_no_secret_in_any_argv(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    work = tmp_path / "work"
    work.mkdir()
    openai_server.script(
        ToolSearch("blackboard put"),
        codex_mcp("delegate", "bb_put", key="codex:result", value={"files": 3}),
        slow("put it", delay=0.25, pieces=4),  # the processes live on while argv is read
    )
    waiting = popen_cli(
        home,
        "submit",
        "--agent",
        "codex",
        "--prompt",
        "Put it on the blackboard.",
        "--workdir",
        str(work),
        "--idle-timeout",
        f"{IDLE_S:g}",
        "--wall-timeout",
        f"{WALL_S:g}",
        "--wait",
        env=env,
    )
    snapshots = []  # every process's argv, again and again while the job runs
    deadline = time.monotonic() + WALL_S
    try:
        while waiting.poll() is None and time.monotonic() < deadline:
            ps = ["ps", "-eww", "-o", "args="]
            snapshots.append(subprocess.run(ps, capture_output=True, text=True).stdout)
            time.sleep(0.05)
        out, err = waiting.communicate(timeout=10)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    processes = "".join(snapshots)
    said_ = "\n".join(path.read_text() for path in (home / "logs").glob("*/agent.log"))
    board = json.loads(run_cli(home, "bb", "read", "codex:result", env=env).stdout)
    assert board == {"files": 3}, said_
    assert waiting.returncode == 0, err
    job_id = json_lines(out)[0]["job_id"]
    job = shown(home, env, job_id)
    assert job["status"] == "completed"
    # the tools were found with codex's tool search, then called in their namespace
    found = openai_server.turn_requests[1].body["input"][-1]
    assert found["type"] == "tool_search_output"
    assert found["tools"][0]["name"] == "mcp__delegate"
    output = openai_server.turn_requests[2].body["input"][-1]
    assert output["type"] == "function_call_output"

    token = State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id).auth_token
    assert token and len(token) >= 16
    argv = " ".join(job["launch"]["argv"])
    assert "delegate.entry.mcp" in argv and 'default_tools_approval_mode="approve"' in argv
    # codex waits for it: unrequired, a server slower than codex's first request (a warm
    # server still starting on a busy machine) had no tools in the run ("unsupported call")
    assert "mcp_servers.delegate.required=true" in argv
    assert "codex exec" in processes and "delegate.entry.mcp" in processes  # it saw them
    for secret in (token, API_KEY):
        assert secret not in argv
        assert secret not in processes
        assert secret not in json.dumps(job)
    assert token not in openai_server.dump()  # nor did codex hand the job's token to the model


def test_a_sandboxed_codex_edits_its_workdir_through_the_allowlist_only(
    home: Path, tmux_env, tmp_path: Path, openai_server: OpenAIServer
):
    """Issue 32: the real codex in a bubblewrap box whose only network is its egress proxy,
    which lets through the model server's address: it does its work and completes."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("no bubblewrap here")
    env = codex_env(home, tmux_env, tmp_path, openai_server)
    # its own sandbox is off inside ours: it needs no TMPDIR of its own (whose long path would
    # leave the warm MCP server no place for its socket)
    env.pop("TMPDIR")
    codex_home = tmp_path / "codex-home"
    sandbox = (
        f'[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["127.0.0.1"]\nwrite = ["{codex_home}"]\n'
    )
    with (home / "delegate.toml").open("a") as config:
        config.write(sandbox)
    work = tmp_path / "work"
    work.mkdir()
    openai_server.script(exec_command("touch made-in-the-box"), text("touched it"))

    result, job_id, _ = submit_codex(home, env, work, "Make the file.", "--sandbox")

    assert result.returncode == 0, result.stderr
    assert (work / "made-in-the-box").exists()
    job = shown(home, env, job_id)
    assert job["status"] == "completed", job["error"]
    # codex cannot make its own sandbox inside ours: it is told ours holds it
    assert 'sandbox_mode="danger-full-access"' in job["launch"]["argv"]
    said = retry_until(
        lambda: State.open(env={"DELEGATE_HOME": str(home)}).audit.read_events(job_id, "egress"),
        timeout=30,
    )
    assert ("127.0.0.1", True) in {(e["host"], e["allowed"]) for e in said}, said
