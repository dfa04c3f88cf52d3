"""`[limits]` of delegate.toml: the memory, CPU and process limits a job gets when submit
names none, for every job, per profile (as `[budget]` does) or per queue group, enforced with
cgroups.

    [limits]
    max_memory = "4G"
    max_pids = 512
    [limits.profiles.codex]   # a profile's own, over the defaults above
    max_cpus = 1.5
    [limits.groups.nightly]   # a group's own (`submit --group nightly`), over both
    max_memory = "2G"
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.core.errors import ConfigError, UsageError
from delegate.core.limits import Limits, limits_from

_KEYS = {"max_memory", "max_cpus", "max_pids"}


def _table(table: object, where: str, *, top: bool = False) -> Limits:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - _KEYS - ({"profiles", "groups"} if top else set())
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    try:
        return limits_from(
            table.get("max_memory"), table.get("max_cpus"), table.get("max_pids"), where
        )
    except UsageError as exc:
        raise ConfigError(str(exc)) from None


def limits_for(
    config: Mapping[str, Any], source: Path, profile: str, group: str | None = None
) -> Limits:
    """The limits a job of `profile` (in queue group `group`) gets where submit names none:
    its group's, over its profile's, over the defaults."""
    table = config.get("limits")
    if table is None:
        return Limits()
    where = f"{source} [limits]"
    found = _table(table, where, top=True)
    for kind, name in (("profiles", profile), ("groups", group)):
        named = table.get(kind) or {}
        if not isinstance(named, dict):
            raise ConfigError(f"{where}.{kind} must be a table of {kind}")
        own = named.get(name) if name else None
        if own is not None:
            found = _table(own, f"{where}.{kind}.{name}").over(found)
    return found
