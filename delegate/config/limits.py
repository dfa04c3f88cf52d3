"""`[limits]` of delegate.toml: the memory, CPU and process limits a job gets when submit
names none, for every job or per profile (as `[budget]` does), enforced with cgroups.

    [limits]
    max_memory = "4G"
    max_pids = 512
    [limits.profiles.codex]   # a profile's own, over the defaults above
    max_cpus = 1.5
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.core.errors import ConfigError, UsageError
from delegate.core.limits import Limits, limits_from

_KEYS = {"max_memory", "max_cpus", "max_pids"}


def _table(table: object, where: str) -> Limits:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - _KEYS - {"profiles"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        return limits_from(
            table.get("max_memory"), table.get("max_cpus"), table.get("max_pids"), where
        )
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


def limits_for(config: Mapping[str, Any], source: Path, profile: str) -> Limits:
    """The limits a job of `profile` gets where submit names none."""
    table = config.get("limits")
    if table is None:
        return Limits()
    where = f"{source} [limits]"
    default = _table(table, where)
    profiles = table.get("profiles") or {} if isinstance(table, dict) else {}
    if not isinstance(profiles, dict):
        raise ConfigError(f"{where}.profiles must be a table of profiles")
    own = profiles.get(profile)
    return default if own is None else _table(own, f"{where}.profiles.{profile}").over(default)
