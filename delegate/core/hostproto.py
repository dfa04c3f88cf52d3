"""What a delegator and an agent host say to each other over the broker (DESIGN 13). Pure.

Each host has a key both sides hold (`delegate host add` makes it; the person copies it to the
host). Requests to a host (assign a job, cancel one) are JSON objects signed with HMAC-SHA256 of
that key over their canonical JSON without `sig`; a host refuses a bad signature, a request
issued outside a time window around its own clock, and a request id it has already seen. A
job's token is derived on both sides from the host key and the job id, so it never travels.

Topics, under the bus prefix: `hosts/<name>/assign`, `hosts/<name>/cancel` and
`hosts/<name>/approve` (to the host: a decision on a job's permission request),
`hosts/<name>/presence` (from it: retained, with a last will saying it went offline) and
`hosts/<name>/answers` (from it: what became of each decision, signed with the same key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

from delegate.core.errors import UsageError

HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
KEY_BYTES = 32
WINDOW_MS = 300_000  # a request more than 5 min away from the host's clock is refused
MAX_ASSIGNMENT = 256 * 1024  # the prompt travels inside; bigger assignments are refused
DEFAULT_LOST_AFTER_S = 60.0
PRESENCE_EVERY_S = 10.0
HOST_LOST = "host_lost"


def check_host_name(name: str) -> str:
    if HOST_NAME.fullmatch(name or "") is None:
        raise UsageError(f"invalid host name {name!r}: letters, digits, '-' and '_', up to 63")
    return name


def parse_key(text: str) -> bytes:
    """A host key as stored and copied: 64 hex characters."""
    raw = text.strip()
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise UsageError("a host key is 64 hexadecimal characters (as `delegate host add` prints)")
    return key


def job_token(key: bytes, job_id: str) -> str:
    """The job's HMAC token, the same on both sides and never sent."""
    return hmac.new(key, b"delegate-job-token:" + job_id.encode(), hashlib.sha256).hexdigest()


def topic(prefix: str, host: str, what: str) -> str:
    return f"{prefix}/hosts/{host}/{what}"


def _canonical(message: dict[str, Any]) -> bytes:
    body = {k: v for k, v in message.items() if k != "sig"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(key: bytes, message: dict[str, Any]) -> bytes:
    """The message with its `sig`, as the bytes to publish."""
    signed = dict(message)
    signed["sig"] = hmac.new(key, _canonical(message), hashlib.sha256).hexdigest()
    return json.dumps(signed, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Refused(Exception):
    """Why a host refuses a request: `reason` is one word for the audit, `detail` a sentence."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def verify(
    key: bytes,
    payload: bytes,
    *,
    host: str,
    kind: str,
    now_ms: int,
    seen: frozenset[str] | set[str],
) -> dict[str, Any]:
    """The request, if it is signed with `key`, for this host, of `kind`, fresh and new."""
    if len(payload) > MAX_ASSIGNMENT + 4096:
        raise Refused("too_large", f"{len(payload)} bytes is over the limit")
    try:
        message = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise Refused("not_json", "the request is not JSON") from None
    if not isinstance(message, dict):
        raise Refused("not_json", "the request is not a JSON object")
    sig = message.get("sig")
    expected = hmac.new(key, _canonical(message), hashlib.sha256).hexdigest()
    if not isinstance(sig, str) or not hmac.compare_digest(sig, expected):
        raise Refused("bad_signature", "the signature does not match this host's key")
    if message.get("host") != host or message.get("type") != kind:
        raise Refused(
            "wrong_target", f"the request is a {message.get('type')!r} for {message.get('host')!r}"
        )
    issued = message.get("issued_ms")
    if not isinstance(issued, int) or abs(now_ms - issued) > WINDOW_MS:
        raise Refused("stale", "the request was issued outside the accepted time window")
    request_id = message.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise Refused("malformed", "the request has no id")
    if request_id in seen:
        raise Refused("replayed", f"request {request_id} was already received")
    return message


def assignment(
    *, host: str, request_id: str, issued_ms: int, job: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": "assign",
        "host": host,
        "request_id": request_id,
        "issued_ms": issued_ms,
        "job": job,
    }


def cancel_request(*, host: str, request_id: str, issued_ms: int, job_id: str) -> dict[str, Any]:
    return {
        "type": "cancel",
        "host": host,
        "request_id": request_id,
        "issued_ms": issued_ms,
        "job_id": job_id,
    }


def approval_request(
    *, host: str, request_id: str, issued_ms: int, job_id: str, decision: dict[str, Any]
) -> dict[str, Any]:
    """A decision on one of job `job_id`'s permission requests, as `delegate approve` made it
    (`request_id`, `behavior`, `reason`, `maker`, `remember`: what a local decision file
    holds, unsigned: the host signs it with the job's token, which never travels)."""
    return {
        "type": "approve",
        "host": host,
        "request_id": request_id,
        "issued_ms": issued_ms,
        "job_id": job_id,
        "decision": decision,
    }


def approval_answer(
    *, host: str, request_id: str, issued_ms: int, job_id: str, outcome: str, detail: str
) -> dict[str, Any]:
    """The host's answer to approval request `request_id` (the same id: an answer is matched to
    its request by it, and a request is never carried out twice): `outcome` is
    `delegate.core.approvals`' TAKEN, NOT_WAITING, NOT_TAKEN or REFUSED."""
    return {
        "type": "approval_answer",
        "host": host,
        "request_id": request_id,
        "issued_ms": issued_ms,
        "job_id": job_id,
        "outcome": outcome,
        "detail": detail,
    }
