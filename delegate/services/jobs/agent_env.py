"""What an agent runs with: an explicit environment, and a command found before the job exists.

The environment is built at submit time from a small base (HOME, USER, LANG, TERM, TZ, SHELL,
PATH), the profile's `env` and `pass_env`, and the job's `DELEGATE_*` variables; on MQTT, the
agent's own broker login (`DELEGATE_AGENT_MQTT_USERNAME` / `..._PASSWORD` in the submitter's
environment, or the profile's `mqtt_credentials` file) becomes its MQTT_USERNAME/MQTT_PASSWORD.
Nothing else of the submitter's environment, nor of the tmux server's, reaches the agent: the
wrapper starts it with exactly this, read from `logs/<job>/agent.env` (0600), never from argv.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

from delegate.adapters.fsio import atomic_write, write_new
from delegate.config.profiles import Profile
from delegate.config.settings import (
    AGENT_BASE_ENV,
    AGENT_MQTT_PASSWORD_ENV,
    AGENT_MQTT_USERNAME_ENV,
    BUS_ENV,
    HOME_ENV,
    JOB_ENV,
    MQTT_CA_CERTS_ENV,
    MQTT_PASSWORD_ENV,
    MQTT_USERNAME_ENV,
    PATH_ENV,
    TMUX_SOCKET_ENV,
)
from delegate.config.tomlfile import read_toml
from delegate.core.errors import ConfigError, UsageError
from delegate.services.state import State, strip_credentials

BASE = AGENT_BASE_ENV
ENV_FILE = "agent.env"
# Broker settings an agent may share with its delegator (nothing here is a secret).
SHARED_MQTT = (MQTT_CA_CERTS_ENV,)
# First words of a `--cmd` that the shell itself provides: nothing to look up on PATH.
_SHELL_WORDS_TEXT = (
    "! { } [[ ]] ( ) . : [ alias bg break case cd command continue declare do done "
    "echo elif else esac eval exec exit export false fg fi for function getopts hash "
    "if in jobs kill let local printf pwd read readonly return select set shift "
    "source test then time times trap true type typeset ulimit umask unalias unset "
    "until wait while"
)
SHELL_WORDS = frozenset(_SHELL_WORDS_TEXT.split())


def toolkit_bin() -> str:
    """The folder holding this installation's `delegate` (and its Python)."""
    return str(Path(sys.executable).parent)


def agent_path(profile: Profile, submitter: Mapping[str, str]) -> str:
    """The agent's PATH: the profile's `path`, else the submitter's; then `~/.local/bin` and the
    toolkit's bin folder, so a cron submit with a minimal PATH finds what a login shell would."""
    folders = list(profile.path) if profile.path is not None else []
    if profile.path is None:
        folders = [p for p in submitter.get(PATH_ENV, "/usr/bin:/bin").split(os.pathsep) if p]
    home = submitter.get("HOME")
    extra = [str(Path(home) / ".local" / "bin")] if home else []
    extra.append(toolkit_bin())
    return os.pathsep.join(dict.fromkeys([*folders, *extra]))


def resolve_command(profile: Profile, path: str) -> list[str]:
    """The profile's command with its program found on `path` (an absolute path); raise
    UsageError naming it when it cannot be found. For a `--cmd` (shell text) the first word is
    checked when it names a program, and the text is left for the shell."""
    if profile.shell_text:
        text = profile.command[-1]
        try:
            words = shlex.split(text)
        except ValueError:
            return list(profile.command)  # the shell will say what is wrong with it
        words = [w for w in words if not ("=" in w and w.split("=", 1)[0].isidentifier())][:1]
        if words and words[0] not in SHELL_WORDS and not set("$`*?") & set(words[0]):
            _find(words[0], path, "--cmd")
        return list(profile.command)
    program = profile.command[0]
    if "{" in program:
        return list(profile.command)  # a placeholder: known only once the job exists
    return [_find(program, path, f"agent {profile.name!r}"), *profile.command[1:]]


def _find(program: str, path: str, what: str) -> str:
    if "/" in program:
        found = program if os.access(program, os.X_OK) and Path(program).is_file() else None
    else:
        found = shutil.which(program, path=path)
    if found is None:
        raise UsageError(f"{what}: command {program!r} not found (PATH {path})")
    return os.path.abspath(found)


def _credentials_file(path_text: str, where: str) -> tuple[str, str]:
    path = Path(path_text).expanduser()
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    data = read_toml(path, where)
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ConfigError(f"{where}: {path} holds a password; make it mode 0600")
    user, password = data.get("username"), data.get("password")
    if not isinstance(user, str) or not isinstance(password, str):
        raise ConfigError(f'{where}: {path} needs username = "..." and password = "..."')
    return user, password


def build(
    state: State,
    profile: Profile,
    *,
    job_id: str,
    bus_url: str,
    tmux_socket: str | None,
) -> dict[str, str]:
    """The agent's whole environment (see the module docstring)."""
    submitter = state.env
    env = {name: submitter[name] for name in BASE if submitter.get(name)}
    env[PATH_ENV] = agent_path(profile, submitter)
    for name in profile.pass_env:
        if name in submitter:
            env[name] = submitter[name]
    env.update(dict(profile.env))
    env.update(
        {
            JOB_ENV: job_id,
            HOME_ENV: str(state.layout.home),
            BUS_ENV: strip_credentials(bus_url),
        }
    )
    if tmux_socket:
        env[TMUX_SOCKET_ENV] = tmux_socket
    if bus_url.startswith(("mqtt://", "mqtts://")):
        for name in SHARED_MQTT:
            if submitter.get(name):
                env[name] = submitter[name]
        if profile.mqtt_credentials:
            user, password = _credentials_file(
                profile.mqtt_credentials, f"[profiles.{profile.name}] mqtt_credentials"
            )
        else:
            user = submitter.get(AGENT_MQTT_USERNAME_ENV, "")
            password = submitter.get(AGENT_MQTT_PASSWORD_ENV, "")
        if user:
            env[MQTT_USERNAME_ENV] = user
            env[MQTT_PASSWORD_ENV] = password
    return env


def save(state: State, job_id: str, env: Mapping[str, str], *, durable: bool = True) -> Path:
    path = state.audit.job_dir(job_id, create=True) / ENV_FILE
    data = json.dumps(dict(env), sort_keys=True).encode("utf-8")
    (atomic_write if durable else write_new)(path, data)
    return path


def load(state: State, job_id: str) -> dict[str, str] | None:
    """The saved environment of a job, or None (a job submitted before there was one)."""
    try:
        data = json.loads((state.audit.job_dir(job_id) / ENV_FILE).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()}
