"""The one table helper of the command line: a header, every column kept, fitted to the width.

Every listing command prints through `print_listing`, which applies the output rule (a table
at a terminal; JSON lines with --json or when piped; an empty listing is one note on stderr)
and draws tables with `print_table`. At a terminal the table fits the window
(at least as it is wide, 80 columns when the width is unknown): when it would be wider, the
widest free-text cells are shortened with an ellipsis, never a column dropped and never a
header cut; then the columns close up (one space between them instead of two); then the
columns that may fold (states, times, sizes) are folded onto more lines. Identifiers keep
their full width. An empty listing prints nothing on stdout and one note on stderr.
Rendering is rich's (imported only when a table is printed).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import IO, Any, NamedTuple, TypeVar

from delegate.adapters.console import print_json, terminal_width, wants_json
from delegate.core.errors import say

T = TypeVar("T")

MIN_FREE_WIDTH = 8  # a free-text cell is cut no shorter than this (nor than its header)...
GAP = 2  # spaces between columns; 1 when the table cannot fit otherwise
# How far a table is narrowed, step by step: free text cut down to MIN_FREE_WIDTH ("short"),
# then to its header ("header"); fixed columns that wrap folded at their spaces ("words"),
# then down to their header ("fold").
LEVELS = ("short", "header", "words", "fold")
# What `layout` tries, in turn, until the table fits: (gap, level).
FITS = ((GAP, "short"), (1, "short"), (1, "header"), (1, "words"), (1, "fold"))


class Column(NamedTuple):
    """A column: its header, whether its cells are free text that may be made narrower, and
    whether a narrowed cell is folded onto more lines (`wrap`: what a person must read whole,
    such as the call a permission request asks for, a state or a time) rather than cut with
    `…`. A fixed column (not free) is never narrower than its widest cell unless it wraps, and
    then only when the table fits no other way; none is ever narrower than its header."""

    header: str
    free: bool = False
    align: str = "left"
    wrap: bool = False


def fit_widths(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    gap: int = GAP,
    level: str = "header",
) -> list[int]:
    """Each column's width so the table fits `width`: natural widths, then the widest free
    column shortened down to the next widest, and so on, so long free cells share the room
    left, never below MIN_FREE_WIDTH or the header; then (`level` "header" or beyond) down to
    the header; then ("words") the fixed columns that wrap folded at their spaces; then
    ("fold") down to their header. Identifiers (fixed, not wrapping) never shrink, and a line
    runs wider than `width` only when the headers and identifiers alone do not fit."""
    widths = [
        max([len(col.header), *(len(row[i]) for row in rows)]) for i, col in enumerate(columns)
    ]

    def total() -> int:
        return sum(widths) + gap * (len(widths) - 1)

    for floors in _floors(columns, rows, LEVELS[: LEVELS.index(level) + 1]):
        while total() > width:
            shrinkable = [i for i, f in enumerate(floors) if f is not None and widths[i] > f]
            if not shrinkable:
                break
            # the widest first, down to the next widest, so long cells share what is left
            widest = max(shrinkable, key=lambda i: widths[i])
            floor = floors[widest] or 0
            level_to = max([floor, *(widths[i] for i in shrinkable if i != widest)])
            step = max(1, min(total() - width, widths[widest] - level_to))
            widths[widest] = max(floor, widths[widest] - step)
    return widths


def _floors(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], levels: Sequence[str]
) -> list[list[int | None]]:
    """For each level, how narrow each column may become (None: not at all)."""
    stages = []
    for level in levels:
        floors: list[int | None] = []
        for i, col in enumerate(columns):
            if col.free:
                short = level == "short"
                floors.append(max(MIN_FREE_WIDTH, len(col.header)) if short else len(col.header))
            elif col.wrap and level == "words":
                words = [len(word) for row in rows for word in row[i].split()]
                floors.append(max([len(col.header), *words]))
            elif col.wrap and level == "fold":
                floors.append(len(col.header))
            else:
                floors.append(None)
        stages.append(floors)
    return stages


def layout(
    columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> tuple[list[int], int]:
    """The widths and the gap between columns of the first way in FITS that fits `width`
    (else of the last, which comes closest)."""
    for gap, level in FITS:
        widths = fit_widths(columns, rows, width, gap=gap, level=level)
        if sum(widths) + gap * (len(widths) - 1) <= width:
            break
    return widths, gap


def print_table(
    columns: Sequence[Column | str],
    rows: Sequence[Sequence[str]],
    *,
    empty: str,
    title: str | None = None,
    width: int | None = None,
    file: IO[str] | None = None,
    fit: bool = True,
) -> None:
    """Print `rows` under `columns` fitted to `width` (default: the terminal's); when there
    are no rows, print `empty` on stderr instead (as `delegate: no open jobs`). With
    `fit=False` (`ps --wide`) nothing is shortened, whatever the width."""
    if not rows:
        say(empty)
        return
    cols = [Column(c) if isinstance(c, str) else c for c in columns]
    cells = [[str(cell) for cell in row] for row in rows]
    out = file or sys.stdout
    width = width or terminal_width(out)
    widths, gap = layout(cols, cells, width if fit else sys.maxsize)

    from rich.console import Console  # rich: only when a table is printed (module doc)
    from rich.table import Table  # rich: as above
    from rich.text import Text  # rich: as above

    padding = (0, 1) if gap == 2 else (0, gap, 0, 0)  # (0, 1): one each side of a column
    table = Table(title=title, box=None, header_style="bold", pad_edge=False, padding=padding)
    for col, w in zip(cols, widths, strict=True):
        table.add_column(
            col.header,
            width=w,
            no_wrap=not col.wrap,
            overflow="fold" if col.wrap else "ellipsis",
            justify=col.align,  # type: ignore[arg-type]
        )
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))  # cells are data, never rich markup
    needed = sum(widths) + gap * (len(widths) - 1)
    Console(file=out, width=max(width, needed), soft_wrap=False).print(table)


def print_listing(
    items: Sequence[T],
    columns: Sequence[Column | str],
    make_row: Callable[[T], Sequence[str]],
    *,
    as_json: bool,
    empty: str,
    to_json: Callable[[T], Any] | None = None,
    title: str | None = None,
    fit: bool = True,
) -> None:
    """What every listing command prints, by the output rule: a table of `make_row(item)` at
    a terminal; with --json or piped, one JSON line per item (`to_json(item)`, else the item
    itself); nothing at all on stdout and `delegate: EMPTY` on stderr when there are none."""
    if not items:
        say(empty)
        return
    if wants_json(as_json):
        for item in items:
            print_json(item if to_json is None else to_json(item))
        return
    print_table(columns, [make_row(item) for item in items], empty=empty, title=title, fit=fit)


def print_tree(
    roots: Sequence[T],
    label: Callable[[T], str],
    children: Callable[[T], Sequence[T]],
    *,
    empty: str,
    file: IO[str] | None = None,
) -> None:
    """Print each of `roots` with its `children` below it, recursively (a job reached twice is
    drawn under each parent); `empty` on stderr when there are no roots."""
    if not roots:
        say(empty)
        return
    from rich.console import Console  # rich: only when a tree is printed (module doc)
    from rich.text import Text  # rich: as above
    from rich.tree import Tree  # rich: as above

    out = file or sys.stdout
    console = Console(file=out, width=terminal_width(out), soft_wrap=False)

    def grow(node: Any, item: T, depth: int) -> None:
        for child in children(item) if depth < 64 else ():
            grow(node.add(Text(label(child))), child, depth + 1)

    for root in roots:
        tree = Tree(Text(label(root)), guide_style="dim")  # labels are data, never markup
        grow(tree, root, 0)
        console.print(tree)


__all__ = ["Column", "print_json", "print_listing", "print_table", "terminal_width", "wants_json"]
