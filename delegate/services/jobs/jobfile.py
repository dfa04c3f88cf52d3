"""`delegate submit --from-file job.toml`: the same fields as the flags, flags win."""

from __future__ import annotations

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
    "branch",
    "base",
)


def merge_job_file(path: Path | None, **flags: Any) -> dict[str, Any]:
    """Settings from `path` (if any) overridden by every flag that was given.

    Relative paths in the file are taken relative to the file, so a crontab line can point at
    it from anywhere. `wait` stays None when neither says: the caller decides (a terminal).
    """
    settings: dict[str, Any] = {name: None for name in flags}
    if path is not None:
        data = read_toml(path)
        unknown = data.keys() - flags.keys()
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {', '.join(sorted(unknown))}")
        for name, value in data.items():
            settings[name] = _file_value(path, name, value)
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
    if name == "max_running":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{path}: max_running must be a positive integer")
    elif name in ("wait", "worktree"):
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: {name} must be true or false")
    elif name in _TEXT and not isinstance(value, str):
        raise ConfigError(f"{path}: {name} must be a string")
    return value
