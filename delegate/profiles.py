"""Agent profiles: how to start an agent, how it gets its prompt, what a clean exit means.

Built in: `shell` (the prompt is a bash script), `claude`, `codex`. More come from the
`[profiles.NAME]` tables of `delegate.toml`:

    [profiles.aider]
    command = ["aider", "--yes", "--message-file", "{prompt_file}"]
    prompt = "file"            # or "stdin"
    clean_exit = "completed"   # or "error": what exit status 0 without a report means
    preamble = true            # prepend the reporting instructions (skills/delegate-job)

Placeholders `{prompt_file}`, `{workdir}` and `{job_id}` are replaced inside argument-vector
elements; nothing is ever run through a shell except a `--cmd` the user wrote as shell text.
"""

from __future__ import annotations

import os
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .errors import ConfigError, UsageError

CONFIG_ENV = "DELEGATE_CONFIG"
PROMPT_MODES = ("stdin", "file")
CLEAN_EXIT = ("completed", "error")
PLACEHOLDERS = ("prompt_file", "workdir", "job_id")


class Profile(NamedTuple):
    name: str
    command: tuple[str, ...]
    prompt: str = "stdin"
    clean_exit: str = "completed"
    preamble: bool = False

    def argv(self, *, prompt_file: Path, workdir: Path, job_id: str) -> list[str]:
        values = {"prompt_file": str(prompt_file), "workdir": str(workdir), "job_id": job_id}
        out = []
        for part in self.command:
            for key, value in values.items():
                part = part.replace("{" + key + "}", value)
            out.append(part)
        return out


BUILTIN: dict[str, Profile] = {
    "shell": Profile("shell", ("bash", "{prompt_file}"), prompt="file"),
    "claude": Profile("claude", ("claude", "-p"), prompt="stdin", preamble=True),
    "codex": Profile("codex", ("codex", "exec", "-"), prompt="stdin", preamble=True),
}


def one_off(cmd: str) -> Profile:
    """`--cmd`: the user's own shell text; the prompt arrives on its stdin."""
    if not cmd.strip():
        raise UsageError("--cmd is empty")
    return Profile("cmd", ("/bin/sh", "-c", cmd), prompt="stdin")


def config_path(home: Path, env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    explicit = env.get(CONFIG_ENV)
    return Path(explicit).expanduser() if explicit else home / "delegate.toml"


def load_config(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _profile_from_table(name: str, table: object, source: Path) -> Profile:
    where = f"{source} [profiles.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - {"command", "prompt", "clean_exit", "preamble"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    command = table.get("command")
    if isinstance(command, str):
        command = shlex.split(command)  # split like a shell would, but never run by one
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise ConfigError(f"{where}: command must be a non-empty list of strings")
    prompt = table.get("prompt", "stdin")
    if prompt not in PROMPT_MODES:
        raise ConfigError(f"{where}: prompt must be one of {', '.join(PROMPT_MODES)}")
    clean_exit = table.get("clean_exit", "completed")
    if clean_exit not in CLEAN_EXIT:
        raise ConfigError(f"{where}: clean_exit must be one of {', '.join(CLEAN_EXIT)}")
    preamble = table.get("preamble", True)
    if not isinstance(preamble, bool):
        raise ConfigError(f"{where}: preamble must be true or false")
    return Profile(name, tuple(command), prompt, clean_exit, preamble)


def profiles(config: Mapping[str, Any], source: Path) -> dict[str, Profile]:
    found = dict(BUILTIN)
    tables = config.get("profiles", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{source}: [profiles] must be a table of tables")
    for name, table in tables.items():
        found[name] = _profile_from_table(name, table, source)
    return found


def resolve(
    *, agent: str | None, cmd: str | None, config: Mapping[str, Any], source: Path
) -> Profile:
    if agent and cmd:
        raise UsageError("give --agent or --cmd, not both")
    if cmd is not None:
        return one_off(cmd)
    if not agent:
        raise UsageError("give --agent NAME or --cmd CMD")
    known = profiles(config, source)
    if agent not in known:
        raise UsageError(f"unknown agent {agent!r}; known: {', '.join(sorted(known))}")
    return known[agent]
