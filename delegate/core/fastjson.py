"""JSON for the agent's hot path (`delegate publish` and `delegate hook` in a pane), on the C
accelerator `_json` alone: the `json` package imports `re` through its decoder, ~6 ms of a fresh
process that has ~15 ms of budget beyond Python's own start. Same results as `json.loads` and
`json.dumps` (a test checks both on generated documents); anything unusual falls back to `json`.
"""

from __future__ import annotations

import _json
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class _Context:
    """What `_json.make_scanner` reads from a decoder: the defaults of `json.JSONDecoder`."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    memo: dict[str, str] = {}  # noqa: RUF012 - the scanner's own cache, cleared per call

    @staticmethod
    def parse_constant(name: str) -> float:
        return {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}[name]


_scan = _json.make_scanner(_Context())  # type: ignore[arg-type]  # duck-typed like a decoder
_WHITESPACE = " \t\n\r"


def loads(text: str | bytes) -> Any:
    """`json.loads`, for documents without surrounding oddities; others go to `json`."""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8")
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        if start >= len(text):
            raise StopIteration(start)  # nothing to scan (the C scanner mishandles it)
        value, end = _scan(text, start)
    except (StopIteration, SystemError):
        import json  # json: only for what the scanner declines; fast paths never load it

        return json.loads(text)  # raises the usual JSONDecodeError
    finally:
        _Context.memo.clear()
    if text[end:].strip(_WHITESPACE):
        import json  # json: as above, only for what the scanner declines

        return json.loads(text)  # "Extra data": let json say so
    return value


def dumps(value: Any) -> str:
    """`json.dumps(value)` (default separators, ASCII escaping) for str/int/float/bool/None,
    lists and dicts with str keys; anything else goes to `json`."""
    parts: list[str] = []
    if not _encode(value, parts):
        import json  # json: only for values the encoder declines; fast paths never load it

        return json.dumps(value)
    return "".join(parts)


def print_line(value: Any) -> None:
    """`value` as one JSON line on stdout: what the typer-free entry paths print for a machine
    (the typer commands print with `adapters.terminal.print_json`)."""
    sys.stdout.write(dumps(value) + "\n")


def _encode(value: Any, out: list[str]) -> bool:
    """Append `value`'s JSON to `out`; False when it needs `json` (NaN, odd types, keys)."""
    text = _scalar(value)
    if text is not None:
        out.append(text)
        return True
    if isinstance(value, list | tuple):
        return _encode_list(value, out)
    if isinstance(value, dict):
        return _encode_dict(value, out)
    return False


def _scalar(value: Any) -> str | None:
    """The JSON of a str/int/float/bool/None; None for anything else and for NaN/infinity."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return float.__repr__(value)
    return None


def _encode_list(value: list[Any] | tuple[Any, ...], out: list[str]) -> bool:
    out.append("[")
    for i, item in enumerate(value):
        if i:
            out.append(", ")
        if not _encode(item, out):
            return False
    out.append("]")
    return True


def _encode_dict(value: dict[Any, Any], out: list[str]) -> bool:
    out.append("{")
    for i, (key, item) in enumerate(value.items()):
        if not isinstance(key, str):
            return False
        if i:
            out.append(", ")
        out.append(_json.encode_basestring_ascii(key))
        out.append(": ")
        if not _encode(item, out):
            return False
    out.append("}")
    return True
