"""Wire protocol v1: the event envelope, canonical JSON, HMAC signing, validation, redaction.

No I/O. The signature is HMAC-SHA256 keyed by the job's `auth_token` over the canonical JSON of
the whole envelope without `data.hmac_sig` (keys sorted, separators `,` and `:`, UTF-8, no ASCII
escaping), so any tool that can sort JSON keys and run HMAC can sign or check an event.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable
from datetime import UTC, datetime

from delegate.core import fastjson
from delegate.core.model import EVENT_NAMES

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms (see core.records)
if TYPE_CHECKING:
    from typing import Any, NamedTuple
else:
    from delegate.core.records import NamedTuple

SCHEMA_VERSION = 1
MAX_MESSAGE_BYTES = 64 * 1024
MAX_DETAIL_CHARS = 1000
SIG_FIELD = "hmac_sig"
ENVELOPE_FIELDS = frozenset(
    {"schema_version", "seq", "job_id", "event", "timestamp", "detail", "data"}
)
TERMINAL_EVENTS = frozenset({"completed", "error"})

# Reasons a receiver gives for dropping a message; they are stable strings for the audit log.
NOT_JSON = "not_json"
TOO_LARGE = "too_large"
MALFORMED = "malformed"
BAD_SCHEMA_VERSION = "bad_schema_version"
WRONG_JOB_ID = "wrong_job_id"
UNKNOWN_EVENT = "unknown_event"
MISSING_SIGNATURE = "missing_signature"
BAD_SIGNATURE = "bad_signature"
DUPLICATE_SEQ = "duplicate_seq"
AFTER_TERMINAL = "after_terminal"


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that signatures are computed over."""
    return fastjson.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def utc_timestamp(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _signing_bytes(envelope: dict[str, Any]) -> bytes:
    data = {k: v for k, v in envelope.get("data", {}).items() if k != SIG_FIELD}
    return canonical_json({**envelope, "data": data})


def compute_signature(envelope: dict[str, Any], token: str) -> str:
    return hmac.new(token.encode("utf-8"), _signing_bytes(envelope), hashlib.sha256).hexdigest()


def sign(envelope: dict[str, Any], token: str) -> dict[str, Any]:
    """Return a copy of `envelope` with `data.hmac_sig` set."""
    signature = compute_signature(envelope, token)
    return {**envelope, "data": {**envelope.get("data", {}), SIG_FIELD: signature}}


def verify(envelope: dict[str, Any], token: str) -> bool:
    """True when `data.hmac_sig` matches; the comparison takes constant time."""
    data = envelope.get("data")
    if not isinstance(data, dict):
        return False
    given = data.get(SIG_FIELD)
    if not isinstance(given, str):
        return False
    try:
        expected = compute_signature(envelope, token)
    except (TypeError, ValueError):
        return False
    return hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace"))


def build_envelope(
    *,
    job_id: str,
    seq: int,
    event: str,
    detail: str = "",
    data: dict[str, Any] | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    """An unsigned envelope; raise ValueError when a field breaks the schema."""
    if event not in EVENT_NAMES:
        raise ValueError(
            f"unknown event {event!r}; expected one of {', '.join(sorted(EVENT_NAMES))}"
        )
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ValueError("seq must be a positive integer")
    data = dict(data or {})
    if SIG_FIELD in data:
        raise ValueError(f"data.{SIG_FIELD} is reserved for the signature")
    return {
        "schema_version": SCHEMA_VERSION,
        "seq": seq,
        "job_id": job_id,
        "event": event,
        "timestamp": timestamp or utc_timestamp(),
        "detail": detail,
        "data": data,
    }


def encode(envelope: dict[str, Any]) -> bytes:
    return canonical_json(envelope)


# --- receiving -----------------------------------------------------------------------------


class Accepted(NamedTuple):
    envelope: dict[str, Any]

    @property
    def seq(self) -> int:
        return int(self.envelope["seq"])

    @property
    def event(self) -> str:
        return str(self.envelope["event"])


class Rejected(NamedTuple):
    reason: str
    explanation: str
    seq: int | None = None


def parse_envelope(raw: bytes, max_bytes: int = MAX_MESSAGE_BYTES) -> dict[str, Any] | Rejected:
    """Decode and check the shape of one message, without signature or sequence checks."""
    if len(raw) > max_bytes:
        return Rejected(TOO_LARGE, f"{len(raw)} bytes is over the {max_bytes}-byte limit")
    try:
        obj = fastjson.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return Rejected(NOT_JSON, "message is not UTF-8 JSON")
    if not isinstance(obj, dict):
        return Rejected(MALFORMED, "message is not a JSON object")
    if obj.get("schema_version") != SCHEMA_VERSION or isinstance(obj.get("schema_version"), bool):
        return Rejected(
            BAD_SCHEMA_VERSION, f"schema_version {obj.get('schema_version')!r} is not 1"
        )
    missing = ENVELOPE_FIELDS - obj.keys()
    extra = obj.keys() - ENVELOPE_FIELDS
    if missing or extra:
        what = f"missing {sorted(missing)}" if missing else f"unexpected {sorted(extra)}"
        return Rejected(MALFORMED, f"envelope fields: {what}")
    seq = obj["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        return Rejected(MALFORMED, "seq is not a positive integer")
    checks = (
        (isinstance(obj["job_id"], str), "job_id is not a string"),
        (isinstance(obj["timestamp"], str), "timestamp is not a string"),
        (isinstance(obj["detail"], str), "detail is not a string"),
        (isinstance(obj["data"], dict), "data is not an object"),
        (isinstance(obj["event"], str), "event is not a string"),
    )
    for ok, why in checks:
        if not ok:
            return Rejected(MALFORMED, why, seq)
    return obj


class Receiver:
    """The receiving side of one job: decides for each raw message whether to accept it.

    Keeps the seqs it accepted and whether the terminal event was seen, so a duplicate, a replay
    or anything after `completed`/`error` is dropped with a reason. No I/O: the caller audits.
    """

    def __init__(self, job_id: str, token: str, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.job_id = job_id
        self.token = token
        self.max_bytes = max_bytes
        self.seen: set[int] = set()
        self.terminal_event: str | None = None

    def check(self, raw: bytes) -> Accepted | Rejected:
        parsed = parse_envelope(raw, self.max_bytes)
        if isinstance(parsed, Rejected):
            return parsed
        seq = parsed["seq"]
        if parsed["job_id"] != self.job_id:
            return Rejected(WRONG_JOB_ID, f"job_id {parsed['job_id']!r} is not {self.job_id}", seq)
        if parsed["event"] not in EVENT_NAMES:
            return Rejected(UNKNOWN_EVENT, f"unknown event {parsed['event']!r}", seq)
        if SIG_FIELD not in parsed["data"]:
            return Rejected(MISSING_SIGNATURE, "data.hmac_sig is missing", seq)
        if not verify(parsed, self.token):
            return Rejected(BAD_SIGNATURE, "HMAC signature does not match", seq)
        if self.terminal_event is not None:
            return Rejected(
                AFTER_TERMINAL, f"arrived after the terminal {self.terminal_event} event", seq
            )
        if seq in self.seen:
            return Rejected(DUPLICATE_SEQ, f"seq {seq} was already accepted", seq)
        self.seen.add(seq)
        if parsed["event"] in TERMINAL_EVENTS:
            self.terminal_event = parsed["event"]
        return Accepted(parsed)


# --- redaction ------------------------------------------------------------------------------

# Key names whose values are secrets. In text they must meet a separator (`=`, `:`) right after
# the name (with optional quotes, so JSON counts): `password=x`, `"api_key": "x"`, `pass=x`
# (a bare PASS only right before the separator, so "passed: 3" stays; AUTH only where a word or
# a part of a name starts, so "401 Unauthorized: invalid key" stays).
_SECRET_KEY_TEXT = "".join(  # a pattern of key names, not a password
    (
        r"[A-Z0-9_.-]*(?:PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|",
        r"PRIVATE_?KEY|CREDENTIALS?|(?<![A-Z])AUTH)[A-Z0-9_.-]*|[A-Z0-9_.-]*PASS",
    )
)


class _LazyPattern:
    """A redaction regex, compiled at its first use and tried only on text that holds what
    every match of it holds (one literal of each group): compiling them all costs a fresh
    `publish` ~9 ms, and most details (`step 3`, `tests pass`) need none of them.

    `any_case` patterns (`(?i)`) look for their literals in the lowered text; for text that
    is not ASCII they are always tried, as their case folding maps some other letters onto
    ASCII ones (the Kelvin sign matches `k`)."""

    __slots__ = ("_any_case", "_compiled", "_flags", "_groups", "_source")

    def __init__(
        self,
        source: str,
        *groups: tuple[str, ...],
        flags: int = 0,
        any_case: bool = False,
    ) -> None:
        self._source, self._groups, self._flags = source, groups, flags
        self._any_case = any_case
        self._compiled: re.Pattern[str] | None = None

    def may_match(self, text: str) -> bool:
        if self._any_case:
            if not text.isascii():
                return True
            text = text.lower()
        return all(any(literal in text for literal in group) for group in self._groups)

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._source, self._flags)
        return self._compiled

    def sub(self, replacement: Any, text: str) -> str:
        return self.compiled().sub(replacement, text) if self.may_match(text) else text

    def search(self, text: str) -> re.Match[str] | None:
        return self.compiled().search(text) if self.may_match(text) else None


_SECRET_WORDS = ("pass", "secret", "token", "key", "credential", "auth")  # in every key name
_SECRET_ASSIGNMENT = _LazyPattern(
    rf"(?i)(?<![A-Za-z0-9_.-])([\"']?)({_SECRET_KEY_TEXT})\1(\s*[=:]\s*)"
    r"(\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^\s,;}\]]+)",
    ("=", ":"),
    _SECRET_WORDS,
    any_case=True,
)
# In `data`, a value under such a key is replaced whole, at any depth; `key` alone counts too.
_SECRET_KEY_NAME = _LazyPattern(
    r"(?i)(?:password|passwd|passphrase|^pass$|secret|token|key|credential|auth(?!or))",
    _SECRET_WORDS,
    any_case=True,
)
_BEARER = _LazyPattern(
    r"(?i)\b(bearer|token|basic)\s+[A-Za-z0-9._~+/=-]{8,}",
    ("bearer", "token", "basic"),
    any_case=True,
)
_KNOWN_TOKENS = _LazyPattern(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|"
    r"xox[abprs]-[A-Za-z0-9-]{10,}|glpat-[A-Za-z0-9_-]{16,})",
    ("sk-", "gh", "AKIA", "xox", "glpat-"),
)
_PEM_PRIVATE_KEY = _LazyPattern(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    ("-----BEGIN ",),
    flags=re.DOTALL,
)
_URL_CREDENTIALS = _LazyPattern(
    r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+):[^@\s/]+@", ("://",), ("@",)
)
_ABS_PATH = _LazyPattern(
    r"(?<![\w.~:/\\-])(?:~|/)(?:[^\s'\"`:;,()<>]*/)*([^\s'\"`:;,()<>/]*)", ("/", "~")
)
REDACTED = "[REDACTED]"
_COUNT = re.compile(r"[0-9][0-9./%]*")  # what follows a bare `pass:` in prose


def redact_secrets(text: str, *, secrets: Iterable[str] = ()) -> str:
    """`text` without secrets: the given ones (a job's token) wherever they appear, URL
    credentials, bearer tokens, `key=value` and JSON-style secret assignments, provider keys
    (`sk-`, `ghp_`, `AKIA`, `xox`, `glpat-`) and PEM private key blocks."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    text = _PEM_PRIVATE_KEY.sub(REDACTED, text)
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group(1)}:{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _SECRET_ASSIGNMENT.sub(_assignment, text)
    return _KNOWN_TOKENS.sub(REDACTED, text)


def _assignment(match: re.Match[str]) -> str:
    quote, name, separator, value = match.groups()
    if not quote and name.lower() == "pass" and ":" in separator and _COUNT.fullmatch(value):
        return match.group(0)  # a count ("tests pass: 42/42"); any other value still counts
    hidden = f"{value[0]}{REDACTED}{value[0]}" if value[0] in "\"'" else REDACTED
    return f"{quote}{name}{quote}{separator}{hidden}"


def redact(text: str, *, home: str | None = None, secrets: Iterable[str] = ()) -> str:
    """Make `text` safe for `detail`: no secrets, no absolute paths, no home folder.

    Paths keep only their last component (`/home/u/repo/app.py` becomes `.../app.py`), so a
    detail stays useful without telling where things live.
    """
    text = redact_secrets(text, secrets=secrets)
    home = home if home is not None else os.path.expanduser("~")
    if home and home not in ("/", "~"):
        text = text.replace(home.rstrip("/"), "~")
    text = _ABS_PATH.sub(_shorten_path, text)
    if len(text) > MAX_DETAIL_CHARS:
        text = text[: MAX_DETAIL_CHARS - 1] + "\u2026"
    return text


def redact_data(value: Any, *, secrets: Iterable[str] = (), hidden: bool = False) -> Any:
    """`data` made safe at any depth: strings under secret-like keys are replaced whole, every
    string (keys too) loses its secrets. Numbers stay (`"input_tokens": 1200` is no secret),
    and so do paths: data is for machines."""
    secrets = tuple(secrets)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            secret_key = hidden or _SECRET_KEY_NAME.search(str(key)) is not None
            out[redact_secrets(str(key), secrets=secrets)] = redact_data(
                item, secrets=secrets, hidden=secret_key
            )
        return out
    if isinstance(value, list):
        return [redact_data(item, secrets=secrets, hidden=hidden) for item in value]
    if isinstance(value, str):
        return REDACTED if hidden and value else redact_secrets(value, secrets=secrets)
    return value


def _shorten_path(match: re.Match[str]) -> str:
    whole, last = match.group(0), match.group(1)
    if whole in ("/", "~", "~/") or len(whole) == 1:
        return whole
    return f".../{last}" if last else "..."
