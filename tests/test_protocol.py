from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.core import protocol
from delegate.core.protocol import (
    Accepted,
    Receiver,
    Rejected,
    build_envelope,
    canonical_json,
    encode,
    redact,
    redact_secrets,
    sign,
    verify,
)

JOB = "0123abcd"
TOKEN = "s3cret-token-value"

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
data_objects = st.dictionaries(st.text().filter(lambda k: k != "hmac_sig"), json_values, max_size=5)
events = st.sampled_from(["started", "progress", "permission_required", "completed", "error"])


def envelope_strategy():
    return st.builds(
        lambda seq, event, detail, data: build_envelope(
            job_id=JOB,
            seq=seq,
            event=event,
            detail=detail,
            data=data,
            timestamp="2026-01-01T00:00:00.000Z",
        ),
        st.integers(min_value=1, max_value=2**53),
        events,
        st.text(max_size=50),
        data_objects,
    )


@given(json_values)
def test_canonical_json_round_trips(value):
    text = canonical_json(value)
    assert canonical_json(json.loads(text)) == text


def test_canonical_json_form():
    assert canonical_json({"b": 1, "a": ["é", 2]}) == '{"a":["é",2],"b":1}'.encode()


@given(envelope_strategy())
def test_sign_then_verify(envelope):
    signed = sign(envelope, TOKEN)
    assert verify(signed, TOKEN)
    assert not verify(signed, TOKEN + "x")
    # survives the trip over the wire
    assert verify(json.loads(encode(signed)), TOKEN)


@given(envelope_strategy(), st.data())
def test_any_change_breaks_the_signature(envelope, data):
    signed = sign(envelope, TOKEN)
    field = data.draw(
        st.sampled_from(["seq", "event", "detail", "job_id", "timestamp", "data", "extra"])
    )
    tampered = json.loads(encode(signed))
    if field == "seq":
        tampered["seq"] += data.draw(st.integers(min_value=1, max_value=10))
    elif field == "event":
        tampered["event"] = data.draw(events.filter(lambda e: e != envelope["event"]))
    elif field == "detail":
        tampered["detail"] += data.draw(st.text(min_size=1, max_size=5))
    elif field == "job_id":
        tampered["job_id"] = "fedcba98"
    elif field == "timestamp":
        tampered["timestamp"] = "2030-01-01T00:00:00.000Z"
    elif field == "data":
        tampered["data"][
            data.draw(
                st.text(min_size=1).filter(lambda k: k != "hmac_sig" and k not in envelope["data"])
            )
        ] = 1
    else:
        tampered["schema_version"] = 2
    assert not verify(tampered, TOKEN)


def test_signature_matches_an_independent_hmac():
    envelope = build_envelope(
        job_id=JOB, seq=1, event="started", detail="hi", timestamp="2026-01-01T00:00:00.000Z"
    )
    message = (
        '{"data":{},"detail":"hi","event":"started","job_id":"0123abcd",'
        '"schema_version":1,"seq":1,"timestamp":"2026-01-01T00:00:00.000Z"}'
    )
    expected = hmac.new(TOKEN.encode(), message.encode(), hashlib.sha256).hexdigest()
    assert sign(envelope, TOKEN)["data"]["hmac_sig"] == expected


def test_reserved_signature_field_is_refused():
    with pytest.raises(ValueError, match="reserved"):
        build_envelope(job_id=JOB, seq=1, event="started", data={"hmac_sig": "x"})


def _wire(seq, event="progress", job_id=JOB, token=TOKEN, **over):
    env = sign(build_envelope(job_id=job_id, seq=seq, event=event), token)
    env.update(over)
    return encode(env)


def _unsigned(seq):
    return encode(build_envelope(job_id=JOB, seq=seq, event="progress"))


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"\xff\xfe not json", protocol.NOT_JSON),
        (b"{not json", protocol.NOT_JSON),
        (b"[1,2]", protocol.MALFORMED),
        (b"x" * (64 * 1024 + 1), protocol.TOO_LARGE),
        (_wire(2, schema_version=2), protocol.BAD_SCHEMA_VERSION),
        (_wire(2, job_id="fedcba98"), protocol.WRONG_JOB_ID),
        (_unsigned(2), protocol.MISSING_SIGNATURE),
        (_wire(2, token="forged"), protocol.BAD_SIGNATURE),
        (_wire(2).replace(b'"progress"', b'"exploded"'), protocol.UNKNOWN_EVENT),
        (_wire(1, event="started"), protocol.DUPLICATE_SEQ),
    ],
    ids=[
        "binary",
        "broken-json",
        "array",
        "oversized",
        "schema",
        "job-id",
        "unsigned",
        "forged",
        "event",
        "dup-seq",
    ],
)
def test_receiver_rejects_with_a_reason(raw, reason):
    receiver = Receiver(JOB, TOKEN)
    assert isinstance(receiver.check(_wire(1, event="started")), Accepted)
    verdict = receiver.check(raw)
    assert isinstance(verdict, Rejected)
    assert verdict.reason == reason
    assert verdict.explanation


def test_receiver_rejects_everything_after_the_terminal_event():
    receiver = Receiver(JOB, TOKEN)
    assert isinstance(receiver.check(_wire(1, event="started")), Accepted)
    assert isinstance(receiver.check(_wire(2, event="completed")), Accepted)
    late = receiver.check(_wire(3, event="progress"))
    assert isinstance(late, Rejected) and late.reason == protocol.AFTER_TERMINAL
    again = receiver.check(_wire(4, event="error"))
    assert isinstance(again, Rejected) and again.reason == protocol.AFTER_TERMINAL


def test_a_message_of_exactly_the_limit_is_not_too_large():
    receiver = Receiver(JOB, TOKEN)
    verdict = receiver.check(b" " * (64 * 1024))
    assert isinstance(verdict, Rejected) and verdict.reason == protocol.NOT_JSON


@pytest.mark.parametrize(
    ("text", "must_not_contain", "must_contain"),
    [
        ("wrote /home/alice/repo/src/app.py", ["/home/alice", "repo/src"], [".../app.py"]),
        ("see ~/notes/todo.md", ["~/notes"], [".../todo.md"]),
        ("API_KEY=abc123def456 done", ["abc123def456"], ["API_KEY=[REDACTED]"]),
        ("password: hunter2", ["hunter2"], ["[REDACTED]"]),
        ("Authorization: Bearer abcdefghijklmnop", ["abcdefghijklmnop"], ["[REDACTED]"]),
        ("key sk-abcdefghijklmnopqrstuvwx leaked", ["sk-abcdefghijklmnopqrstuvwx"], ["[REDACTED]"]),
        ("mqtt://agent:pa55word@broker:8883", ["pa55word"], ["agent:[REDACTED]@"]),
        ("token is s3cret-token-value", ["s3cret-token-value"], ["[REDACTED]"]),
        (
            "3/4 tests and/or https://example.com/a/b",
            [],
            ["3/4", "and/or", "https://example.com/a/b"],
        ),
        (
            '{"password": "hunter2", "user": "bob"}',
            ["hunter2"],
            ['"password": "[REDACTED]"', "bob"],
        ),
        ("pass=hunter2 and 3 tests passed: all", ["hunter2"], ["pass=[REDACTED]", "passed: all"]),
        ("db_pass: 'hunter2'", ["hunter2"], ["[REDACTED]"]),
        (
            'all tests pass: 42/42; "pass": "hunter2"',
            ["hunter2"],
            ["tests pass: 42/42", '"pass": "[REDACTED]"'],
        ),
        ("AKIAABCDEFGHIJKLMNOP and ghp_" + "a" * 30, ["AKIAABCD", "ghp_aaaa"], ["[REDACTED]"]),
        ("xoxb-1234567890-abc and glpat-" + "b" * 20, ["xoxb-123", "glpat-bbb"], []),
        (
            "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----\nok",
            ["MIIEow", "BEGIN RSA"],
            ["[REDACTED]", "ok"],
        ),
        (
            "unexpected status 401 Unauthorized: invalid x-api-key; X_AUTH_TOKEN=s3cr3t auth: zz9",
            ["s3cr3t", "zz9"],
            ["401 Unauthorized: invalid x-api-key", "X_AUTH_TOKEN=[REDACTED]"],
        ),
    ],
    ids=[
        "abs-path",
        "home-path",
        "env-secret",
        "password",
        "bearer",
        "sk-key",
        "url-creds",
        "job-token",
        "harmless",
        "json-password",
        "pass-not-passed",
        "quoted-pass",
        "pass-in-prose",
        "aws-github",
        "slack-gitlab",
        "pem",
        "unauthorized-is-no-key",
    ],
)
def test_redaction(text, must_not_contain, must_contain):
    out = redact(text, home="/home/alice", secrets=[TOKEN])
    for bad in must_not_contain:
        assert bad not in out
    for good in must_contain:
        assert good in out


def test_redaction_caps_length():
    assert len(redact("x" * 5000, home="/h")) == protocol.MAX_DETAIL_CHARS


def test_data_is_redacted_at_any_depth_but_keeps_numbers_and_paths():
    data = {
        "result": {"api_key": "abc123", "path": "/home/alice/repo/app.py"},
        "usage": {"input_tokens": 1200, "output_tokens": 300},
        "items": [{"password": "hunter2"}, "Bearer abcdefghijklmnop", f"x{TOKEN}y"],
        "author": "Ada",
        "credentials": {"user": "u", "secret": ["s1", "s2"]},
    }
    out = protocol.redact_data(data, secrets=[TOKEN])
    assert out["result"] == {"api_key": "[REDACTED]", "path": "/home/alice/repo/app.py"}
    assert out["usage"] == {"input_tokens": 1200, "output_tokens": 300}
    assert out["items"][0] == {"password": "[REDACTED]"}
    assert "abcdefghijklmnop" not in out["items"][1] and TOKEN not in out["items"][2]
    assert out["author"] == "Ada"
    assert out["credentials"] == {"user": "[REDACTED]", "secret": ["[REDACTED]", "[REDACTED]"]}


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)


def _plant(value, token: str, where: int):
    """Put `token` into one string (value or key) of `value`, chosen by `where`."""
    strings = []

    def walk(node, path):
        if isinstance(node, str):
            strings.append(path)
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, (*path, i))
        elif isinstance(node, dict):
            for key, item in node.items():
                strings.append((*path, ("key", key)))
                walk(item, (*path, key))

    walk(value, ())
    if not strings:
        return {"planted": f"..{token}.."}
    target = strings[where % len(strings)]

    def rebuild(node, path):
        if not path:
            return f"{node[:3]}{token}{node[3:]}" if isinstance(node, str) else node
        head, rest = path[0], path[1:]
        if isinstance(head, tuple):  # a key
            _, key = head
            return {(f"{key}{token}" if k == key else k): v for k, v in node.items()}
        if isinstance(node, list):
            return [rebuild(item, rest) if i == head else item for i, item in enumerate(node)]
        return {k: (rebuild(v, rest) if k == head else v) for k, v in node.items()}

    return rebuild(value, target)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(max_size=60),
    suffix=st.text(max_size=60),
    data=_JSONISH,
    where=st.integers(0, 1000),
)
def test_a_jobs_token_never_survives_redaction(prefix, suffix, data, where):
    import secrets as secret_tokens

    token = secret_tokens.token_urlsafe(32)
    detail = redact(prefix + token + suffix, home="/home/alice", secrets=[token])
    assert token not in detail
    planted = _plant(data if isinstance(data, (dict, list)) else [data], token, where)
    out = protocol.redact_data(planted, secrets=[token])
    assert token not in json.dumps(out, ensure_ascii=False)


# Pieces that make the redaction patterns match, and near misses, in both cases and beside
# letters that case folding maps onto ASCII ones (the Kelvin sign, the long s, dotted I).
_REDACTION_PIECES = [
    *("pass", "PASSWD", "secret", "Token", "api_key", "credential", "AUTH", "author", "key"),
    *("=", ":", " = ", '"', "'", " ", "\n", "x" * 9, "abcdefghijklmnop", "/", "~", "~/", "@"),
    *("Bearer ", "basic ", "sk-", "ghp_", "AKIA", "ABCDEFGHIJKLMNOP", "xoxb-", "glpat-", "gh"),
    *("-----BEGIN RSA PRIVATE KEY-----", "-----END RSA PRIVATE KEY-----", "https://", "u:pw@"),
    *("\u212a", "\u017f", "\u0130", "to\u212aen", "ba\u017fic", "\u00e9"),
    # whole matches, each a literal away from a near miss
    *("Bearer abcdefghij", "basic abcdefghij", "TOKEN abcdefghij", "ba\u017fic abcdefghij"),
    *("passwd=x", "my_secret: 'x'", "API_KEY=x", "auth:x", "to\u212aen=x", "/home/u/a.py"),
    *("sk-" + "a" * 16, "gho_" + "b" * 20, "xoxp-" + "c" * 10, "glpat-" + "d" * 16, "~/x"),
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_REDACTION_PIECES) | st.text(max_size=4), max_size=12))
def test_a_redaction_pattern_skipped_by_its_literals_would_not_have_matched(pieces):
    """Each pattern is tried only on text holding its literals: the result is the regex's own
    on any text, so the pre-check never lets a secret through."""
    text = "".join(pieces)
    for name in (
        "_SECRET_ASSIGNMENT",
        "_SECRET_KEY_NAME",
        "_BEARER",
        "_KNOWN_TOKENS",
        "_PEM_PRIVATE_KEY",
        "_URL_CREDENTIALS",
        "_ABS_PATH",
    ):
        lazy = getattr(protocol, name)
        regex = lazy.compiled()
        assert lazy.may_match(text) or regex.search(text) is None, (name, text)
        assert lazy.sub("#", text) == regex.sub("#", text), (name, text)


SECRETISH = st.text(
    alphabet=st.characters(
        whitelist_categories=("L", "N", "P", "S"), blacklist_characters=",;}]\"'"
    ),
    min_size=4,
).filter(lambda v: not v[0].isdigit())


@given(
    SECRETISH, st.sampled_from(["pass: {}", "pass={}", "PASS = {}", "db_pass: {}", '"pass": "{}"'])
)
@settings(max_examples=300)
def test_no_value_after_a_pass_key_survives_but_a_count(value: str, shape: str):
    """An agent's detail: whatever follows a pass key is hidden (only a bare `pass:` before a
    count, as in "tests pass: 42/42", is prose and kept)."""
    assert value not in redact_secrets(f"progress {shape.format(value)} done")
    assert redact_secrets("all tests pass: 42/42") == "all tests pass: 42/42"
