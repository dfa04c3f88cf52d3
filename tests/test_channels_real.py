"""The channel parsers on what the real CLIs print (Claude Code 2.1.197, Codex 0.169/0.171):
Claude's `system/api_retry` lines and the tools its final word denied, Codex's running token
totals, its reconnects and its usage limit named as a local clock time; and, for any object at
all, that the parsers never raise and give only well-formed events."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.core.budget import Spent, add_usage
from delegate.core.channels import (
    ChannelEvent,
    ClaudeStream,
    CodexJson,
    codex_reset_at,
    codex_wait_s,
    conversation_id,
    hook_events,
    parser_for,
    usage_limit,
)

NEW_YORK = ZoneInfo("America/New_York")


def line(message: dict[str, object]) -> bytes:
    return json.dumps(message).encode()


def at(
    year: int,
    month: int,
    day: int,
    hour: int,
    minute: int,
    second: int = 0,
    tz: ZoneInfo | None = NEW_YORK,
) -> float:
    """The epoch of a wall-clock time in `tz` (None: the local zone)."""
    return datetime(year, month, day, hour, minute, second, tzinfo=tz).timestamp()


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Claude: system/api_retry ----------------------------------------------------------------

RATE_LIMIT_RETRY = (
    b'{"type":"system","subtype":"api_retry","attempt":4,"max_retries":10,'
    b'"retry_delay_ms":4375,"error_status":429,"error":"rate_limit"}'
)
SERVER_RETRY = (
    b'{"type":"system","subtype":"api_retry","attempt":2,"max_retries":10,'
    b'"retry_delay_ms":1130,"error_status":500,"error":"server_error"}'
)
AUTH_RETRY = (
    b'{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,'
    b'"retry_delay_ms":612,"error_status":401,"error":"authentication_failed"}'
)


def test_a_rate_limit_retry_is_progress_the_job_keeps_running():
    parser = ClaudeStream()
    [event] = parser.feed(RATE_LIMIT_RETRY)
    assert (event.event, event.detail) == ("progress", "rate limited, retry 4/10 in 4s")
    assert event.data == {
        "agent_retry": {
            "attempt": 4,
            "max_retries": 10,
            "retry_delay_ms": 4375,
            "error_status": 429,
            "error": "rate_limit",
        }
    }
    assert not parser.ended


def test_another_api_error_retry_names_its_status():
    [event] = ClaudeStream().feed(SERVER_RETRY)
    assert (event.event, event.detail) == ("progress", "API error 500, retry 2/10 in 1s")
    assert event.data["agent_retry"]["error"] == "server_error"


@pytest.mark.parametrize(
    ("fields", "retry"),
    [
        (
            {"attempt": "4", "max_retries": -1, "retry_delay_ms": 1e30, "error_status": 99},
            {"attempt": 0, "max_retries": 0, "retry_delay_ms": 7 * 86_400_000},
        ),
        (
            {"attempt": True, "retry_delay_ms": 250.7, "error_status": "429", "error": "Rate!"},
            {"attempt": 0, "retry_delay_ms": 250, "error_status": None, "error": "unknown"},
        ),
        ({"error": "x" * 41, "error_status": 503}, {"error": "unknown", "error_status": 503}),
    ],
    ids=["out-of-range", "wrong-types", "long-error"],
)
def test_an_odd_retry_line_is_checked_where_it_enters(fields, retry):
    [event] = ClaudeStream().feed(line({"type": "system", "subtype": "api_retry", **fields}))
    assert event.event == "progress"
    assert retry.items() <= event.data["agent_retry"].items()


def test_a_refused_key_ends_the_job_at_once_and_stops_the_agent():
    parser = ClaudeStream()
    [event] = parser.feed(AUTH_RETRY)
    assert event.event == "error"
    assert event.detail == "authentication failed (HTTP 401): the API key was refused"
    assert event.data["stop_agent"] is True
    assert event.data["agent_retry"]["error"] == "authentication_failed"
    assert parser.ended
    assert parser.feed(AUTH_RETRY) == []  # its later retries: the job ended already
    # what it says when it gives up stays an error: no wait heals a refused key
    [ended] = parser.feed(
        line({"type": "result", "subtype": "success", "is_error": True, "result": "API Error: 429"})
    )
    assert (ended.event, ended.detail) == ("error", "API Error: 429")


def test_a_refused_key_in_the_clis_own_words():
    said = json.loads(AUTH_RETRY) | {"message": "Invalid API key \x1b[31m· Please run /login"}
    [event] = ClaudeStream().feed(line(said))
    assert event.detail == "Invalid API key [31m· Please run /login"  # no terminal escape


# --- Claude: the result line --------------------------------------------------------------------


def test_the_tools_a_result_denied_are_named_and_it_still_completed():
    denials = [
        {"tool_name": "Bash", "tool_use_id": "toolu_01", "tool_input": {"command": "rm -rf x"}},
        "not an object",
        {"tool_name": "Write", "tool_use_id": "toolu_02", "tool_input": {"file_path": "/a"}},
        {"tool_use_id": "toolu_03"},
        {"tool_name": "mcp__" + "x" * 100},
    ]
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "Done, but I could not run the tests.",
        "num_turns": 4,
        "permission_denials": denials,
    }
    [event] = ClaudeStream().feed(line(result))
    assert (event.event, event.detail) == ("completed", "Done, but I could not run the tests.")
    assert event.data["denied_tools"] == ["Bash", "Write", "unknown", "mcp__" + "x" * 59]


def test_denied_tools_are_bounded():
    denials = [{"tool_name": f"Tool{n}"} for n in range(150)]
    [event] = ClaudeStream().feed(line({"type": "result", "permission_denials": denials}))
    assert event.data["denied_tools"] == [f"Tool{n}" for n in range(100)]
    [plain] = ClaudeStream().feed(line({"type": "result", "permission_denials": []}))
    assert "denied_tools" not in plain.data


def test_a_failed_result_after_retrying_a_429_ends_rate_limited():
    parser = ClaudeStream()
    parser.feed(RATE_LIMIT_RETRY)
    failed = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "result": 'API Error: 429 {"type":"error","error":{"type":"rate_limit_error"}}',
        "permission_denials": [{"tool_name": "Bash"}],
    }
    [event] = parser.feed(line(failed))
    assert (event.event, event.detail) == ("error", "rate_limited: no reset time")
    assert event.data["denied_tools"] == ["Bash"]


@pytest.mark.parametrize(
    ("retried", "text", "detail"),
    [
        (None, "Request rejected (429) · slow down", "rate_limited: no reset time"),
        (None, "API Error: 429 Too Many", "rate_limited: no reset time"),
        (RATE_LIMIT_RETRY, "Request failed", "rate_limited: no reset time"),
        (
            SERVER_RETRY,
            "API Error: 500 Internal server error",
            "API Error: 500 Internal server error",
        ),
        (None, "the tests failed", "the tests failed"),
    ],
    ids=["rejected-429", "api-error-429", "after-429-retries", "after-500-retries", "plain"],
)
def test_which_failed_results_are_rate_limits(retried, text, detail):
    parser = ClaudeStream()
    if retried is not None:
        parser.feed(retried)
    [event] = parser.feed(line({"type": "result", "is_error": True, "result": text}))
    assert (event.event, event.detail) == ("error", detail)


def test_retries_the_api_answered_after_do_not_make_a_later_failure_a_rate_limit():
    parser = ClaudeStream()
    parser.feed(RATE_LIMIT_RETRY)
    parser.feed(line({"type": "assistant", "message": {"content": [], "usage": {}}}))
    [event] = parser.feed(
        line({"type": "result", "subtype": "error_max_turns", "is_error": True, "num_turns": 9})
    )
    assert (event.event, event.detail) == ("error", "error_max_turns")


@pytest.mark.parametrize("bad_id", ["-rf", "a b", "x" * 129, "", "id;rm", "ünï", 42, None, "a\nb"])
def test_a_conversation_id_is_checked_before_it_is_recorded(bad_id):
    assert conversation_id(bad_id) is None
    assert (
        ClaudeStream().feed(line({"type": "system", "subtype": "init", "session_id": bad_id})) == []
    )
    assert CodexJson().feed(line({"type": "thread.started", "thread_id": bad_id})) == []
    start = {"hook_event_name": "SessionStart", "source": "startup", "session_id": bad_id}
    assert hook_events(start) == []


def test_good_conversation_ids():
    for good in ("abc", "0199a213-81c0-7800-8aa1-bbab2a035a53", "thread_1.2:3", "x" * 128):
        assert conversation_id(good) == good
    [event] = ClaudeStream().feed(
        line({"type": "system", "subtype": "init", "session_id": "b6c1-77"})
    )
    assert event.conversation_id == "b6c1-77"


# --- Codex: tokens counted once -------------------------------------------------------------


def turn(input_tokens: int, cached: int, output: int) -> bytes:
    usage = {"input_tokens": input_tokens, "cached_input_tokens": cached, "output_tokens": output}
    return line({"type": "turn.completed", "usage": usage})


def test_codex_turns_are_counted_from_the_threads_running_totals():
    first = CodexJson()
    first.feed(line({"type": "thread.started", "thread_id": "0199a213-81c0"}))
    [event] = first.feed(turn(2400, 0, 100))
    assert event.usage == {"input_tokens": 2400, "cached_input_tokens": 0, "output_tokens": 100}
    thread_usage = event.data["thread_usage"]
    assert thread_usage == {"input_tokens": 2400, "cached_input_tokens": 0, "output_tokens": 100}

    resumed = CodexJson(baseline=thread_usage)  # `codex exec resume`: the totals go on
    [event] = resumed.feed(turn(3600, 0, 150))
    assert event.usage == {"input_tokens": 1200, "cached_input_tokens": 0, "output_tokens": 50}
    assert event.data["usage"] == event.usage
    assert event.data["thread_usage"]["input_tokens"] == 3600
    [event] = resumed.feed(turn(5000, 1000, 170))  # a second turn in the same process
    assert event.usage == {"input_tokens": 400, "cached_input_tokens": 1000, "output_tokens": 20}


def test_cached_input_is_counted_once():
    [event] = CodexJson().feed(turn(1300, 400, 20))
    assert event.usage == {"input_tokens": 900, "cached_input_tokens": 400, "output_tokens": 20}
    assert add_usage(Spent(), event.usage or {}, None, {}).tokens_in == 1300


def test_a_total_below_the_one_before_is_another_thread():
    parser = CodexJson(baseline={"input_tokens": 9000, "output_tokens": 900})
    [event] = parser.feed(turn(1000, 200, 10))
    assert event.usage == {"input_tokens": 800, "cached_input_tokens": 200, "output_tokens": 10}


def test_a_baseline_is_dropped_when_another_thread_starts():
    baseline = {"input_tokens": 2400, "cached_input_tokens": 0, "output_tokens": 100}
    parser = CodexJson(baseline=baseline, thread="thread-a")
    parser.feed(line({"type": "thread.started", "thread_id": "thread-b"}))
    [event] = parser.feed(turn(3600, 0, 150))
    assert event.usage == {"input_tokens": 3600, "cached_input_tokens": 0, "output_tokens": 150}
    same = parser_for("codex-json", baseline=baseline, thread="thread-a")
    assert isinstance(same, CodexJson)
    same.feed(line({"type": "thread.started", "thread_id": "thread-a"}))
    assert same.feed(turn(3600, 0, 150))[0].usage == {
        "input_tokens": 1200,
        "cached_input_tokens": 0,
        "output_tokens": 50,
    }


def test_odd_codex_usage_is_not_counted():
    for usage in ({"input_tokens": "12"}, {"output_tokens": 5}, [], {"input_tokens": -1}):
        [event] = CodexJson().feed(line({"type": "turn.completed", "usage": usage}))
        assert (event.event, event.usage, event.data) == ("progress", None, {})
    [event] = CodexJson().feed(
        line(
            {
                "type": "turn.completed",
                "usage": {
                    "input_tokens": 100,
                    "cached_input_tokens": 500,  # more than the input it is part of
                    "output_tokens": 10**20,
                    "reasoning_output_tokens": 3,
                },
            }
        )
    )
    assert event.data["thread_usage"] == {
        "input_tokens": 100,
        "cached_input_tokens": 100,
        "output_tokens": 10**12,
        "reasoning_output_tokens": 3,
    }
    assert event.usage == {"input_tokens": 0, "cached_input_tokens": 100, "output_tokens": 10**12}


# --- Codex: reconnects ------------------------------------------------------------------------

RECONNECT = (
    "Reconnecting... 2/5 (stream disconnected before completion: error sending request for url"
    " (http://127.0.0.1:41235/v1/responses))"
)


def test_a_codex_reconnect_is_progress_and_a_later_error_still_ends_the_job():
    parser = CodexJson()
    parser.feed(line({"type": "thread.started", "thread_id": "t-1"}))
    [event] = parser.feed(line({"type": "error", "message": RECONNECT}))
    assert event.event == "progress"
    assert event.detail == f"reconnecting: {RECONNECT[:160]}"
    assert event.data == {"agent_retry": {"attempt": 2, "max_retries": 5, "error": "reconnecting"}}
    assert not parser.ended and not parser.failed
    [waiting] = parser.feed(line({"type": "error", "message": "Offline: waiting for network"}))
    assert waiting.event == "progress" and waiting.data == {
        "agent_retry": {"error": "reconnecting"}
    }
    final = "stream disconnected before completion: error sending request"
    [ended] = parser.feed(line({"type": "error", "message": final}))
    assert (ended.event, ended.detail) == ("error", final) and parser.ended
    assert parser.feed(line({"type": "turn.failed", "error": {"message": final}})) == []
    assert parser.finish() == []


def test_a_codex_stream_with_reconnects_that_then_succeeds_completes():
    parser = CodexJson()
    parser.feed(line({"type": "error", "message": "Reconnecting... 1/5"}))
    parser.feed(turn(10, 0, 1))
    [done] = parser.finish()
    assert done.event == "completed"


# --- Codex: the usage limit's clock time ------------------------------------------------------

PLUS_LIMIT = (
    "You've hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit"
    " https://chatgpt.com/codex/settings/usage to purchase more credits or try again at {}."
)


@pytest.mark.parametrize(
    ("now", "printed", "reset"),
    [
        ((2026, 10, 20, 1, 0), "2:28 AM", (2026, 10, 20, 2, 28)),
        ((2026, 10, 20, 3, 0), "2:28 AM", (2026, 10, 21, 2, 28)),  # past: the next one
        ((2026, 10, 20, 2, 28, 40), "2:28 AM", (2026, 10, 20, 2, 28)),  # cut to the minute
        ((2026, 10, 20, 0, 0, 30), "11:59 PM", (2026, 10, 19, 23, 59)),  # printed yesterday
        ((2026, 10, 20, 1, 0), "12:05 AM", (2026, 10, 21, 0, 5)),
        ((2026, 10, 20, 11, 0), "12:05 PM", (2026, 10, 20, 12, 5)),
        ((2026, 10, 20, 11, 0), "14:05", (2026, 10, 20, 14, 5)),
        ((2026, 10, 20, 1, 0), "Nov 29th, 2026 2:41 AM", (2026, 11, 29, 2, 41)),  # EST by then
        ((2026, 10, 20, 1, 0), "Nov 29th 2:41 AM", (2026, 11, 29, 2, 41)),
        ((2026, 12, 5, 1, 0), "Nov 29th 2:41 AM", (2027, 11, 29, 2, 41)),
        ((2026, 10, 20, 1, 0), "Oct 21st, 2026 9:00 PM", (2026, 10, 21, 21, 0)),
        ((2026, 10, 20, 1, 0), "Mar 3rd, 2027 10:15 AM", (2027, 3, 3, 10, 15)),
    ],
    ids=lambda value: str(value),
)
def test_a_codex_limit_names_the_next_such_local_time(now, printed, reset):
    """`reset` is the minute codex names; the limit has surely reset at its end."""
    text = PLUS_LIMIT.format(printed)
    end = at(*reset) + 60
    assert codex_reset_at(text, at(*now), NEW_YORK) == end
    parser = CodexJson(clock=lambda: at(*now), tz=NEW_YORK)
    [event] = parser.feed(line({"type": "error", "message": text}))
    assert (event.event, event.detail) == ("error", f"rate_limited: resets at {stamp(end)}")
    assert parser.feed(line({"type": "turn.failed", "error": {"message": text}})) == []


def test_the_local_zone_is_the_default():
    now = at(2026, 10, 20, 1, 0, tz=None)
    text = "You've hit your usage limit. Try again at 2:28 AM."
    assert codex_reset_at(text, now) == at(2026, 10, 20, 2, 29, tz=None)  # the minute's end
    assert (
        usage_limit(text, now=now)
        == f"rate_limited: resets at {stamp(at(2026, 10, 20, 2, 29, tz=None))}"
    )


def test_the_enterprise_and_other_model_wordings():
    now = at(2026, 10, 20, 1, 0)
    for text in (
        "You've hit your usage limit. Try again at Nov 29th, 2026 2:41 AM.",
        "You've hit your usage limit for gpt-5-codex-mini. Switch to another model now, or try"
        " again at Nov 29th, 2026 2:41 AM.",
    ):
        assert (
            usage_limit(text, now=now, tz=NEW_YORK)
            == "rate_limited: resets at 2026-11-29T07:42:00Z"  # the end of 2:41 AM EST
        )


def test_the_older_codex_wait_still_reads():
    text = "You've hit your usage limit. Try again in 2 hours 5 minutes."
    assert codex_wait_s(text) == 2 * 3600 + 5 * 60
    assert usage_limit(text, now=1000.0) == f"rate_limited: resets at {stamp(1000.0 + 7500)}"
    assert codex_wait_s("You've hit your usage limit. Try again in less than a minute.") == 60


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        (
            "Quota exceeded. Check your plan and billing details.",
            "Quota exceeded. Check your plan and billing details.",
        ),
        ("You've hit your usage limit. Try again later.", "rate_limited: no reset time"),
        ("You've hit your usage limit. Try again at teatime.", "rate_limited: no reset time"),
        ("You've hit your usage limit. Try again at 25:61.", "rate_limited: no reset time"),
        (
            "You've hit your usage limit. Try again at Foo 3rd 2:00 AM.",
            "rate_limited: no reset time",
        ),
        (
            "You've hit your usage limit. Try again in 999999999 days.",
            "rate_limited: no reset time",
        ),
        ("model refused the task", "model refused the task"),
    ],
    ids=["quota", "later", "no-time", "bad-time", "bad-month", "too-far", "unknown"],
)
def test_other_codex_endings(text, detail):
    parser = CodexJson(clock=lambda: at(2026, 10, 20, 1, 0), tz=NEW_YORK)
    [event] = parser.feed(line({"type": "turn.failed", "error": {"message": text}}))
    assert (event.event, event.detail) == ("error", detail)


# --- hooks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["startup", "resume", "clear", "compact"])
def test_each_session_start_names_the_conversation(source):
    payload = {"hook_event_name": "SessionStart", "source": source, "session_id": f"s-{source}"}
    [event] = hook_events(payload)
    assert event.conversation_id == f"s-{source}" and event.event is None


def test_other_hook_calls():
    assert hook_events({"hook_event_name": "SessionStart", "session_id": "abc"}) == []
    assert hook_events({"hook_event_name": "SessionStart", "source": "x", "session_id": "a"}) == []
    pre = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert hook_events(pre) == []


# --- properties -------------------------------------------------------------------------------

KEYS = [
    "type",
    "subtype",
    "session_id",
    "thread_id",
    "attempt",
    "max_retries",
    "retry_delay_ms",
    "error_status",
    "error",
    "message",
    "result",
    "is_error",
    "permission_denials",
    "tool_name",
    "usage",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "num_turns",
    "total_cost_usd",
]
WORDS = [
    "system",
    "init",
    "api_retry",
    "result",
    "assistant",
    "success",
    "error_max_turns",
    "rate_limit",
    "authentication_failed",
    "thread.started",
    "turn.completed",
    "turn.failed",
    "error",
    RECONNECT,
    "Reconnecting... 99999999999999/0",
    "waiting for network",
    PLUS_LIMIT.format("Nov 29th, 2026 2:41 AM"),
    PLUS_LIMIT.format("2:28 AM"),
    "usage limit, try again at Feb 29th 12:00 PM",
    "usage limit, try again in 99999 days 99999 hours",
    "Claude AI usage limit reached|999999999999",
    "Request rejected (429)",
    "API Error: 429",
    "\x1b[2J" * 80,
]
leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=300)
    | st.sampled_from(WORDS)
)
keys = st.sampled_from(KEYS) | st.text(max_size=8)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
objects = st.dictionaries(keys, values, max_size=8)
counts = st.integers(-5, 10**13) | st.floats() | values
# objects of the kinds the parsers read, so that each path is reached, with odd fields
shaped = st.builds(
    lambda base, kind, subtype, usage: {**base, "type": kind, "subtype": subtype, "usage": usage},
    objects,
    st.sampled_from(["system", "result", "assistant", "turn.completed", "turn.failed", "error"]),
    st.sampled_from(["api_retry", "init", "success", "error_during_execution"]) | values,
    st.dictionaries(st.sampled_from(KEYS), counts, max_size=5) | values,
)
RETRY_KEYS = {"attempt", "max_retries", "retry_delay_ms", "error_status", "error"}


def well_formed(event: ChannelEvent) -> None:
    assert isinstance(event.detail, str) and len(event.detail) <= 200
    assert event.event in (None, "progress", "completed", "error")
    if event.conversation_id is not None:
        assert conversation_id(event.conversation_id) == event.conversation_id
    denied = event.data.get("denied_tools")
    if denied is not None:
        assert isinstance(denied, list) and 0 < len(denied) <= 100
        assert all(isinstance(name, str) and 0 < len(name) <= 64 for name in denied)
        assert all(name.isprintable() for name in denied)
    retry = event.data.get("agent_retry")
    if retry is not None:
        assert isinstance(retry, dict) and set(retry) <= RETRY_KEYS
        error = retry["error"]
        assert isinstance(error, str) and 0 < len(error) <= 40
        assert set(error) <= set("abcdefghijklmnopqrstuvwxyz_")
        for key in ("attempt", "max_retries", "retry_delay_ms"):
            if key in retry:
                assert type(retry[key]) is int and retry[key] >= 0
        status = retry.get("error_status")
        assert status is None or (type(status) is int and 100 <= status <= 599)
    for key in ("usage", "thread_usage"):
        if isinstance(event.data.get(key), dict) and event.usage is not None:
            assert all(type(n) is int and n >= 0 for n in event.data[key].values())


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(objects | shaped | st.sampled_from([json.loads(RATE_LIMIT_RETRY)]), max_size=6),
    now=st.floats(min_value=-1e12, max_value=1e13),
    baseline=st.none() | objects | st.dictionaries(st.sampled_from(KEYS), counts, max_size=5),
)
def test_no_object_makes_a_parser_raise_or_say_something_malformed(lines, now, baseline):
    claude = ClaudeStream()
    codex = CodexJson(clock=lambda: now, baseline=baseline)
    for message in lines:
        for parser in (claude, codex):
            for event in parser.feed(json.dumps(message).encode()):
                well_formed(event)
            for event in parser.message(message):
                well_formed(event)
    for event in [*claude.finish(), *codex.finish()]:
        well_formed(event)
    for message in lines:
        well_formed_hook = hook_events(message)
        assert all(
            e.conversation_id is None or conversation_id(e.conversation_id)
            for e in well_formed_hook
        )


totals_steps = st.lists(
    st.tuples(
        st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)
    ),  # new uncached input, new cached input, new output
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    base=st.none() | st.tuples(st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9)),
    steps=totals_steps,
)
def test_codex_turns_add_up_to_the_threads_totals(base, steps):
    uncached, cached, output = base or (0, 0, 0)
    baseline = None
    if base is not None:
        baseline = {
            "input_tokens": uncached + cached,
            "cached_input_tokens": cached,
            "output_tokens": output,
        }
    parser = CodexJson(baseline=baseline)
    counted = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    spent = Spent()
    for new_uncached, new_cached, new_output in steps:
        uncached, cached, output = uncached + new_uncached, cached + new_cached, output + new_output
        [event] = parser.feed(turn(uncached + cached, cached, output))
        assert event.usage is not None
        assert all(n >= 0 for n in event.usage.values())
        for key in counted:
            counted[key] += event.usage[key]
        spent = add_usage(spent, event.usage, None, {})
    start = baseline or {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    assert counted["input_tokens"] + counted["cached_input_tokens"] == (
        uncached + cached - start["input_tokens"]
    )
    assert counted["cached_input_tokens"] == cached - start["cached_input_tokens"]
    assert counted["output_tokens"] == output - start["output_tokens"]
    assert spent.tokens_in == uncached + cached - start["input_tokens"]


def test_a_subscription_limit_ends_rate_limited_at_the_reset_claude_names():
    """Claude Code on a subscription says `You've hit your session limit · resets 5:07am`
    (words no pattern can date) after a `rate_limit_event` that carries the reset itself."""
    parser = ClaudeStream()
    event = {
        "type": "rate_limit_event",
        "rate_limit_info": {
            "status": "rejected",
            "resetsAt": 1795842447,
            "rateLimitType": "five_hour",
        },
    }
    assert parser.feed(json.dumps(event).encode()) == []
    result = {
        "type": "result",
        "subtype": "success",
        "is_error": True,
        "api_error_status": 429,
        "result": "You've hit your session limit · resets 5:07am (UTC)",
    }
    (ended,) = parser.feed(json.dumps(result).encode())
    assert (ended.event, ended.detail) == ("error", "rate_limited: resets at 2026-11-28T05:07:27Z")


def test_an_allowed_rate_limit_event_changes_nothing():
    parser = ClaudeStream()
    allowed = {"type": "rate_limit_event", "rate_limit_info": {"status": "allowed", "resetsAt": 5}}
    parser.feed(json.dumps(allowed).encode())
    result = {"type": "result", "is_error": True, "result": "API Error: 500 boom"}
    (ended,) = parser.feed(json.dumps(result).encode())
    assert (ended.event, ended.detail) == ("error", "API Error: 500 boom")


def test_claude_message_usage_is_counted_once_and_the_result_settles_the_rest():
    """Claude 2.1.197 prints one `assistant` line per content block, each with its message's
    id and the usage its stream started with (output 1); the `result` has the run's totals."""

    def line(block: str, message_id: str, input_tokens: int) -> bytes:
        said = {
            "id": message_id,
            "model": "claude-sonnet-4-5",
            "content": [{"type": block}],
            "usage": {"input_tokens": input_tokens, "output_tokens": 1},
        }
        return json.dumps({"type": "assistant", "message": said}).encode()

    parser = ClaudeStream()
    counted = [
        e.usage
        for raw in (
            line("text", "msg_1", 400),
            line("tool_use", "msg_1", 400),
            line("text", "msg_2", 50),
        )
        for e in parser.feed(raw)
    ]
    assert [u["input_tokens"] for u in counted] == [400, 50]  # msg_1 once
    result = {
        "type": "result",
        "subtype": "success",
        "result": "ok",
        "usage": {"input_tokens": 450, "output_tokens": 220, "cache_read_input_tokens": 30},
    }
    rest, final = parser.feed(json.dumps(result).encode())
    assert final.event == "completed"
    assert rest.usage == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 30,
        "output_tokens": 218,
    }
    spent = Spent()
    for usage in [*counted, rest.usage]:
        spent = add_usage(spent, usage, None, {})
    assert (spent.tokens_in, spent.tokens_out) == (480, 220)  # the run's own totals
