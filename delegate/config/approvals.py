"""`[approvals]` of delegate.toml: how long a permission request waits for a person, what the
wait ending gives, and the rules that decide some requests without one (core/approvals).

Apart from config/profiles, which the lock fast path imports: the rules need core/approvals,
which signs decisions with core/protocol.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.config.tomlfile import checked_table
from delegate.core.approvals import BEHAVIOURS, DEFAULT_TIMEOUT_S, DENY, ApprovalSettings, Rule
from delegate.core.errors import ConfigError


def approval_settings(config: Mapping[str, Any], source: Path) -> ApprovalSettings:
    """`[approvals]`: how long a permission request waits for a person (`timeout`, seconds),
    what the wait ending gives (`on_timeout`), and `[[approvals.rules]]` that decide some
    requests without one."""
    table = config.get("approvals")
    if table is None:
        return ApprovalSettings()
    where = f"{source} [approvals]"
    table = checked_table(table, where, {"timeout", "on_timeout", "rules"})
    timeout = table.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"{where}: timeout must be a positive number of seconds")
    on_timeout = table.get("on_timeout", DENY)
    if on_timeout not in BEHAVIOURS:
        raise ConfigError(f"{where}: on_timeout must be {' or '.join(BEHAVIOURS)}")
    rules = table.get("rules", [])
    if not isinstance(rules, list):
        raise ConfigError(f"{where}: rules must be an array of tables ([[approvals.rules]])")
    return ApprovalSettings(float(timeout), on_timeout, tuple(_rule(r, where) for r in rules))


def _rule(table: object, where: str) -> Rule:
    if not isinstance(table, dict) or table.keys() - {"tool", "match", "decision"}:
        raise ConfigError(f"{where}: each rule takes tool, match and decision")
    tool, match, decision = table.get("tool"), table.get("match", "*"), table.get("decision")
    if not isinstance(tool, str) or not tool or not isinstance(match, str):
        raise ConfigError(f"{where}: a rule's tool and match must be strings (globs)")
    if decision not in BEHAVIOURS:
        raise ConfigError(f"{where}: a rule's decision must be {' or '.join(BEHAVIOURS)}")
    return Rule(tool, decision, match)
