"""The real Claude Code CLI (installed by `make` into .cache/agents) through `delegate`, in real
tmux, against the suite's scripted Anthropic Messages server (tests/models): approvals through
its PreToolUse hook, denied work, its retries as a waiting state, a refused key, MCP tools,
resume, and failures in its own words. Only `delegate` commands act; the registry is read to
check what they recorded."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from delegate.core.model import JobState
from delegate.core.timefmt import parse_timestamp
from delegate.services.state import State

from .helpers import json_lines, retry_until, run_cli
from .models import (
    AnthropicServer,
    Stall,
    ToolCall,
    Usage,
    UsageLimit,
    bash,
    claude_mcp,
    dead_url,
    rate_limited,
    server_error,
    text,
    unauthorized,
)
from .real_claude import API_KEY, claude_job_env, claude_profile


def _submit(home: Path, env: dict[str, str], workdir: Path, *extra: str, wait: bool = False):
    workdir.mkdir(parents=True, exist_ok=True)
    args = ["submit", "--agent", "claude", "--prompt", "Do the task.", "--workdir", str(workdir)]
    args += ["--idle-timeout", "60", "--wall-timeout", "120", *extra]
    if wait:
        return run_cli(home, *args, "--wait", env=env, timeout=150)
    result = run_cli(home, *args, "--no-wait", "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json_lines(result.stdout)[-1]["job_id"]


def _job(home: Path, job_id: str):
    return State.open(env={"DELEGATE_HOME": str(home)}).registry.get(job_id)


def _ended(home: Path, job_id: str, timeout: float = 60.0):
    return retry_until(
        lambda: (job := _job(home, job_id)).status.terminal and job, timeout=timeout, interval=0.1
    )


def _waiting(home: Path, env: dict[str, str], timeout: float = 30.0) -> list[dict[str, Any]]:
    def listed() -> list[dict[str, Any]]:
        out = run_cli(home, "approvals", "--json", env=env)
        return json_lines(out.stdout) if out.returncode == 0 else []

    return retry_until(listed, timeout=timeout, interval=0.1)


def _tool_results(server: AnthropicServer) -> list[dict[str, Any]]:
    """The tool_result blocks claude sent back to the model, in order."""
    found: dict[str, dict[str, Any]] = {}
    for request in server.turn_requests:
        for message in request.body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result":
                    found.setdefault(block.get("tool_use_id"), block)
    return list(found.values())


def _text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content)
    return str(content)


def test_a_gated_call_waits_for_a_person_and_runs_once_approved(
    anthropic_server, home, tmux_env, tmp_path
):
    server = anthropic_server.script(*[bash("touch made-by-bash"), text("made it")])
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    work = tmp_path / "work"
    job_id = _submit(home, env, work)
    waiting = _waiting(home, env)
    assert len(waiting) == 1, waiting
    (request,) = waiting
    assert request["job_id"] == job_id and request["tool"] == "Bash"
    assert "touch made-by-bash" in request["summary"]
    assert request["call"] == "touch made-by-bash"  # the whole call, never cut
    assert not (work / "made-by-bash").exists()  # it waits: nothing ran before the answer
    approved = run_cli(home, "approve", job_id, env=env)
    assert approved.returncode == 0, approved.stderr
    job = _ended(home, job_id)
    assert job.status is JobState.COMPLETED, job.error
    assert (work / "made-by-bash").exists()
    assert not job.denied_tools
    (result,) = _tool_results(server)
    assert not result.get("is_error"), result
    decided = State.open(env={"DELEGATE_HOME": str(home)}).audit.read_events(
        job_id, kind="permission_decided"
    )
    assert [(d["tool"], d["behavior"]) for d in decided] == [("Bash", "allow")]
    assert decided[0]["maker"] not in ("timeout", "remembered")


def test_a_denied_call_is_never_a_plain_success(anthropic_server, home, tmux_env, tmp_path):
    server = anthropic_server.script(*[bash("touch nope"), text("could not")])
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    work = tmp_path / "work"
    job_id = _submit(home, env, work)
    _waiting(home, env)
    denied = run_cli(home, "approve", job_id, "--deny", "--reason", "not today", env=env)
    assert denied.returncode == 0, denied.stderr
    job = _ended(home, job_id)
    assert not (work / "nope").exists()
    assert job.status is JobState.COMPLETED
    assert job.denied_tools == ["Bash"]
    (result,) = _tool_results(server)
    assert result.get("is_error") and "not today" in _text(result)
    shown = run_cli(home, "show", job_id, env=env)
    assert "1 tool call denied" in shown.stdout, shown.stdout
    audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
    assert [e["tool_name"] for e in audit.read_events(job_id, kind="tool_denied")] == ["Bash"]


def test_rules_and_profile_settings_decide_without_a_person(
    anthropic_server, home, tmux_env, tmp_path
):
    """A rule allows `touch *`; `allowed_tools` lets Claude run Write itself; `dontAsk` makes
    Claude deny what nothing allowed, on the spot, and the record says so."""
    work = tmp_path / "work"
    written = work / "written.txt"
    server = anthropic_server.script(
        bash("touch by-rule"),
        ToolCall("Write", {"file_path": str(written), "content": "by claude itself\n"}),
        bash("rm -f by-rule"),
        text("done"),
    )
    rule = '[[approvals.rules]]\ntool = "Bash"\nmatch = "touch *"\ndecision = "allow"\n'
    settings = 'permission_mode = "dontAsk"\nallowed_tools = ["Write"]\n'
    claude_profile(home, server, rule, profile=settings)
    env = claude_job_env(tmux_env)
    started = time.monotonic()
    job_id = _submit(home, env, work)
    job = _ended(home, job_id)
    assert time.monotonic() - started < 40  # no person was waited for
    assert (work / "by-rule").exists()  # the rule allowed the touch, the rm was not run
    assert written.read_text() == "by claude itself\n"  # allowed_tools: claude's own to allow
    assert job.status is JobState.COMPLETED and job.denied_tools == ["Bash"]
    launch = job.launch["argv"]
    assert "--permission-mode=dontAsk" in launch and "--allowedTools=Write" in " ".join(launch)
    audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
    makers = [d["maker"] for d in audit.read_events(job_id, kind="permission_decided")]
    assert makers == ["rule 1 (allow Bash touch *)"]


def test_remember_allows_the_tool_for_the_rest_of_the_job(
    anthropic_server, home, tmux_env, tmp_path
):
    server = anthropic_server.script(*[bash("touch one"), bash("touch two"), text("both")])
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    work = tmp_path / "work"
    job_id = _submit(home, env, work)
    _waiting(home, env)
    assert run_cli(home, "approve", job_id, "--remember", env=env).returncode == 0
    job = _ended(home, job_id)
    assert job.status is JobState.COMPLETED and not job.denied_tools
    assert (work / "one").exists() and (work / "two").exists()
    audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
    makers = [d["maker"] for d in audit.read_events(job_id, kind="permission_decided")]
    assert len(makers) == 2 and makers[1] == "remembered"


def test_an_unanswered_call_is_denied_at_the_timeout(anthropic_server, home, tmux_env, tmp_path):
    server = anthropic_server.script(*[bash("touch late"), text("gave up")])
    claude_profile(home, server, '[approvals]\ntimeout = 1\non_timeout = "deny"\n')
    env = claude_job_env(tmux_env)
    result = _submit(home, env, tmp_path / "work", wait=True)
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[0]["job_id"]
    job = _job(home, job_id)
    assert job.status is JobState.COMPLETED and job.denied_tools == ["Bash"]
    assert "completed, 1 tool call denied" in result.stderr, result.stderr  # its last line
    assert not (tmp_path / "work" / "late").exists()
    (denial,) = _tool_results(server)
    assert denial.get("is_error") and "no decision within 1 s" in _text(denial)


def test_api_retries_are_a_visible_waiting_state(anthropic_server, home, tmux_env, tmp_path):
    server = anthropic_server.script(*[rate_limited(retry_after=4), text("after the wait")])
    claude_profile(home, server, max_retries=3)
    env = claude_job_env(tmux_env)
    job_id = _submit(home, env, tmp_path / "work")

    def retrying() -> dict[str, Any] | None:
        listed = run_cli(home, "ps", "--json", env=env)
        rows = [r for r in json_lines(listed.stdout) if r.get("job_id") == job_id]
        return rows[0] if rows and rows[0].get("agent_retry") else None

    row = retry_until(retrying, timeout=20, interval=0.1)
    assert row["job_state"] == "running"
    assert row["agent_retry"]["error"] == "rate_limit"
    assert row["agent_retry"]["error_status"] == 429
    assert (row["agent_retry"]["attempt"], row["agent_retry"]["max_retries"]) == (1, 3)
    job = _ended(home, job_id)
    assert job.status is JobState.COMPLETED, job.error
    assert job.agent_retry is None


def test_a_refused_key_ends_the_job_at_once(anthropic_server, home, tmux_env, tmp_path):
    """Claude retries a 401 like a 429 (ten times, minutes); a key does not heal by waiting."""
    server = anthropic_server.script(*[unauthorized()] * 12)
    claude_profile(home, server, max_retries=10)
    env = claude_job_env(tmux_env)
    started = time.monotonic()
    result = _submit(home, env, tmp_path / "work", wait=True)
    assert time.monotonic() - started < 20
    assert result.returncode != 0
    job = _job(home, json_lines(result.stdout)[0]["job_id"])
    assert job.status is JobState.ERROR
    assert "authentication failed" in (job.error or ""), job.error
    assert len(server.turn_requests) <= 3  # stopped, not left to retry ten times


@pytest.mark.parametrize(
    ("turns", "words"),
    [
        ([unauthorized(should_retry=False)], "Invalid API key"),
        ([server_error()] * 3, "API Error: 500"),
        (None, "Unable to connect to API"),
    ],
    ids=["401-no-retry", "500-storm", "server-down"],
)
def test_failures_end_in_error_in_the_clis_words(
    anthropic_server, home, tmux_env, tmp_path, turns, words
):
    server = anthropic_server.script(*turns or [])
    if turns is None:
        server.stop()
        claude_profile(home, dead_url(), max_retries=1)
    else:
        claude_profile(home, server, max_retries=2)
    env = claude_job_env(tmux_env)
    started = time.monotonic()
    result = _submit(home, env, tmp_path / "work", wait=True)
    assert time.monotonic() - started < 45  # well within its idle and wall timeouts
    job = _job(home, json_lines(result.stdout)[0]["job_id"])
    assert job.status is JobState.ERROR
    assert words in (job.error or ""), job.error
    assert not (job.error or "").startswith("rate_limited")


def test_our_mcp_tools_are_allowed_and_the_rest_still_gated(
    anthropic_server, home, tmux_env, tmp_path
):
    server = anthropic_server.script(
        *[
            claude_mcp("delegate", "bb_put", key="result:answer", value=42),
            bash("touch gated"),
            text("stored"),
        ]
    )
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    job_id = _submit(home, env, tmp_path / "work")
    (request,) = _waiting(home, env)  # the Bash call asks; bb_put did not
    assert request["tool"] == "Bash"
    read = run_cli(home, "bb", "read", "result:answer", env=env)
    assert read.returncode == 0 and json.loads(read.stdout) == 42, read.stdout
    assert run_cli(home, "approve", job_id, env=env).returncode == 0
    job = _ended(home, job_id)
    assert job.status is JobState.COMPLETED and not job.denied_tools
    mcp_result, bash_result = _tool_results(server)
    assert not bash_result.get("is_error"), bash_result
    assert not mcp_result.get("is_error"), mcp_result
    argv = " ".join(job.launch["argv"])
    assert API_KEY not in argv and job.auth_token not in argv
    assert "--allowedTools=mcp__delegate" in argv


def test_session_resume_continues_the_real_conversation(anthropic_server, home, tmux_env, tmp_path):
    server = anthropic_server.script(*[text("first answer"), text("second answer")])
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    first = _submit(home, env, tmp_path / "work", "--session", "talk", wait=True)
    assert first.returncode == 0, first.stderr
    job = _job(home, json_lines(first.stdout)[0]["job_id"])
    assert job.conversation_id
    resumed = run_cli(
        home,
        "session",
        "resume",
        "talk",
        "--prompt",
        "And then?",
        "--wait",
        env=env,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"continues conversation {job.conversation_id}" in resumed.stderr
    last = server.turn_requests[-1].body["messages"]
    said = json.dumps(last)
    assert "first answer" in said and "And then?" in said  # the earlier turns were sent


def test_an_interrupted_job_is_requeued_into_the_same_conversation(
    anthropic_server, home, tmux_env, tmp_path
):
    """The pane dies mid-answer (`on_interrupt = "requeue"`): the next attempt resumes the
    conversation claude recorded, so the model sees the first prompt again."""
    server = anthropic_server.script(*[Stall(seconds=30), text("picked up again")])
    claude_profile(home, server, profile='on_interrupt = "requeue"\n')
    env = claude_job_env(tmux_env)
    job_id = _submit(home, env, tmp_path / "work", "--session", "cut")
    retry_until(lambda: len(server.turn_requests) >= 1, timeout=30, interval=0.05)
    job = retry_until(lambda: (j := _job(home, job_id)).conversation_id and j, timeout=10)
    socket = tmux_env["DELEGATE_TMUX_SOCKET"]
    subprocess.run(["tmux", "-L", socket, "kill-session", "-t", "cut"], check=True)
    run_cli(home, "monitor", "--once", "--json", env=env, timeout=60)
    ended = _ended(home, job_id)
    assert ended.status is JobState.ERROR and ended.retried_by, ended.error
    attempt = _ended(home, ended.retried_by)
    assert attempt.status is JobState.COMPLETED, attempt.error
    argv = attempt.launch["argv"]
    assert f"--resume={job.conversation_id}" in argv
    said = json.dumps(server.turn_requests[-1].body["messages"])
    assert "Do the task." in said and "Continue where you left off." in said


def test_a_rate_limit_the_cli_gave_up_on_is_resumed_later(
    anthropic_server, home, tmux_env, tmp_path
):
    """After its own retries of a 429, claude fails; the attempt ends `rate_limited` (no reset
    time given: a backoff) and the next attempt waits queued, `ps` saying when it resumes."""
    server = anthropic_server.script(*[rate_limited(retry_after=0)] * 3)
    claude_profile(home, server, max_retries=1)
    env = claude_job_env(tmux_env)
    result = _submit(home, env, tmp_path / "work", wait=False)
    job = _ended(home, result)
    assert job.status is JobState.ERROR
    assert job.error == "rate_limited: no reset time", job.error
    attempt_id = retry_until(lambda: _job(home, result).retried_by, timeout=20)
    listed = json_lines(run_cli(home, "ps", "--json", env=env).stdout)
    (row,) = [r for r in listed if r["job_id"] == attempt_id]
    assert row["job_state"] == "queued" and row["resumes_at"], row
    attempt = _job(home, attempt_id)
    assert attempt.conversation_id == job.conversation_id  # it will resume, not restart
    why = run_cli(home, "why", attempt_id, env=env)
    assert why.returncode == 0 and "rate" in why.stdout.lower(), why.stdout


def test_a_subscription_limit_is_resumed_at_its_reset(anthropic_server, home, tmux_env, tmp_path):
    """On a subscription claude names the reset (`rate_limit_event`); the next attempt starts
    at it, whoever runs (here the job's own followers), and continues the conversation."""
    resets_at = int(time.time()) + 3
    server = anthropic_server.script(*[UsageLimit(resets_at=resets_at), text("after the reset")])
    claude_profile(home, server, oauth_token="scripted-oauth")
    env = claude_job_env(
        tmux_env,
        ANTHROPIC_API_KEY="",
        CLAUDE_CODE_OAUTH_TOKEN="sk-ant-oat01-scripted",
        DELEGATE_RATE_LIMIT_JITTER_S="0.2",
    )
    job_id = _submit(home, env, tmp_path / "work")
    first = _ended(home, job_id)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(resets_at))
    assert first.error == f"rate_limited: resets at {stamp}", first.error
    attempt_id = retry_until(lambda: _job(home, job_id).retried_by, timeout=10)
    attempt = _ended(home, attempt_id, timeout=40)
    assert attempt.status is JobState.COMPLETED, attempt.error
    assert attempt.started_at is not None  # and not before the reset:
    assert parse_timestamp(attempt.started_at).timestamp() >= resets_at
    argv = attempt.launch["argv"]
    assert f"--resume={first.conversation_id}" in argv
    said = json.dumps(server.turn_requests[-1].body["messages"])
    assert "Do the task." in said  # the conversation went on


def test_a_budget_stops_the_real_claude_part_way(anthropic_server, home, tmux_env, tmp_path):
    """Each message's tokens are counted once as claude streams them; crossing --max-tokens
    ends the job `budget_exceeded` and stops claude before the rest of its work."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("some notes\n")
    read = ToolCall("Read", {"file_path": str(work / "notes.txt")}, usage=Usage(400, 200))
    server = anthropic_server.script(*[read] * 6 + [text("read it all")])
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    result = _submit(home, env, work, "--max-tokens", "1000", wait=True)
    assert result.returncode != 0
    job = _job(home, json_lines(result.stdout)[0]["job_id"])
    assert job.status is JobState.ERROR
    assert (job.error or "").startswith("budget_exceeded: 1,203 tokens"), job.error
    assert len(server.turn_requests) <= 4  # stopped: not all seven turns were asked for


def test_a_sandboxed_claude_reaches_its_model_through_the_allowlist_only(
    anthropic_server, home, tmux_env, tmp_path
):
    """Issue 32: the real claude in a bubblewrap box, its network only its egress proxy, which
    lets through the model server's address and nothing else: it completes its job."""
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("no bubblewrap here")
    server = anthropic_server.script(text("all done, from inside the box"))
    sandbox = '[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["127.0.0.1"]\n'
    claude_profile(home, server, extra=sandbox)
    env = claude_job_env(tmux_env)
    job_id = _submit(home, env, tmp_path / "work", "--sandbox")
    job = _ended(home, job_id, timeout=90)
    assert job.status is JobState.COMPLETED, job.error
    assert job.launch["sandbox"]["network"] == "allowlist"
    audit = State.open(env={"DELEGATE_HOME": str(home)}).audit
    # its ending comes from claude's stream; its connections are said as they close, once
    # claude has exited (it keeps them open until then)
    said = retry_until(lambda: audit.read_events(job_id, "egress"), timeout=30)
    reached = {(e["host"], e["allowed"]) for e in said}
    assert ("127.0.0.1", True) in reached, said
    assert all(e["host"] in ("127.0.0.1", "api.anthropic.com") or not e["allowed"] for e in said)
