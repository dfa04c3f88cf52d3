"""The plain side of the terminal: its width, the output rule, JSON lines. No rich here: the
typer-free paths (entry/) print through this; tables are adapters/terminal's."""

from __future__ import annotations

import os
import shutil
import sys
from typing import IO, Any

from delegate.config.settings import settings
from delegate.core import fastjson


def terminal_width(stream: IO[str] | None = None) -> int:
    """The width of the terminal `stream` writes to: $COLUMNS, the window's, else 80 (also
    for a terminal that reports no size, as a fresh pseudo-terminal does)."""
    given = settings().columns
    if given is not None:
        return given
    stream = stream or sys.stdout
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        columns = shutil.get_terminal_size((80, 24)).columns
    return columns if columns > 0 else 80


def wants_json(as_json: bool, stream: IO[str] | None = None) -> bool:
    """The output rule of every command: JSON with --json, or when stdout is not a terminal."""
    return as_json or not (stream or sys.stdout).isatty()


def print_json(obj: Any, file: IO[str] | None = None) -> None:
    """One JSON line (keys sorted), flushed: what every command prints for a machine."""
    out = file or sys.stdout
    out.write(fastjson.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")
    out.flush()
