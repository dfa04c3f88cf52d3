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


def dumps(
    value: Any,
    *,
    sort_keys: bool = False,
    ensure_ascii: bool = True,
    separators: tuple[str, str] | None = None,
    allow_nan: bool = True,
    indent: int | None = None,
) -> str:
    """`json.dumps(value, ...)` with these options, for str/int/float/bool/None, lists and
    dicts with str keys; anything else goes to `json` (which refuses NaN and infinities
    with ValueError when not `allow_nan`). `separators` defaults as json's do: `(", ", ": ")`,
    or `(",", ": ")` with an `indent`."""
    if separators is None:
        separators = (", ", ": ") if indent is None else (",", ": ")
    style = _Style(sort_keys, ensure_ascii, separators, indent)
    parts: list[str] = []
    if not _encode(value, parts, style):
        import json  # json: only for values the encoder declines; fast paths never load it

        return json.dumps(
            value,
            sort_keys=sort_keys,
            ensure_ascii=ensure_ascii,
            separators=separators,
            allow_nan=allow_nan,
            indent=indent,
        )
    return "".join(parts)


class _Style:
    """How `dumps` writes: key order, escaping, separators and indentation."""

    __slots__ = ("indent", "item_sep", "key_sep", "sort_keys", "string")

    def __init__(
        self,
        sort_keys: bool,
        ensure_ascii: bool,
        separators: tuple[str, str],
        indent: int | None = None,
    ) -> None:
        self.sort_keys = sort_keys
        self.string = _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring
        self.item_sep, self.key_sep = separators
        self.indent = None if indent is None else " " * indent


_DEFAULT_STYLE = _Style(False, True, (", ", ": "))


def print_line(value: Any) -> None:
    """`value` as one JSON line on stdout: what the typer-free entry paths print for a machine
    (the typer commands print with `adapters.terminal.print_json`)."""
    sys.stdout.write(dumps(value) + "\n")


def _encode(value: Any, out: list[str], style: _Style = _DEFAULT_STYLE, depth: int = 0) -> bool:
    """Append `value`'s JSON to `out`; False when it needs `json` (NaN, odd types, keys)."""
    text = _scalar(value, style)
    if text is not None:
        out.append(text)
        return True
    if isinstance(value, list | tuple):
        return _encode_list(value, out, style, depth)
    if isinstance(value, dict):
        return _encode_dict(value, out, style, depth)
    return False


def _scalar(value: Any, style: _Style) -> str | None:
    """The JSON of a str/int/float/bool/None; None for anything else and for NaN/infinity."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return style.string(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return float.__repr__(value)
    return None


def _breaks(style: _Style, depth: int) -> tuple[str, str, str]:
    """What opens a container's first item, separates its items and closes it: with an
    `indent`, each item on a line of its own one level deeper, as json writes them."""
    if style.indent is None:
        return "", style.item_sep, ""
    inner = "\n" + style.indent * (depth + 1)
    return inner, style.item_sep + inner, "\n" + style.indent * depth


def _encode_list(
    value: list[Any] | tuple[Any, ...], out: list[str], style: _Style, depth: int
) -> bool:
    if not value:
        out.append("[]")
        return True
    first, between, last = _breaks(style, depth)
    out.append("[" + first)
    for i, item in enumerate(value):
        if i:
            out.append(between)
        if not _encode(item, out, style, depth + 1):
            return False
    out.append(last + "]")
    return True


def _encode_dict(value: dict[Any, Any], out: list[str], style: _Style, depth: int) -> bool:
    if not all(isinstance(key, str) for key in value):
        return False  # json converts other keys (and sorts them) its own way
    if not value:
        out.append("{}")
        return True
    first, between, last = _breaks(style, depth)
    out.append("{" + first)
    items = sorted(value.items()) if style.sort_keys else value.items()
    for i, (key, item) in enumerate(items):
        if i:
            out.append(between)
        out.append(style.string(key))
        out.append(style.key_sep)
        if not _encode(item, out, style, depth + 1):
            return False
    out.append(last + "}")
    return True
