"""`[budget]` and `[prices]` of delegate.toml: what a job may spend by default (for every job,
or per profile), and the prices that turn tokens into dollars when an agent reports none.

    [budget]
    max_cost = 5.0            # USD per job
    max_tokens = 2000000
    [budget.profiles.claude]  # a profile's own limits, over the defaults above
    max_cost = 2.0

    [prices."claude-sonnet-4-5"]   # USD per million tokens
    input = 3.0
    output = 15.0
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from delegate.core.budget import Budget, Price
from delegate.core.errors import ConfigError
from delegate.core.retry import RATE_LIMIT_MAX_WAIT_S


def _number(value: object, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: {key} must be a positive number")
    return float(value)


def _limits(table: object, where: str) -> Budget:
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - {"max_cost", "max_tokens", "profiles"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    tokens = _number(table.get("max_tokens"), where, "max_tokens")
    return Budget(
        _number(table.get("max_cost"), where, "max_cost"),
        int(tokens) if tokens is not None else None,
    )


def budget_for(config: Mapping[str, Any], source: Path, profile: str) -> Budget:
    """The limits a job of `profile` gets when submit names none."""
    table = config.get("budget")
    if table is None:
        return Budget()
    where = f"{source} [budget]"
    default = _limits(table, where)
    own = (table.get("profiles") or {}).get(profile) if isinstance(table, dict) else None
    if own is None:
        return default
    mine = _limits(own, f"{where}.profiles.{profile}")
    return Budget(
        mine.max_cost_usd if mine.max_cost_usd is not None else default.max_cost_usd,
        mine.max_tokens if mine.max_tokens is not None else default.max_tokens,
    )


def prices(config: Mapping[str, Any], source: Path) -> dict[str, Price]:
    table = config.get("prices", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source} [prices] must be a table of models")
    found = {}
    for model, entry in table.items():
        where = f"{source} [prices.{model}]"
        if not isinstance(entry, dict) or entry.keys() - {"input", "output"}:
            raise ConfigError(f"{where} takes input and output (USD per million tokens)")
        found[model] = Price(
            _number(entry.get("input"), where, "input") or 0.0,
            _number(entry.get("output"), where, "output") or 0.0,
        )
    return found


def rate_limit_max_wait(config: Mapping[str, Any], source: Path) -> float:
    """`[rate_limit] max_wait` (seconds): a rate-limited attempt resumes only when its limit
    resets within this; default 6 hours."""
    table = config.get("rate_limit", {})
    if not isinstance(table, dict) or table.keys() - {"max_wait"}:
        raise ConfigError(f"{source} [rate_limit] takes max_wait (seconds)")
    value = table.get("max_wait", RATE_LIMIT_MAX_WAIT_S)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{source} [rate_limit]: max_wait must be a positive number of seconds")
    return float(value)
