"""`delegate submit --from-file job.toml`: the same fields as the flags, flags win."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from delegate.config.tomlfile import read_toml
from delegate.core.errors import ConfigError

_PATHS = ("prompt_file", "workdir")
_NUMBERS = ("wall_timeout", "idle_timeout")
_TEXT = (
    "agent",
    "cmd",
    "prompt",
    "session",
    "bus",
    "idempotency_key",
    "on_event",
    "host",
    "after_rule",
    "group",
    "branch",
    "base",
    "retry_on",
    "backoff",
    "on_interrupt",
    "max_memory",
)


def merge_job_file(path: Path | None, **flags: Any) -> dict[str, Any]:
    """Settings from `path` (if any) overridden by every flag that was given.

    Relative paths in the file are taken relative to the file, so a crontab line can point at
    it from anywhere. `wait` stays None when neither says: the caller decides (a terminal).
    """
    if path is None:
        return merge_job_settings(None, {}, **flags)
    data = read_toml(path)
    if "jobs" in data:
        raise ConfigError(
            f"{path} declares several jobs ([[jobs]]): submit it with --from-file alone"
        )
    return merge_job_settings(path, data, **flags)


def merge_job_settings(path: Path | None, data: dict[str, Any], **flags: Any) -> dict[str, Any]:
    """`data` (one job's fields, read from the file `path`) overridden by every flag given."""
    settings: dict[str, Any] = {name: None for name in flags}
    unknown = data.keys() - flags.keys()
    if unknown:
        raise ConfigError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
    for name, value in data.items():
        settings[name] = _file_value(path or Path("."), name, value)
    for name, value in flags.items():
        if value is not None:
            settings[name] = value
    return settings


def _file_value(path: Path, name: str, value: Any) -> Any:
    """The field `name` of the job file `path`, checked, with paths made absolute and
    timeouts made floats; ConfigError naming the field when it has the wrong type."""
    if name in _PATHS:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: {name} must be a string")
        return (path.parent / Path(value).expanduser()).absolute()
    if name in _NUMBERS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: {name} must be a number of seconds")
        return float(value)
    check = _CHECKS.get(name) or ((_is_text, "must be a string") if name in _TEXT else None)
    if check is not None and not check[0](value):
        raise ConfigError(f"{path}: {name} {check[1]}")
    return value


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_ids(value: Any) -> bool:
    """A job file's `after`: one id (or `"a,b"`), or a list of ids."""
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(v, str) for v in value)
    )


# The other checked fields: a test of the value, and what the error says it must be.
_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_running": (_is_positive_int, "must be a positive integer"),
    "retries": (lambda v: _is_positive_int(v) or v == 0, "must be 0 or more"),
    "wait": (lambda value: isinstance(value, bool), "must be true or false"),
    "worktree": (lambda value: isinstance(value, bool), "must be true or false"),
    "sandbox": (lambda value: isinstance(value, bool), "must be true or false"),
    "after": (_is_ids, "must be a job id or a list of them"),
    "max_tokens": (_is_positive_int, "must be a positive integer"),
    "max_pids": (_is_positive_int, "must be a positive integer"),
    "max_cpus": (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v > 0,
        "must be a positive number of cores",
    ),
    "max_cost": (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v > 0,
        "must be a positive number of dollars",
    ),
}
