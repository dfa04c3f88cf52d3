"""The bare real `claude` and `codex` CLIs (installed by `make agents`) against the scripted
model servers of tests/models, offline: what each CLI really does with a text turn, a tool call,
an MCP call, a retryable or final HTTP error, a usage limit, a dead server, a broken or stalled
stream, and a resumed conversation. These fail, never skip, when the install is missing."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.register import register_job
from delegate.services.state import State
from tests.helpers import run_cli
from tests.models import (
    FINAL,
    AnthropicServer,
    Drop,
    OpenAIServer,
    Stall,
    ToolSearch,
    UsageLimit,
    bash,
    claude_mcp,
    codex_mcp,
    dead_url,
    exec_command,
    mcp_server_toml,
    rate_limited,
    server_error,
    slow,
    text,
    unauthorized,
)
from tests.models.anthropic import API_KEY as CLAUDE_KEY
from tests.models.cli import Run, run_claude, run_codex
from tests.models.openai import API_KEY as CODEX_KEY

# -- helpers --------------------------------------------------------------------------------------


def delegate_job(state_dir: Path) -> str:
    """A started job in a fresh delegate state dir, for `delegate mcp` to serve."""
    state = State.open(env={"DELEGATE_HOME": str(state_dir)})
    job, _ = register_job(state, command="true", workdir=str(state_dir))
    publish_event(state, job.job_id, "started")
    return job.job_id


def mcp_entry(state_dir: Path, job_id: str) -> dict[str, Any]:
    env = {"DELEGATE_HOME": str(state_dir), "DELEGATE_JOB_ID": job_id}
    return {"command": sys.executable, "args": ["-m", "delegate.entry.mcp"], "env": env}


def blackboard(state_dir: Path, key: str) -> Any:
    return json.loads(run_cli(state_dir, "bb", "read", key).stdout)


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    """Every text block of an Anthropic `messages` list, in order."""
    found = []
    for message in messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        found.extend(block["text"] for block in blocks if block.get("type") == "text")
    return found


def codex_errors(run: Run) -> list[str]:
    return [line["message"] for line in run.of_type("error")]


def agent_messages(run: Run) -> list[str]:
    items = [line["item"] for line in run.of_type("item.completed")]
    return [item["text"] for item in items if item["type"] == "agent_message"]


def post(url: str, body: Any = None, method: str = "POST") -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, response.read()


def sse_data(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]


# -- the servers on their own ---------------------------------------------------------------------


def test_side_requests_take_no_turn_and_an_empty_script_answers_done(
    anthropic_server: AnthropicServer, openai_server: OpenAIServer
):
    anthropic_server.script(text("the scripted answer"))
    url = anthropic_server.url
    assert post(url + "/", method="HEAD")[0] == 200
    title = {
        "model": "claude-haiku-4-5",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "t"}],
    }
    assert b"Scripted side answer" in post(url + "/v1/messages", title)[1]
    quota = {"model": "claude-haiku-4-5", "max_tokens": 1, "tools": [], "messages": []}
    assert post(url + "/v1/messages", quota)[0] == 200
    assert json.loads(post(url + "/v1/messages/count_tokens", title)[1])["input_tokens"] > 0
    assert anthropic_server.remaining == 1 and anthropic_server.turn_requests == []

    turn = {"model": "m", "max_tokens": 100, "tools": [], "stream": True, "messages": []}
    first = sse_data(post(url + "/v1/messages?beta=true", turn)[1])
    assert [e["delta"]["text"] for e in first if e["type"] == "content_block_delta"] == [
        "the scripted answer"
    ]
    assert first[-1] == {"type": "message_stop"}
    after = sse_data(post(url + "/v1/messages?beta=true", turn)[1])
    assert len(anthropic_server.wait_for_requests(2, timeout=5)) == 2
    assert FINAL.text in [
        e["delta"].get("text") for e in after if e["type"] == "content_block_delta"
    ]
    assert [r.turn for r in anthropic_server.turn_requests] == [text("the scripted answer"), FINAL]

    assert json.loads(post(openai_server.url + "/v1/models", method="GET")[1])["data"] == []
    events = sse_data(post(openai_server.url + "/v1/responses", {"stream": True, "input": []})[1])
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["usage"]["total_tokens"] == 2
    assert [r.route for r in openai_server.requests] == ["/v1/models", "/v1/responses"]


# -- Claude Code ----------------------------------------------------------------------------------


def test_claude_text_turn_reports_the_scripted_text_and_usage(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(text("Hello from the script", 123, 45, cached=7))
    run = run_claude(anthropic_server, tmp_path, "Say hello.")
    assert run.returncode == 0, run.stderr
    init = run.of_type("system", "init")[0]
    result = run.result
    assert result["is_error"] is False and result["result"] == "Hello from the script"
    assert result["session_id"] == init["session_id"]
    assert result["usage"]["input_tokens"] == 123
    assert result["usage"]["output_tokens"] == 45
    assert result["usage"]["cache_read_input_tokens"] == 7
    (request,) = anthropic_server.turn_requests
    assert request.path == "/v1/messages?beta=true" and request.body["stream"] is True
    assert "Say hello." in user_texts(request.body["messages"])
    assert request.header("x-claude-code-session-id") == init["session_id"]
    assert run.wall < 30


def test_claude_runs_an_allowed_bash_call_for_real(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(bash("touch made-by-claude"), text("made it"))
    run = run_claude(anthropic_server, tmp_path, "Make the file.", "--allowedTools=Bash")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "work" / "made-by-claude").exists()
    assert run.result["result"] == "made it" and run.result["permission_denials"] == []
    call = anthropic_server.turn_requests[0]
    assert "Bash" in [tool["name"] for tool in call.body["tools"]]
    answer = anthropic_server.turn_requests[1].body["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer.get("is_error") is not True


def test_claude_denies_a_bash_call_no_one_allowed(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(bash("touch made-by-claude", "make it"), text("could not"))
    run = run_claude(anthropic_server, tmp_path, "Make the file.")
    assert not (tmp_path / "work" / "made-by-claude").exists()
    (denial,) = run.result["permission_denials"]
    assert denial["tool_name"] == "Bash"
    assert denial["tool_input"] == {"command": "touch made-by-claude", "description": "make it"}
    answer = anthropic_server.turn_requests[1].body["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == denial["tool_use_id"] and answer["is_error"] is True


def test_claude_retries_a_429_then_succeeds(anthropic_server: AnthropicServer, tmp_path: Path):
    anthropic_server.script(rate_limited(retry_after=0), text("after the 429"))
    run = run_claude(anthropic_server, tmp_path, "Hi.")
    (retry,) = run.of_type("system", "api_retry")
    assert retry["attempt"] == 1 and retry["max_retries"] == 2
    assert retry["error_status"] == 429 and retry["error"] == "rate_limit"
    assert retry["retry_delay_ms"] >= 500  # `retry-after: 0` still waits its base backoff
    assert run.result["is_error"] is False and run.result["result"] == "after the 429"
    assert len(anthropic_server.turn_requests) == 2


def test_claude_retries_a_plain_401(anthropic_server: AnthropicServer, tmp_path: Path):
    anthropic_server.script(unauthorized(), text("after the 401"))
    run = run_claude(anthropic_server, tmp_path, "Hi.")
    (retry,) = run.of_type("system", "api_retry")
    assert retry["error_status"] == 401 and retry["error"] == "authentication_failed"
    assert run.result["result"] == "after the 401"


def test_claude_gives_up_at_once_on_a_401_that_should_not_be_retried(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(unauthorized(should_retry=False), text("never asked for"))
    run = run_claude(anthropic_server, tmp_path, "Hi.")
    assert run.returncode == 1
    assert run.of_type("system", "api_retry") == []
    assert run.result["is_error"] is True and run.result["api_error_status"] == 401
    assert run.result["result"] == "Invalid API key · Fix external API key"
    assert run.of_type("assistant")[0]["error"] == "authentication_failed"
    assert len(anthropic_server.turn_requests) == 1 and anthropic_server.remaining == 1


def test_claude_ends_in_error_when_a_500_storm_outlasts_its_retries(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(*[server_error()] * 5)
    run = run_claude(anthropic_server, tmp_path, "Hi.", max_retries=2)
    assert run.returncode == 1
    retries = run.of_type("system", "api_retry")
    assert [r["attempt"] for r in retries] == [1, 2]
    assert {r["error_status"] for r in retries} == {500}
    assert run.result["is_error"] is True and run.result["api_error_status"] == 500
    assert run.result["result"].startswith("API Error: 500 internal server error (scripted).")
    assert len(anthropic_server.turn_requests) == 3 and anthropic_server.remaining == 2


def test_claude_against_a_dead_server(tmp_path: Path):
    run = run_claude(dead_url(), tmp_path, "Hi.", max_retries=1)
    assert run.returncode == 1
    (retry,) = run.of_type("system", "api_retry")
    assert retry["error_status"] is None and retry["error"] == "unknown"
    assert run.result["is_error"] is True and run.result["api_error_status"] is None
    assert run.result["result"] == "API Error: Unable to connect to API (ConnectionRefused)"


def test_claude_falls_back_to_a_plain_request_when_the_stream_breaks(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(Drop(after=2), text("after the drop"))
    run = run_claude(anthropic_server, tmp_path, "Hi.")
    assert run.result["is_error"] is False and run.result["result"] == "after the drop"
    first, second = anthropic_server.turn_requests
    assert first.body["stream"] is True and "stream" not in second.body


def test_claude_reads_a_slow_stream_to_its_end(anthropic_server: AnthropicServer, tmp_path: Path):
    anthropic_server.script(slow("one two three four five", delay=0.2, pieces=5))
    run = run_claude(anthropic_server, tmp_path, "Count.")
    assert run.result["result"] == "one two three four five"
    assert run.result["duration_api_ms"] >= 900


def test_claude_resume_sends_the_earlier_turns_under_the_same_session(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(text("first answer", 100, 10), text("second answer", 200, 20))
    first = run_claude(anthropic_server, tmp_path, "first question")
    session = first.result["session_id"]
    second = run_claude(anthropic_server, tmp_path, "second question", "--resume", session)
    assert second.of_type("system", "init")[0]["session_id"] == session
    assert second.result["session_id"] == session
    assert second.result["result"] == "second answer"
    assert second.result["usage"]["input_tokens"] == 200  # this run's own, not a running total
    messages = anthropic_server.turn_requests[1].body["messages"]
    said = user_texts(messages)
    assert said.index("first question") < said.index("first answer") < said.index("second question")
    assert [m["role"] for m in messages if m["role"] != "system"] == ["user", "assistant", "user"]


def test_claude_on_a_subscription_says_it_hit_its_limit(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    resets_at = int(time.time()) + 2 * 3600
    anthropic_server.script(UsageLimit(resets_at=resets_at), text("never asked for"))
    run = run_claude(anthropic_server, tmp_path, "Hi.", oauth_token="sk-ant-oat01-scripted")
    assert run.returncode == 1
    (event,) = run.of_type("rate_limit_event")
    info = event["rate_limit_info"]
    assert info["status"] == "rejected" and info["resetsAt"] == resets_at
    assert info["rateLimitType"] == "five_hour"
    assert run.result["is_error"] is True and run.result["api_error_status"] == 429
    assert run.result["result"].startswith("You've hit your session limit · resets ")
    (request,) = anthropic_server.turn_requests
    assert request.header("authorization") == "Bearer sk-ant-oat01-scripted"
    assert request.header("x-api-key") is None


def test_claude_on_an_api_key_reports_a_usage_limit_as_a_plain_429(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(UsageLimit())
    run = run_claude(anthropic_server, tmp_path, "Hi.")
    assert run.result["is_error"] is True
    assert (
        run.result["result"] == "API Error: Request rejected (429) · Usage limit reached (scripted)"
    )
    assert run.of_type("rate_limit_event") == [] and run.of_type("system", "api_retry") == []


def test_claude_calls_a_delegate_mcp_tool(anthropic_server: AnthropicServer, tmp_path: Path):
    state_dir = tmp_path / "state"
    job = delegate_job(state_dir)
    config = tmp_path / "mcp.json"
    entry = {"type": "stdio", **mcp_entry(state_dir, job)}
    config.write_text(json.dumps({"mcpServers": {"delegate": entry}}))
    anthropic_server.script(claude_mcp("delegate", "bb_put", key="claude:k", value={"n": 1}))
    run = run_claude(
        anthropic_server,
        tmp_path,
        "Put it.",
        f"--mcp-config={config}",
        "--allowedTools=mcp__delegate",
    )
    assert run.result["is_error"] is False, run.stdout
    assert run.result["result"] == FINAL.text  # the script ran out: the server said "done"
    assert blackboard(state_dir, "claude:k") == {"n": 1}
    names = [tool["name"] for tool in anthropic_server.turn_requests[0].body["tools"]]
    assert "mcp__delegate__bb_put" in names  # Claude Code lists MCP tools outright


def test_claude_sends_its_api_key_only_in_its_header(
    anthropic_server: AnthropicServer, tmp_path: Path
):
    anthropic_server.script(bash("echo hi"), text("ok"))
    run = run_claude(anthropic_server, tmp_path, "Hi.", "--allowedTools=Bash")
    assert run.result["is_error"] is False
    for request in anthropic_server.requests:
        others = {k: v for k, v in request.headers.items() if k != "x-api-key"}
        assert CLAUDE_KEY not in json.dumps(others) and CLAUDE_KEY.encode() not in request.raw
    assert all(r.header("x-api-key") == CLAUDE_KEY for r in anthropic_server.turn_requests)
    assert CLAUDE_KEY not in run.stdout + run.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CLAUDE_KEY.encode() not in path.read_bytes(), path


# -- codex exec -----------------------------------------------------------------------------------


def test_codex_text_turn_reports_the_scripted_text_and_usage(
    openai_server: OpenAIServer, tmp_path: Path
):
    openai_server.script(text("Hello from the script", 123, 45, cached=20))
    run = run_codex(openai_server, tmp_path, "Say hello.")
    assert run.returncode == 0, run.stderr
    (started,) = run.of_type("thread.started")
    assert agent_messages(run) == ["Hello from the script"]
    (done,) = run.of_type("turn.completed")
    assert done["usage"]["input_tokens"] == 123
    assert done["usage"]["cached_input_tokens"] == 20
    assert done["usage"]["output_tokens"] == 45
    (request,) = openai_server.turn_requests
    assert request.path == "/v1/responses" and request.body["stream"] is True
    assert request.body["model"] == "gpt-5.5"
    assert request.header("session-id") == started["thread_id"]
    assert request.header("authorization") == f"Bearer {CODEX_KEY}"
    assert "exec_command" in [tool.get("name") for tool in request.body["tools"]]


def test_codex_runs_exec_command_in_a_workspace_write_sandbox(
    openai_server: OpenAIServer, tmp_path: Path
):
    openai_server.script(exec_command("touch made-by-codex"), text("touched"))
    run = run_codex(openai_server, tmp_path, "Make the file.", "--sandbox", "workspace-write")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "work" / "made-by-codex").exists()
    items = [line["item"] for line in run.of_type("item.completed")]
    command = next(item for item in items if item["type"] == "command_execution")
    assert command["exit_code"] == 0 and "touch made-by-codex" in command["command"]
    call, output = openai_server.turn_requests[1].body["input"][-2:]
    assert call["type"] == "function_call" and output["type"] == "function_call_output"
    assert output["call_id"] == call["call_id"] and "exited with code 0" in output["output"]


def test_codex_read_only_sandbox_refuses_the_write(openai_server: OpenAIServer, tmp_path: Path):
    """The default sandbox is read-only, and it works here as root: the bundled bubblewrap and
    seccomp. A refused command emits no command_execution item in the JSON stream at all."""
    openai_server.script(exec_command("touch made-by-codex"), text("could not"))
    run = run_codex(openai_server, tmp_path, "Make the file.")
    assert not (tmp_path / "work" / "made-by-codex").exists()
    output = openai_server.turn_requests[1].body["input"][-1]
    assert "Read-only file system" in output["output"]
    assert agent_messages(run) == ["could not"]


def test_codex_reconnects_after_a_429(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(rate_limited(retry_after=0), text("after the 429"))
    run = run_codex(openai_server, tmp_path, "Hi.")
    assert run.returncode == 0
    assert codex_errors(run) == [
        "Reconnecting... 1/1 (exceeded retry limit, last status: 429 Too Many Requests)"
    ]
    assert agent_messages(run) == ["after the 429"]


def test_codex_retries_a_401_even_when_told_not_to(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(*[unauthorized(should_retry=False)] * 3)
    run = run_codex(openai_server, tmp_path, "Hi.")
    assert run.returncode == 1
    final = (
        "unexpected status 401 Unauthorized: invalid x-api-key (scripted),"
        f" url: {openai_server.url}/v1/responses"
    )
    assert codex_errors(run) == [f"Reconnecting... 1/1 ({final})", final]
    assert run.of_type("turn.failed")[0]["error"]["message"] == final
    assert len(openai_server.turn_requests) == 2


def test_codex_fails_the_turn_when_a_500_storm_outlasts_its_retries(
    openai_server: OpenAIServer, tmp_path: Path
):
    openai_server.script(*[server_error()] * 6)
    run = run_codex(openai_server, tmp_path, "Hi.")
    assert run.returncode == 1
    high_demand = "We’re currently experiencing high demand, which may cause temporary errors."
    assert codex_errors(run) == [f"Reconnecting... 1/1 ({high_demand})", high_demand]
    assert run.of_type("turn.failed")[0]["error"]["message"] == high_demand
    # 2 turn attempts (stream_max_retries 1), each 2 requests (request_max_retries 1)
    assert len(openai_server.turn_requests) == 4


def test_codex_config_keys_work_as_c_overrides(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(*[server_error()] * 6)
    overrides = ["request_max_retries=0", "stream_max_retries=0"]
    argv = [w for o in overrides for w in ("-c", f"model_providers.scripted.{o}")]
    run = run_codex(openai_server, tmp_path, "Hi.", *argv)
    assert run.returncode == 1 and len(openai_server.turn_requests) == 1
    assert not any(m.startswith("Reconnecting") for m in codex_errors(run))
    strict = run_codex(openai_server, tmp_path, "Hi.", "-c", "no_such_key=1")
    assert strict.returncode != 0
    assert "unknown configuration field `no_such_key` in -c/--config override" in strict.stderr


def test_codex_against_a_dead_server_gives_up(tmp_path: Path):
    run = run_codex(dead_url(), tmp_path, "Hi.")
    assert run.returncode == 1
    failed = "Connection failed: error sending request"
    assert codex_errors(run) == [f"Reconnecting... 1/1 ({failed})", failed]
    assert run.wall < 20  # features.unbounded_connection_retries = false: no endless wait


def test_codex_reconnects_after_a_dropped_stream(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(Drop(after=2), text("after the drop"))
    run = run_codex(openai_server, tmp_path, "Hi.")
    (reconnect,) = codex_errors(run)
    assert reconnect.startswith("Reconnecting... 1/1 (stream disconnected before completion")
    assert agent_messages(run) == ["after the drop"]


def test_codex_reconnects_after_a_stalled_stream(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(Stall(seconds=5), text("after the stall"))
    run = run_codex(openai_server, tmp_path, "Hi.", stream_idle_timeout_ms=500)
    assert codex_errors(run) == [
        "Reconnecting... 1/1 (stream disconnected before completion: idle timeout waiting for SSE)"
    ]
    assert agent_messages(run) == ["after the stall"]
    assert run.wall < 4.5


def _codex_reset_text(resets_at: int) -> str:
    """How codex writes a reset time (local time, TZ=UTC here): "5:09 AM" today, else
    "Nov 29th, 2026 5:09 AM"."""
    reset, now = datetime.fromtimestamp(resets_at, UTC), datetime.now(UTC)
    clock = reset.strftime("%I:%M %p").lstrip("0")
    if reset.date() == now.date():
        return clock
    day = reset.day
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{reset.strftime('%b')} {day}{suffix}, {reset.year} {clock}"


def test_codex_says_it_hit_its_usage_limit(openai_server: OpenAIServer, tmp_path: Path):
    resets_at = int(time.time()) + 120
    openai_server.script(UsageLimit(resets_at=resets_at), text("never asked for"))
    run = run_codex(openai_server, tmp_path, "Hi.")
    assert run.returncode == 1
    said = (
        "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit"
        " https://chatgpt.com/settings/usage to purchase more credits or try again at"
        f" {_codex_reset_text(resets_at)}."
    )
    assert codex_errors(run) == [said]
    assert run.of_type("turn.failed")[0]["error"]["message"] == said
    assert len(openai_server.turn_requests) == 1  # not retried


def test_codex_resume_sends_the_history_and_reports_running_totals(
    openai_server: OpenAIServer, tmp_path: Path
):
    openai_server.script(text("first answer", 100, 10), text("second answer", 200, 20, cached=50))
    first = run_codex(openai_server, tmp_path, "first question")
    thread = first.of_type("thread.started")[0]["thread_id"]
    second = run_codex(openai_server, tmp_path, "second question", resume=thread)
    assert second.returncode == 0, second.stderr
    assert second.of_type("thread.started")[0]["thread_id"] == thread
    assert agent_messages(second) == ["second answer"]
    usage = second.of_type("turn.completed")[0]["usage"]
    # the thread's totals so far, not this run's alone
    assert (usage["input_tokens"], usage["output_tokens"], usage["cached_input_tokens"]) == (
        300,
        30,
        50,
    )
    said = [
        (item["role"], item["content"][0]["text"])
        for item in openai_server.turn_requests[1].body["input"]
        if item.get("type") == "message" and item["role"] in ("user", "assistant")
    ]
    assert said[-3:] == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
    ]


@pytest.mark.parametrize("approve", [True, False])
def test_codex_finds_and_calls_a_delegate_mcp_tool(
    openai_server: OpenAIServer, tmp_path: Path, approve: bool
):
    state_dir = tmp_path / "state"
    entry = mcp_entry(state_dir, delegate_job(state_dir))
    extra = mcp_server_toml(
        "delegate", entry["command"], entry["args"], entry["env"], approve=approve
    )
    openai_server.script(
        ToolSearch("blackboard put"),
        codex_mcp("delegate", "bb_put", key="codex:k", value={"n": 2}),
        text("put it"),
    )
    run = run_codex(openai_server, tmp_path, "Put it.", extra=extra)
    assert run.returncode == 0, run.stderr
    first = openai_server.turn_requests[0].body
    kinds = [(tool["type"], tool.get("execution")) for tool in first["tools"]]
    assert ("tool_search", "client") in kinds
    assert "bb_put" not in [tool.get("name") for tool in first["tools"]]
    found = openai_server.turn_requests[1].body["input"][-1]
    assert found["type"] == "tool_search_output"
    (namespace,) = found["tools"]
    assert namespace["name"] == "mcp__delegate"
    assert "bb_put" in [tool["name"] for tool in namespace["tools"]]
    items = [line["item"] for line in run.of_type("item.completed")]
    call = next(item for item in items if item["type"] == "mcp_tool_call")
    assert (call["server"], call["tool"]) == ("delegate", "bb_put")
    if approve:
        assert call["status"] == "completed" and blackboard(state_dir, "codex:k") == {"n": 2}
    else:
        assert call["status"] == "failed"
        assert (
            call["error"]["message"]
            == "MCP tool call requires approval, but approval policy is never"
        )
        assert blackboard(state_dir, "codex:k") is None


def test_codex_sends_its_api_key_only_in_its_header(openai_server: OpenAIServer, tmp_path: Path):
    openai_server.script(exec_command("echo hi"), text("ok"))
    run = run_codex(openai_server, tmp_path, "Hi.", "--sandbox", "workspace-write")
    assert agent_messages(run) == ["ok"]
    for request in openai_server.requests:
        others = {k: v for k, v in request.headers.items() if k != "authorization"}
        assert CODEX_KEY not in json.dumps(others) and CODEX_KEY.encode() not in request.raw
    assert CODEX_KEY not in run.stdout + run.stderr
    for path in tmp_path.rglob("*"):  # its sessions, shell snapshots, logs, sqlite state
        if path.is_file():
            assert CODEX_KEY.encode() not in path.read_bytes(), path
