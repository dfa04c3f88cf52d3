"""The one reader of the process environment: every variable the toolkit reads, declared once.

`ENV_VARS` names each variable with its default and one line of meaning; the configuration
reference's table of variables (docs/reference/configuration.md) is made from it when the
docs are built (`env_table`). `Settings` is
what a process runs with, built from an environment mapping (`Settings.from_env`); code
elsewhere receives one, or asks `settings()` for this process's, and never reads `os.environ`
itself (tests/test_config_only.py scans the package for it). A child's environment is built
from `process_env()`, a copy.

This module is on every fast path (publish, hook, cron run, lock): it imports only `os`.
"""

from __future__ import annotations

import os
import sys

from delegate.core.errors import ConfigError

TYPE_CHECKING = False  # typing (and the re it imports) costs milliseconds on the fast paths
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

HOME_ENV = "DELEGATE_HOME"
XDG_STATE_ENV = "XDG_STATE_HOME"
BUS_ENV = "DELEGATE_BUS"
CONFIG_ENV = "DELEGATE_CONFIG"
JOB_ENV = "DELEGATE_JOB_ID"
AGENT_ENV = "DELEGATE_AGENT_ID"
LOG_LEVEL_ENV = "DELEGATE_LOG_LEVEL"
TMUX_SOCKET_ENV = "DELEGATE_TMUX_SOCKET"  # which tmux server agents run on
PUBLISH_SOCKET_ENV = "DELEGATE_PUBLISH_SOCKET"  # the pane's wrapper, for publish and hook
MQTT_PREFIX_ENV = "DELEGATE_MQTT_PREFIX"
MQTT_USERNAME_ENV = "MQTT_USERNAME"
MQTT_PASSWORD_ENV = "MQTT_PASSWORD"  # noqa: S105 - a variable name
MQTT_CA_CERTS_ENV = "MQTT_CA_CERTS"
MQTT_CERTFILE_ENV = "MQTT_CERTFILE"
MQTT_KEYFILE_ENV = "MQTT_KEYFILE"
AGENT_MQTT_USERNAME_ENV = "DELEGATE_AGENT_MQTT_USERNAME"
AGENT_MQTT_PASSWORD_ENV = "DELEGATE_AGENT_MQTT_PASSWORD"  # noqa: S105 - a variable name
TMUX_TMPDIR_ENV = "TMUX_TMPDIR"
COLUMNS_ENV = "COLUMNS"
JAVA_HOME_ENV = "JAVA_HOME"
REPORT_WARM_ENV = "DELEGATE_REPORT_WARM_S"
PUBLISH_WARM_ENV = "DELEGATE_PUBLISH_WARM_S"
MCP_WARM_ENV = "DELEGATE_MCP_WARM_S"
SUPERVISOR_QUIET_ENV = "DELEGATE_SUPERVISOR_QUIET_S"
CGROUP_ROOT_ENV = "DELEGATE_CGROUP_ROOT"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
RATE_LIMIT_JITTER_ENV = "DELEGATE_RATE_LIMIT_JITTER_S"
PATH_ENV = "PATH"
# What an agent gets of its submitter's environment besides PATH (services/jobs/agent_env).
AGENT_BASE_ENV = ("HOME", "USER", "LANG", "TERM", "TZ", "SHELL")

DEFAULT_LOG_LEVEL = "WARNING"
DEFAULT_MQTT_PREFIX = "delegate"
DEFAULT_TMUX_TMPDIR = "/tmp"  # noqa: S108 - where tmux itself looks
DEFAULT_REPORT_WARM_S = 300.0
DEFAULT_PUBLISH_WARM_S = 120.0
DEFAULT_MCP_WARM_S = 600.0  # the state dir's MCP nursery (entry/mcp_nursery)
DEFAULT_SUPERVISOR_QUIET_S = 60.0  # the state dir's supervisor (runtime/supervisor)


class EnvVar:
    """One variable the toolkit reads: its name, its default (as the reference shows it, empty
    when there is none) and one line of meaning."""

    __slots__ = ("default", "meaning", "name")

    def __init__(self, name: str, default: str, meaning: str) -> None:
        self.name = name
        self.default = default
        self.meaning = meaning


ENV_VARS = (
    EnvVar(
        HOME_ENV,
        "`$XDG_STATE_HOME/delegate` on Linux, the platform's user state dir elsewhere",
        "state directory (mode 0700)",
    ),
    EnvVar(XDG_STATE_ENV, "`~/.local/state`", "on Linux, the folder the state dir is made in"),
    EnvVar(
        BUS_ENV, "`sqlite://$DELEGATE_HOME/bus.db`", "bus URL, recorded in each job at registration"
    ),
    EnvVar(
        JOB_ENV,
        "",
        "the job `publish` reports for when `--job` is absent; the default owner of locks, claims"
        " and heartbeats",
    ),
    EnvVar(
        AGENT_ENV,
        "",
        "this agent's id for locks, claims, heartbeats and messages (before the job id)",
    ),
    EnvVar(LOG_LEVEL_ENV, f"`{DEFAULT_LOG_LEVEL}`", "log level on stderr"),
    EnvVar(
        TMUX_SOCKET_ENV,
        "the default tmux server",
        "run agents on a separate tmux server (`tmux -L NAME`, or a socket path); each job records"
        " the socket path it was started on",
    ),
    EnvVar(
        CONFIG_ENV,
        "`$DELEGATE_HOME/delegate.toml`",
        "the config file with agent profiles; a file named here must exist (a missing"
        " `$DELEGATE_HOME/delegate.toml` is an empty config)",
    ),
    EnvVar(
        PUBLISH_SOCKET_ENV,
        "",
        "set by the wrapper inside a pane: the socket `publish` and `hook` hand their request to",
    ),
    EnvVar(
        MQTT_PREFIX_ENV,
        f"`{DEFAULT_MQTT_PREFIX}`",
        "MQTT topic prefix when the bus URL has no `?prefix=`",
    ),
    EnvVar(MQTT_USERNAME_ENV, "", "this side's broker login when the bus URL carries none"),
    EnvVar(MQTT_PASSWORD_ENV, "", "the password of that login"),
    EnvVar(
        MQTT_CA_CERTS_ENV, "", "CA certificates for `mqtts://` (`?ca=` wins); agents get it too"
    ),
    EnvVar(MQTT_CERTFILE_ENV, "", "client certificate for `mqtts://` (`?cert=` wins)"),
    EnvVar(MQTT_KEYFILE_ENV, "", "client key for `mqtts://` (`?key=` wins)"),
    EnvVar(
        AGENT_MQTT_USERNAME_ENV,
        "",
        "the broker login agents on MQTT get as their `MQTT_USERNAME`, unless their profile"
        " names `mqtt_credentials`",
    ),
    EnvVar(AGENT_MQTT_PASSWORD_ENV, "", "its password, the agents' `MQTT_PASSWORD`"),
    EnvVar(
        TMUX_TMPDIR_ENV,
        f"`{DEFAULT_TMUX_TMPDIR}`",
        "where tmux keeps its sockets (`tmux-UID/`), as tmux itself reads it",
    ),
    EnvVar(COLUMNS_ENV, "the terminal's width, else 80", "width of tables and help"),
    EnvVar(JAVA_HOME_ENV, "`java` on `PATH`", "the Java runtime `report` runs Spark with"),
    EnvVar(
        REPORT_WARM_ENV,
        f"`{DEFAULT_REPORT_WARM_S:g}`",
        "seconds a report's Spark stays up, idle, for the next report; `0`: not at all",
    ),
    EnvVar(
        PUBLISH_WARM_ENV,
        f"`{DEFAULT_PUBLISH_WARM_S:g}`",
        "seconds the state dir's publish server stays up, idle, for publishes no wrapper serves;"
        " `0`: not at all",
    ),
    EnvVar(
        MCP_WARM_ENV,
        f"`{DEFAULT_MCP_WARM_S:g}`",
        "seconds the state dir's MCP nursery (the MCP SDK loaded once, forked for each claude or"
        " codex job's warm `delegate mcp`) stays up, idle; `0`: each job loads the SDK itself",
    ),
    EnvVar(
        SUPERVISOR_QUIET_ENV,
        f"`{DEFAULT_SUPERVISOR_QUIET_S:g}`",
        "seconds the state dir's supervisor (started by the first command that needs it) stays"
        " up with no open job",
    ),
    EnvVar(
        CGROUP_ROOT_ENV,
        f"`{DEFAULT_CGROUP_ROOT}`",
        "where the machine's cgroups are mounted (a job's --max-memory, --max-cpus, --max-pids)",
    ),
    EnvVar(
        RATE_LIMIT_JITTER_ENV,
        "`5`",
        "at most how many seconds past its limit's reset a rate-limited attempt resumes (a random"
        " share of it, so many jobs do not resume at once)",
    ),
    EnvVar(
        PATH_ENV,
        "",
        "the agent's PATH when its profile sets no `path`; where `report` finds `java`",
    ),
    *(EnvVar(name, "", "passed on to agents") for name in AGENT_BASE_ENV),
)


def env_table() -> str:
    """The reference's table of environment variables, made from `ENV_VARS`: one row a variable,
    or one for a run of variables with the same meaning and default."""
    rows: list[tuple[list[str], str, str]] = []
    for var in ENV_VARS:
        if rows and rows[-1][1:] == (var.meaning, var.default):
            rows[-1][0].append(var.name)
        else:
            rows.append(([var.name], var.meaning, var.default))
    lines = ["| variable | meaning | default |", "| --- | --- | --- |"]
    for names, meaning, default in rows:
        cells = [", ".join(f"`{name}`" for name in names), meaning, default]
        lines.append("|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|")
    return "\n".join(lines) + "\n"


def state_home_text(env: Mapping[str, str]) -> str | None:
    """The state dir as text: `$DELEGATE_HOME`, else on Linux the XDG state folder for
    `delegate`; None elsewhere (the platform's folder comes from platformdirs, see
    layout.state_home). Plain `os.path`: the publish fast path cannot spare pathlib."""
    explicit = env.get(HOME_ENV)
    if explicit:
        return os.path.join(os.getcwd(), os.path.expanduser(explicit))
    if not sys.platform.startswith("linux"):
        return None
    xdg = env.get(XDG_STATE_ENV, "")
    base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.local/state")
    return os.path.join(os.getcwd(), base, "delegate")


def warm_s(env: Mapping[str, str]) -> float:
    """`$DELEGATE_REPORT_WARM_S` of `env`: how long a warm report server waits for the next
    report (services/warm_report); ConfigError for what is no number of seconds."""
    return _seconds(env, REPORT_WARM_ENV, DEFAULT_REPORT_WARM_S)


def publish_warm_s(env: Mapping[str, str]) -> float:
    """`$DELEGATE_PUBLISH_WARM_S` of `env`: how long the state dir's publish server waits for
    the next publish (services/jobs/warm_publish); ConfigError for what is no number of
    seconds."""
    return _seconds(env, PUBLISH_WARM_ENV, DEFAULT_PUBLISH_WARM_S)


def mcp_warm_s(env: Mapping[str, str]) -> float:
    """`$DELEGATE_MCP_WARM_S` of `env`: how long the state dir's MCP nursery waits for the next
    job (entry/mcp_nursery); ConfigError for what is no number of seconds."""
    return _seconds(env, MCP_WARM_ENV, DEFAULT_MCP_WARM_S)


def supervisor_quiet_s(env: Mapping[str, str]) -> float:
    """`$DELEGATE_SUPERVISOR_QUIET_S` of `env`: how long a started supervisor stays with no open
    job (services/supervisor); ConfigError for what is no number of seconds."""
    return _seconds(env, SUPERVISOR_QUIET_ENV, DEFAULT_SUPERVISOR_QUIET_S)


def cgroup_root(env: Mapping[str, str]) -> str:
    """`$DELEGATE_CGROUP_ROOT` of `env`: where the cgroups are mounted (adapters/cgroups)."""
    return env.get(CGROUP_ROOT_ENV, "").strip() or DEFAULT_CGROUP_ROOT


def rate_limit_jitter_s(env: Mapping[str, str]) -> float | None:
    """`$DELEGATE_RATE_LIMIT_JITTER_S` of `env`: at most how long past a rate limit's reset the
    next attempt waits (core/retry); None when unset (the core's default then); ConfigError for
    what is no number of seconds. Read by whoever makes the next attempt."""
    if not env.get(RATE_LIMIT_JITTER_ENV, "").strip():
        return None
    return _seconds(env, RATE_LIMIT_JITTER_ENV, 0.0)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):  # NaN too
        raise ConfigError(f"{name}={text!r} is not a number of seconds (0 or more)")
    return value


def process_env() -> dict[str, str]:
    """A copy of this process's environment: for `Settings`, and for a child's environment
    (which copies only what it means to pass on)."""
    return dict(os.environ)


class Settings:
    """What a process runs with, read from one environment mapping and never changed after.

    The fields are the variables code asks for by meaning; `env` keeps the whole mapping for
    what is passed on by name (a profile's `pass_env`, MQTT and tmux settings): read it, do not
    change it. Empty values count as unset.
    """

    __slots__ = (
        "agent_id",
        "bus",
        "columns",
        "config",
        "env",
        "home",
        "job_id",
        "log_level",
        "publish_socket",
        "tmux_socket",
    )

    env: dict[str, str]
    home: str | None
    bus: str | None
    config: str | None
    job_id: str | None
    agent_id: str | None
    log_level: str
    tmux_socket: str | None
    publish_socket: str | None
    columns: int | None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings of `env`, else of this process's environment (a copy)."""
        env = process_env() if env is None else dict(env)
        made = object.__new__(cls)
        columns = env.get(COLUMNS_ENV, "")
        values = {
            "env": env,
            "home": env.get(HOME_ENV) or None,
            "bus": env.get(BUS_ENV) or None,
            "config": env.get(CONFIG_ENV) or None,
            "job_id": env.get(JOB_ENV) or None,
            "agent_id": env.get(AGENT_ENV) or None,
            "log_level": env.get(LOG_LEVEL_ENV) or DEFAULT_LOG_LEVEL,
            "tmux_socket": env.get(TMUX_SOCKET_ENV) or None,
            "publish_socket": env.get(PUBLISH_SOCKET_ENV) or None,
            "columns": int(columns) if columns.isdigit() and int(columns) > 0 else None,
        }
        for name, value in values.items():
            object.__setattr__(made, name, value)
        return made

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Settings are frozen; cannot set {name}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Settings are frozen; cannot delete {name}")

    def __repr__(self) -> str:
        return f"Settings(home={self.home!r}, bus={self.bus!r}, job_id={self.job_id!r})"


_current: Settings | None = None
_built_from: dict[Any, Any] = {}  # the environment `_current` was built from


def _environ_raw() -> Mapping[Any, Any]:
    """The process environment as it is cheapest to compare: os.environ keeps its raw bytes in
    `_data` (CPython), which compares in under a microsecond; os.environ itself takes ~40 us
    (it decodes every entry)."""
    raw = getattr(os.environ, "_data", None)
    return raw if isinstance(raw, dict) else os.environ


def settings() -> Settings:
    """This process's Settings, built on first use.

    Built again only when the environment is no longer the one it was built from: nothing in
    the toolkit changes its own environment, but tests that run commands in-process do.
    """
    global _current, _built_from
    now = _environ_raw()
    if _current is None or _built_from != now:
        _built_from = dict(now)
        _current = Settings.from_env()
    return _current


def become(env: Mapping[str, str]) -> None:
    """Make `env` this process's whole environment: a process forked to run as another's (the
    MCP nursery's zygotes, each in its agent's environment)."""
    os.environ.clear()
    os.environ.update(env)
