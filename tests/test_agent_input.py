"""What an agent says about its conversation cannot become a flag of its own resume (issue 30,
item 2). A stand-in `--cmd` agent calls the real `delegate hook` as Claude Code's SessionStart
would, with an id that reads as an option: nothing is recorded, and a
plain id that follows is kept. (The gate: `core.channels.conversation_id`, which
`services.jobs.publish.record_conversation` applies again, auditing what it refuses.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.core.channels import conversation_id
from delegate.core.model import JobState

from .helpers import retry_until
from .test_monitor import open_state, submit_no_wait

DELEGATE = str(Path(sys.executable).parent / "delegate")


def _session_start(session_id: str) -> str:
    payload = {"hook_event_name": "SessionStart", "source": "startup", "session_id": session_id}
    return f"echo '{json.dumps(payload)}' | {DELEGATE} hook"


def test_a_conversation_id_that_reads_as_a_flag_is_never_recorded(home, tmux_env, tmp_path):
    script = "\n".join(
        [_session_start("--dangerously-skip-permissions"), _session_start("3f2a-conv_1")]
    )
    job_id = submit_no_wait(home, tmux_env, tmp_path, script)
    state = open_state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    job = state.registry.get(job_id)
    assert job.status is JobState.COMPLETED
    assert job.conversation_id == "3f2a-conv_1"  # the plain one, kept
    named = [e["conversation_id"] for e in state.audit.read_events(job_id, kind="conversation")]
    assert named == ["3f2a-conv_1"]  # the flag never was


@given(st.text(max_size=300))
def test_no_accepted_conversation_id_is_an_option_or_leaves_its_word(text: str):
    accepted = conversation_id(text)
    if accepted is not None:
        assert accepted == text and not accepted.startswith("-")
        assert 1 <= len(accepted) <= 128
        assert all(c.isascii() and (c.isalnum() or c in "._:-") for c in accepted)


def test_the_record_refuses_and_audits_an_id_that_reads_as_a_flag(state):
    from delegate.services.jobs.publish import record_conversation

    job, _ = state.registry.register(agent="claude")
    record_conversation(state, job.job_id, "--dangerously-bypass-approvals-and-sandbox")
    assert state.registry.get(job.job_id).conversation_id is None
    (refused,) = state.audit.read_events(job.job_id, kind="conversation_refused")
    assert refused["given"] == "--dangerously-bypass-approvals-and-sandbox"


def test_an_agent_cannot_declare_an_ending_only_the_wrapper_reports(home, tmux_env, tmp_path):
    """`rate_limited: ...` (a fresh attempt at the reset, with a fresh budget), `tmux_gone:`
    (a requeue) and `budget_exceeded:` come from what the wrapper saw, never from an agent's
    own `delegate publish` (issue 30, item 2): refused in one line, nothing recorded."""
    lines = []
    for n, detail in enumerate(
        [
            "rate_limited: resets at 2030-01-01T00:00:00Z",
            "tmux_gone: gone",
            "budget_exceeded: x",
            "memory_exceeded: the agent reached its memory limit",
        ]
    ):
        lines.append(
            f"{DELEGATE} publish --event error --detail '{detail}' 2> err{n}; echo $? > rc{n}"
        )
    job_id = submit_no_wait(home, tmux_env, tmp_path, "\n".join(lines), "--on-interrupt", "requeue")
    state = open_state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    for n in range(4):
        assert (tmp_path / f"rc{n}").read_text().strip() == "64"
        said = (tmp_path / f"err{n}").read_text().strip().splitlines()
        assert len(said) == 1 and "the wrapper's to report" in said[0], said
    job = state.registry.get(job_id)
    assert job.status is JobState.COMPLETED and job.retried_by is None  # its own exit status


# -- usage figures: what an agent says it spent ----------------------------------------------------

FIGURE = (
    st.integers(min_value=-(10**15), max_value=10**15)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
    | st.text(max_size=8)
)
USAGE = st.dictionaries(
    st.sampled_from(
        ["input_tokens", "output_tokens", "cache_read_input_tokens", "cached_input_tokens",
         "cache_creation_input_tokens", "reasoning_output_tokens", "total_tokens"]
    ),
    FIGURE,
    max_size=7,
)  # fmt: skip
CLAUDE_LINE = st.fixed_dictionaries(
    {"type": st.just("assistant"), "message": st.fixed_dictionaries(
        {"id": st.sampled_from(["m1", "m2", "m3"]), "usage": USAGE | FIGURE})}
) | st.fixed_dictionaries(
    {"type": st.just("result"), "subtype": st.just("success"), "total_cost_usd": FIGURE,
     "usage": USAGE | FIGURE}
)  # fmt: skip
CODEX_LINE = st.fixed_dictionaries({"type": st.just("turn.completed"), "usage": USAGE | FIGURE})


@settings(max_examples=300, deadline=None)
@given(
    channel=st.sampled_from(["claude-stream", "codex-json"]),
    lines=st.data(),
)
def test_what_an_agent_says_it_spent_never_lowers_what_its_budget_counts(channel, lines):
    """Whatever usage and cost lines an agent's stream holds (negative, NaN, infinite, huge,
    not numbers), each figure that reaches the budget is a count from 0 to MAX_TOKENS and a
    cost a finite number of dollars, 0 or more: what is counted only ever grows."""
    import math

    from delegate.core.budget import Spent, add_usage, with_reported_cost
    from delegate.core.channels import MAX_TOKENS, parser_for

    parser = parser_for(channel)
    assert parser is not None
    strategy = CLAUDE_LINE if channel == "claude-stream" else CODEX_LINE
    spent = Spent()
    for line in lines.draw(st.lists(strategy, max_size=6)):
        raw = json.dumps(line, allow_nan=True).encode() + b"\n"
        for item in parser.feed(raw):
            if item.usage is not None:
                for value in item.usage.values():
                    assert isinstance(value, int) and 0 <= value <= MAX_TOKENS
                after = add_usage(spent, item.usage, None, {})
                assert after.tokens >= spent.tokens
                spent = after
            cost = item.data.get("cost_usd")
            if cost is not None:
                assert isinstance(cost, float) and math.isfinite(cost) and cost >= 0
            reported = with_reported_cost(spent, cost)
            assert math.isfinite(reported.cost_usd) and reported.cost_usd >= 0


# -- names an agent writes where we read them: a worktree's ignored files -------------------------

NAME_PART = st.sampled_from(
    ["node_modules", "node_modules_old", "build.txt", "dist", "notes", ".venv", "x", "..", ".",
     "build", "targets", "__pycache__", "ca che"]
) | st.text(alphabet=st.characters(blacklist_characters="/\0"), min_size=1, max_size=8)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(NAME_PART, min_size=1, max_size=5), st.booleans())
def test_an_ignored_file_is_disposable_only_inside_a_folder_named_so(parts: list[str], slash: bool):
    """`worktree clean` removes a worktree whose ignored files all lie in `[worktree]
    disposable` folders: whatever an agent names its files, one is disposable only when a folder
    of its path is exactly one of those names (never `node_modules_old/`, never `build.txt`)."""
    from delegate.services.worktrees import DISPOSABLE, _disposable

    name = "/".join(parts) + ("/" if slash else "")
    # a near miss (a prefix, a suffix, a file of that name with an extension) is not enough
    assert _disposable(name, DISPOSABLE) == any(part in DISPOSABLE for part in parts)


# -- a sub-job's limits: what an agent asks for through `job_submit` -------------------------------

LIMIT = st.none() | st.floats(allow_nan=False, allow_infinity=True) | st.integers(-5, 10**9)


@settings(max_examples=300, deadline=None)
@given(
    parent_cost=st.none() | st.floats(0.01, 100),
    parent_spent=st.floats(0, 200),
    sub_spent=st.floats(0, 200),
    parent_tokens=st.none() | st.integers(1, 10**7),
    tokens_spent=st.integers(0, 2 * 10**7),
    asked_cost=LIMIT,
    asked_tokens=st.none() | st.integers(-5, 10**9),
)
def test_a_sub_jobs_budget_is_never_more_than_its_parent_has_left(
    parent_cost, parent_spent, sub_spent, parent_tokens, tokens_spent, asked_cost, asked_tokens
):
    """Whatever budget a sub-job asks for, it starts with no more than its parent has left,
    counting what the parent's other sub-jobs spent; none left: refused."""
    import math

    from delegate.core.errors import UsageError
    from delegate.core.model import Job
    from delegate.services.jobs.subjob import _budget_inside
    from delegate.services.jobs.submit import SubmitRequest

    parent = Job(
        "0123abcd", JobState.RUNNING, "t", "t", "token", max_cost_usd=parent_cost,
        cost_usd=parent_spent, sub_jobs_cost_usd=sub_spent, max_tokens=parent_tokens,
        tokens_in=tokens_spent,
    )  # fmt: skip
    request = SubmitRequest(prompt=b"x", max_cost_usd=asked_cost, max_tokens=asked_tokens)
    try:
        limits = _budget_inside([parent], request)
    except UsageError:
        assert (parent_cost is not None and parent_spent + sub_spent >= parent_cost) or (
            parent_tokens is not None and tokens_spent >= parent_tokens
        )
        return
    if parent_cost is not None:
        left = parent_cost - parent_spent - sub_spent
        assert not math.isnan(limits["max_cost_usd"]) and limits["max_cost_usd"] <= left + 1e-9
    if parent_tokens is not None:
        assert limits["max_tokens"] <= parent_tokens - tokens_spent


# -- the egress proxy: what a sandboxed agent asks it for ------------------------------------------

ALLOW = ("api.example.com", "*.allowed.test", "127.0.0.1")
_LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
_NAMES = st.one_of(
    st.sampled_from(["api.example.com", "x.allowed.test", "allowed.test", "127.0.0.1"]),
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join),
)
_TRICKS = st.sampled_from(
    ["", "@evil.com", ".evil.com", "\\@evil.com", "%00", " ", "\r\nHost: evil.com", ":99999", "/x"]
)


def _destination_allowed(head: bytes) -> str | None:
    """The host a request head would reach through the proxy, or None when it is refused."""
    from delegate.core.egress import BadRequest, allowed, parse_head

    try:
        where = parse_head(head)
    except BadRequest:
        return None
    return where.host if allowed(where.host, ALLOW) else None


@settings(max_examples=400, deadline=None)
@given(_NAMES, _TRICKS, st.sampled_from(["CONNECT", "GET", "POST"]), st.integers(0, 70000))
def test_no_request_head_reaches_a_host_outside_the_allowlist(name, trick, method, port):
    """Whatever a sandboxed agent writes in its request line (userinfo, a second host after an
    @, a header smuggled into the target, an odd port), the proxy connects only to a host the
    allowlist names, as it names it: the name it connects to is the name it judged."""
    target = f"{name}{trick}:{port}" if method == "CONNECT" else f"http://{name}{trick}:{port}/p"
    try:
        head = f"{method} {target} HTTP/1.1\r\nHost: {name}\r\n\r\n".encode()
    except UnicodeEncodeError:
        return
    reached = _destination_allowed(head)
    if reached is None:
        return
    assert reached == name.lower()  # nothing after the name survived into the destination
    suffix_ok = reached.endswith(".allowed.test") and reached != "allowed.test"
    assert reached in ALLOW or suffix_ok, reached


_V6_ALLOWED = ("::1", "2001:db8::7")


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(st.sampled_from(["::1", "0:0:0:0:0:0:0:1", "2001:DB8:0::7"]), st.ip_addresses(v=6)),
    _TRICKS,
    st.sampled_from(["CONNECT", "GET"]),
    st.integers(0, 70000),
)
def test_an_ipv6_address_reaches_only_itself_when_listed(address, trick, method, port):
    """An IPv6 literal in brackets is judged in its canonical form (`0:0:0:0:0:0:0:1` is
    `::1`), and a request reaches it only when the allowlist names that address."""
    import ipaddress

    from delegate.core.egress import BadRequest, allowed, check_patterns, parse_head

    listed = check_patterns(["[::1]", "2001:db8:0:0::7"])
    assert listed == _V6_ALLOWED
    where = f"[{address}]{trick}:{port}"
    target = where if method == "CONNECT" else f"http://{where}/p"
    try:
        head = f"{method} {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        found = parse_head(head)
    except (UnicodeEncodeError, BadRequest):
        return
    canonical = str(ipaddress.IPv6Address(str(address)))
    assert found.host == canonical  # nothing else survived into the address
    assert found.port == port or (trick == "/x" and found.port == 80)  # (a path cut it short)
    assert allowed(found.host, listed) == (canonical in _V6_ALLOWED)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_are_a_request_or_a_bad_request(raw):
    """Any bytes at all: a destination the allowlist judged, or BadRequest; never a crash."""
    from delegate.core.egress import BadRequest, parse_head

    try:
        where = parse_head(raw)
    except BadRequest:
        return
    assert 0 < where.port < 65536 and where.host and " " not in where.host


# -- the cgroups a sweep clears: folder names anyone with the rights may make ---------------------

_FOLDER = st.text(
    alphabet=st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
).filter(lambda n: n not in (".", ".."))


@settings(max_examples=60, deadline=None)
@given(st.lists(_FOLDER, max_size=6, unique=True))
def test_the_cgroup_sweep_clears_only_ended_jobs_of_its_own_registry(names):
    """Whatever folders sit beside a job's in the cgroup tree (another state dir's jobs, a
    name that looks like a path, an open job's), the supervisor's sweep removes only the groups
    of jobs its own registry has ended."""
    import tempfile
    from datetime import UTC, datetime, timedelta

    from delegate.core.model import JobState
    from delegate.services.jobs.box import clear_left_groups
    from delegate.services.jobs.finish import end_job
    from delegate.services.state import State

    with tempfile.TemporaryDirectory() as top:
        root = Path(top) / "cgroup"
        state = State.open(env={"DELEGATE_HOME": f"{top}/state", "DELEGATE_CGROUP_ROOT": str(root)})
        ended, _ = state.registry.register(command="x")
        end_job(state, ended.job_id, JobState.ERROR, reason="test")
        running, _ = state.registry.register(command="y")
        for name in [*names, ended.job_id, running.job_id]:
            (root / "pids" / "delegate" / name).mkdir(parents=True, exist_ok=True)
        later = datetime.now(UTC) + timedelta(minutes=5)
        import unittest.mock

        with unittest.mock.patch("delegate.services.jobs.box.datetime") as clock:
            clock.now.return_value = later
            cleared = clear_left_groups(state, min_age_s=60)
        assert cleared == [ended.job_id]
        left = {p.name for p in (root / "pids" / "delegate").iterdir()}
        assert left == ({*names, running.job_id} - {ended.job_id})
