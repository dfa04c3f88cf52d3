"""Reading a TOML file (delegate.toml, a job file, a broker-login file): the one place that
parses TOML, so every file's errors read the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from delegate.core.errors import ConfigError


def read_toml(path: Path, where: str = "", *, missing_ok: bool = False) -> dict[str, Any]:
    """The tables of `path` ({} for a missing file when `missing_ok`); ConfigError, its message
    prefixed with `where: ` when given, when it cannot be read or is not TOML."""
    prefix = f"{where}: " if where else ""
    try:
        data = path.read_bytes()  # as tomllib.load reads
    except OSError as exc:
        if missing_ok and isinstance(exc, FileNotFoundError):
            return {}  # (most state dirs have no delegate.toml: no parser loaded for it)
        raise ConfigError(f"{prefix}cannot read {path}: {exc.strerror}") from None
    # tomllib (and the re and datetime it imports) costs milliseconds; only a file read pays it
    import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{prefix}{path}: {exc}") from None


def checked_table(table: object, where: str, keys: set[str] | frozenset[str]) -> dict[str, Any]:
    """A table of delegate.toml (`where` names it in errors), checked to be a table holding
    only `keys`; ConfigError saying which is not."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - keys
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    return table
