"""The queue groups: `groups.json` in the state dir, one entry per group with its own cap and
whether it is paused (`delegate group add|set|pause|resume|list`).

Written whole and atomically under a lock of its own, so a reader (a launcher deciding a start
under the registry's lock) always sees one consistent version without taking this lock.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from delegate.adapters.fsio import FileLock, atomic_write
from delegate.core.caps import GroupRule
from delegate.core.errors import ConfigError, UsageError

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def validate_group_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"invalid group name {name!r}: letters, digits, '_', '.', '-' (at most 64)"
        )
    return name


def _check_cap(max_running: int | None) -> None:
    if max_running is not None and max_running < 1:
        raise UsageError("--max-running must be a positive integer")


def _today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def _yesterday() -> str:
    return (datetime.now(UTC) - timedelta(days=1)).strftime("%Y-%m-%d")


def _rule(entry: dict[str, Any], today: str) -> GroupRule:
    spent = (entry.get("spent") or {}).get(today, 0.0)
    return GroupRule(
        entry.get("max_running"),
        bool(entry.get("paused")),
        entry.get("daily_cost_usd"),
        float(spent) if isinstance(spent, int | float) else 0.0,
    )


class GroupBook:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(path.with_name(path.name + ".lock"))

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError:
            raise ConfigError(f"{self.path} is not valid JSON; fix or remove it") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path} is not a JSON object; fix or remove it")
        return data

    def _write(self, data: dict[str, dict[str, Any]]) -> None:
        text = json.dumps(data, indent=2, sort_keys=True) + "\n"
        atomic_write(self.path, text.encode("utf-8"))

    def rules(self, today: str | None = None) -> dict[str, GroupRule]:
        """Every group's rule, by name (read without the lock: the file is replaced whole);
        `today` (UTC, YYYY-MM-DD) picks the day whose spending counts."""
        today = today or _today()
        return {name: _rule(entry, today) for name, entry in self._read().items()}

    def add_spending(self, name: str, cost_usd: float, today: str | None = None) -> None:
        """What an ended job of group `name` cost, added to the group's day (UTC); days before
        yesterday are forgotten."""
        today = today or _today()
        with self._lock:
            data = self._read()
            if name not in data:
                return  # removed meanwhile: nothing to count against
            spent = {d: v for d, v in (data[name].get("spent") or {}).items() if d >= _yesterday()}
            spent[today] = round(float(spent.get(today, 0.0)) + cost_usd, 6)
            data[name] = {**data[name], "spent": spent}
            self._write(data)

    def get(self, name: str) -> GroupRule:
        rule = self.rules().get(validate_group_name(name))
        if rule is None:
            raise UsageError(f"no group {name!r}: create it with `delegate group add {name}`")
        return rule

    def add(
        self, name: str, max_running: int | None = None, daily_cost_usd: float | None = None
    ) -> GroupRule:
        validate_group_name(name)
        _check_cap(max_running)
        if daily_cost_usd is not None and not daily_cost_usd > 0:
            raise UsageError("--daily-cost must be a positive number of dollars")
        with self._lock:
            data = self._read()
            if name in data:
                raise UsageError(f"group {name!r} exists; change it with `delegate group set`")
            data[name] = {
                "max_running": max_running,
                "paused": False,
                "daily_cost_usd": daily_cost_usd,
            }
            self._write(data)
        return GroupRule(max_running, False, daily_cost_usd)

    def change(self, name: str, **changes: Any) -> GroupRule:
        """Set `max_running` (None: no cap of its own), `paused` and/or `daily_cost_usd`
        (None: no daily budget) of an existing group."""
        validate_group_name(name)
        _check_cap(changes.get("max_running"))
        daily = changes.get("daily_cost_usd")
        if daily is not None and not daily > 0:
            raise UsageError("--daily-cost must be a positive number of dollars")
        with self._lock:
            data = self._read()
            if name not in data:
                raise UsageError(f"no group {name!r}: create it with `delegate group add {name}`")
            data[name] = {**data[name], **changes}
            self._write(data)
            return _rule(data[name], _today())
