"""What a job id looks like, checked without `re` (the publish fast path cannot spare it)."""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs the fast path milliseconds; only the type checker needs it
if TYPE_CHECKING:
    from typing import TypeGuard

JOB_ID_LENGTH = 8
_HEX = frozenset("0123456789abcdef")


def is_job_id(text: object) -> TypeGuard[str]:
    """True when `text` is exactly 8 lowercase hex characters: safe to build a path from."""
    return isinstance(text, str) and len(text) == JOB_ID_LENGTH and _HEX.issuperset(text)
