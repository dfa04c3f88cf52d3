"""Agent profiles: how to start an agent, how it gets its prompt, what a clean exit means.

Built in: `shell` (the prompt is a bash script), `claude`, `codex`. More come from the
`[profiles.NAME]` tables of `delegate.toml`:

    [profiles.aider]
    command = ["aider", "--yes", "--message-file", "{prompt_file}"]
    prompt = "file"            # or "stdin"
    clean_exit = "completed"   # or "error": what exit status 0 without a report means
    preamble = true            # prepend the reporting instructions (skills/delegate-job)
    max_running = 2            # at most this many jobs of this profile run at once
    env = { AIDER_MODEL = "sonnet" }   # set in the agent's environment
    pass_env = ["ANTHROPIC_API_KEY"]   # copied from the submitter's environment when set
    path = ["/opt/aider/bin", "/usr/bin", "/bin"]   # the agent's PATH (default: the submitter's)
    mqtt_credentials = "~/.config/delegate/agent-mqtt.toml"   # the agent's own broker login
    run_as = "agent"           # start the agent as this OS user (needs root)
    worktree = true            # each job gets its own git worktree (as `submit --worktree`)
    stop = { signal = "SIGINT" }   # how `session stop --mode graceful` asks the agent first:
                                   # or { keys = ["C-c"] }, or { command = "/exit" } (typed)

A table without `command` on a built-in profile's name extends it: `[profiles.claude]` with
`env`, `pass_env`, `path`, `run_as`, caps, and the CLI's own permission settings,
`permission_mode` and `allowed_tools` (Claude Code) or `agent_sandbox` (Codex:
"read-only", "workspace-write" (its built-in setting) or "danger-full-access"):

    [profiles.claude]
    env = { ANTHROPIC_BASE_URL = "https://gateway.example/anthropic" }
    pass_env = ["ANTHROPIC_API_KEY"]

A table with `command` replaces the built-in profile. A top-level `max_running = N` caps all
jobs, `[worktree]` sets `default = true` (every job in its own worktree), `keep_max_gb` and
`keep_days` (worktrees over them are reported), and `[notify]` names a notifier:

    [notify]
    command = ["notify-send", "delegate"]                  # argv; the event JSON on stdin
    events = ["permission_required", "completed", "error"] # the default

Placeholders `{prompt_file}`, `{workdir}` and `{job_id}` are replaced inside argument-vector
elements; nothing is ever run through a shell except a `--cmd` the user wrote as shell text.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import (milliseconds of every fast path).

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

from delegate.config.settings import CONFIG_ENV, settings
from delegate.config.tomlfile import checked_table, read_toml
from delegate.core.caps import Caps
from delegate.core.errors import ConfigError, UsageError
from delegate.core.sandbox import NETWORKS

CONFIG_FILE = "delegate.toml"  # in the state directory, unless DELEGATE_CONFIG names another
PROMPT_MODES = ("stdin", "file")
CLEAN_EXIT = ("completed", "error")
NOTIFY_EVENTS_DEFAULT = ("permission_required", "completed", "error")


class Profile(NamedTuple):
    name: str
    command: tuple[str, ...]
    prompt: str = "stdin"
    clean_exit: str = "completed"
    preamble: bool = False
    env: tuple[tuple[str, str], ...] = ()
    pass_env: tuple[str, ...] = ()
    path: tuple[str, ...] | None = None
    mqtt_credentials: str | None = None
    run_as: str | None = None  # the OS user the agent runs as (the wrapper needs root for it)
    channel: str = "none"  # claude-stream, codex-json: the agent's own structured output
    resume: tuple[str, ...] | None = None  # the command that continues {conversation_id}
    shell_text: bool = False  # a `--cmd`: its first word is resolved only when it is a command
    # `requeue`: a job whose pane, tmux server or host vanished is queued again (core/retry)
    on_interrupt: str | None = None
    # Claude Code's own permission settings (`--permission-mode`, `--allowedTools`): what it
    # runs without asking; everything else is gated by our PreToolUse hook (approvals).
    permission_mode: str | None = None
    allowed_tools: tuple[str, ...] = ()
    # Codex's own sandbox (`sandbox_mode`): read-only cannot edit the workdir.
    agent_sandbox: str | None = None
    # Our sandbox (bubblewrap, core/sandbox) around the agent and all it starts; None: as
    # `[sandbox] default` says
    sandbox: bool | None = None
    # its sandbox's network ("none", "allowlist", "host"); None: as `[sandbox] network` says
    network: str | None = None

    def argv(
        self,
        *,
        prompt_file: Path,
        workdir: Path,
        job_id: str,
        settings_file: Path | None = None,
        conversation_id: str | None = None,
        in_repository: bool = True,
    ) -> list[str]:
        """The command with its placeholders filled; with `conversation_id`, the `resume`
        command instead (the caller checks there is one). A claude or codex channel gets the
        options of its permission settings (`agent_options`)."""
        values = {
            "prompt_file": str(prompt_file),
            "workdir": str(workdir),
            "job_id": job_id,
            "settings_file": str(settings_file or ""),
            "conversation_id": conversation_id or "",
        }
        command = self.resume if conversation_id and self.resume else self.command
        out = []
        for part in command:
            for key, value in values.items():
                part = part.replace("{" + key + "}", value)
            out.append(part)
        return self.agent_options(out, in_repository)

    def agent_options(self, argv: list[str], in_repository: bool) -> list[str]:
        """`argv` with the CLI's own permission options. Claude: `--permission-mode`,
        `--allowedTools` (as `--flag=value`: an option's value is never a word of its own).
        Codex: its sandbox and the configuration that keeps it from waiting forever, both as
        `-c` overrides right after `exec` (`codex exec resume` takes no `--sandbox`), and
        `--skip-git-repo-check` outside a repository (codex refuses to start there)."""
        if self.channel == "claude-stream":
            extra = []
            if self.permission_mode:
                extra.append(f"--permission-mode={self.permission_mode}")
            if self.allowed_tools:
                extra.append("--allowedTools=" + ",".join(self.allowed_tools))
            return [*argv, *extra]
        if self.channel == "codex-json" and argv[1:2] == ["exec"]:
            overrides = list(CODEX_BOUNDED)
            if self.agent_sandbox:
                overrides.append(f'sandbox_mode="{self.agent_sandbox}"')
            options = [word for o in overrides for word in ("-c", o)]
            if not in_repository:
                options.append("--skip-git-repo-check")
            return [*argv[:2], *options, *argv[2:]]
        return argv


# Codex retries a lost server forever unless told otherwise: a job must end within its timeouts.
CODEX_BOUNDED = ("features.unbounded_connection_retries=false",)
# Claude Code 2.1.197's `--permission-mode` choices.
PERMISSION_MODES = ("default", "acceptEdits", "auto", "plan", "bypassPermissions", "dontAsk")
AGENT_SANDBOXES = ("read-only", "workspace-write", "danger-full-access")

# Where each CLI finds its key and its server when they are not in its own config files.
CLAUDE_PASS_ENV = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CONFIG_DIR",
)
CODEX_PASS_ENV = ("OPENAI_API_KEY", "CODEX_HOME")
_CLAUDE_STREAM = ("--output-format", "stream-json", "--verbose", "--settings", "{settings_file}")
BUILTIN: dict[str, Profile] = {
    "shell": Profile("shell", ("bash", "{prompt_file}"), prompt="file"),
    "claude": Profile(
        "claude",
        ("claude", "-p", *_CLAUDE_STREAM),
        prompt="stdin",
        preamble=True,
        channel="claude-stream",
        # the id as the flag's own value (`--resume=ID`), and after `--` for codex: checked as it
        # entered (core/protocol), and never able to be read as a flag besides
        resume=("claude", "-p", "--resume={conversation_id}", *_CLAUDE_STREAM),
        pass_env=CLAUDE_PASS_ENV,
    ),
    "codex": Profile(
        "codex",
        ("codex", "exec", "--json", "-"),
        prompt="stdin",
        preamble=True,
        channel="codex-json",
        resume=("codex", "exec", "--json", "resume", "--", "{conversation_id}", "-"),
        agent_sandbox="workspace-write",  # its default, read-only, cannot do the work
        pass_env=CODEX_PASS_ENV,
    ),
}


def one_off(cmd: str) -> Profile:
    """`--cmd`: the user's own shell text; the prompt arrives on its stdin."""
    if not cmd.strip():
        raise UsageError("--cmd is empty")
    return Profile("cmd", ("/bin/sh", "-c", cmd), prompt="stdin", shell_text=True)


def config_path(home: Path, env: Mapping[str, str] | None = None) -> Path:
    """`$DELEGATE_CONFIG`, else `$DELEGATE_HOME/delegate.toml`.

    A missing file at the default place is an empty configuration; a file named by
    DELEGATE_CONFIG must be there and readable (a typo there would otherwise silently drop
    every profile, cap and notifier): ConfigError (exit 64) when it is not.
    """
    env = settings().env if env is None else env
    explicit = env.get(CONFIG_ENV)
    if not explicit:
        return home / CONFIG_FILE
    path = Path(explicit).expanduser()
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        raise ConfigError(f"{CONFIG_ENV} names {path}, which does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"{CONFIG_ENV} names {path}, which is a folder, not a file") from None
    except OSError as exc:
        raise ConfigError(
            f"{CONFIG_ENV} names {path}, which cannot be read ({exc.strerror})"
        ) from None
    return path


def load_config(path: Path) -> dict[str, Any]:
    """The tables of the config file at `path`; a missing file is an empty configuration."""
    return read_toml(path, missing_ok=True)


class ConfigFile(NamedTuple):
    path: Path  # named in error messages about the file's tables
    tables: dict[str, Any]


def read_config(home: Path, env: Mapping[str, str] | None = None) -> ConfigFile:
    """The configuration of the state directory `home`: where it is (`config_path`) and what
    it says (`load_config`), the one way services read delegate.toml."""
    path = config_path(home, env)
    return ConfigFile(path, load_config(path))


_PROFILE_KEYS = frozenset(
    {
        "command",
        "prompt",
        "clean_exit",
        "preamble",
        "max_running",
        "env",
        "pass_env",
        "path",
        "mqtt_credentials",
        "run_as",
        "stop",
        "channel",
        "resume",
        "worktree",
        "on_interrupt",
        "permission_mode",
        "allowed_tools",
        "agent_sandbox",
        "sandbox",
        "network",
    }
)
# What a table without `command` may say of a built-in profile: it extends it. How the agent
# is started, fed and read (command, prompt, channel, resume) needs a command of your own.
_SHAPE_KEYS = frozenset({"prompt", "channel", "resume", "clean_exit"})
_CHANNELS = ("none", "claude-stream", "codex-json")


def _profile_from_table(name: str, table: object, source: Path) -> Profile:
    where = f"{source} [profiles.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - _PROFILE_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    _cap(table.get("max_running"), where)
    if not isinstance(table.get("worktree", False), bool):
        raise ConfigError(f"{where}: worktree must be true or false")
    if name in BUILTIN and "command" not in table:
        return _extended(BUILTIN[name], table, where)
    command = _command(table.get("command"), where)
    prompt = _one_of(table, "prompt", "stdin", PROMPT_MODES, where)
    clean_exit = _one_of(table, "clean_exit", "completed", CLEAN_EXIT, where)
    preamble = table.get("preamble", True)
    if not isinstance(preamble, bool):
        raise ConfigError(f"{where}: preamble must be true or false")
    env, pass_env, path = _environment(table, where)
    credentials = table.get("mqtt_credentials")
    if credentials is not None and not isinstance(credentials, str):
        raise ConfigError(f"{where}: mqtt_credentials must be the path of a file")
    _check_stop(table.get("stop", {}), where)
    channel = table.get("channel", "none")
    if channel not in _CHANNELS:
        raise ConfigError(f"{where}: channel must be none, claude-stream or codex-json")
    resume = _resume(table.get("resume"), where)
    on_interrupt = table.get("on_interrupt")
    if on_interrupt is not None and on_interrupt not in ("fail", "requeue"):
        raise ConfigError(f"{where}: on_interrupt must be fail or requeue")
    run_as = _run_as(table, where)
    return Profile(
        name,
        tuple(command),
        prompt,
        clean_exit,
        preamble,
        env=tuple(sorted(env.items())),
        pass_env=tuple(pass_env),
        path=tuple(path) if path is not None else None,
        mqtt_credentials=credentials,
        run_as=run_as,
        channel=channel,
        resume=tuple(resume) if resume else None,
        on_interrupt=on_interrupt,
        **_agent_permissions(table, where),
    )


def _run_as(table: dict[str, Any], where: str) -> str | None:
    run_as = table.get("run_as")
    if run_as is not None and (not isinstance(run_as, str) or not run_as):
        raise ConfigError(f"{where}: run_as must be a user name")
    return run_as


def _agent_permissions(table: dict[str, Any], where: str) -> dict[str, Any]:
    """`permission_mode`, `allowed_tools`, `agent_sandbox`, `sandbox`, `network`, as given
    (absent ones left out)."""
    found: dict[str, Any] = {}
    if "permission_mode" in table:
        found["permission_mode"] = _one_of(table, "permission_mode", "", PERMISSION_MODES, where)
    if "allowed_tools" in table:
        tools = table["allowed_tools"]
        if not isinstance(tools, list) or not all(
            isinstance(t, str) and t and not t.startswith("-") and "," not in t for t in tools
        ):
            raise ConfigError(f'{where}: allowed_tools must be a list of tool names ("Bash")')
        found["allowed_tools"] = tuple(tools)
    if "agent_sandbox" in table:
        found["agent_sandbox"] = _one_of(table, "agent_sandbox", "", AGENT_SANDBOXES, where)
    if "sandbox" in table:
        if not isinstance(table["sandbox"], bool):
            raise ConfigError(f"{where}: sandbox must be true or false")
        found["sandbox"] = table["sandbox"]
    if "network" in table:
        found["network"] = _one_of(table, "network", "", NETWORKS, where)
    return found


def _extended(base: Profile, table: dict[str, Any], where: str) -> Profile:
    """A built-in profile with what a table without `command` adds: its environment, user,
    caps and permission settings. `env` and `pass_env` add to the built-in's."""
    shape = table.keys() & _SHAPE_KEYS
    if shape:
        raise ConfigError(
            f"{where}: {', '.join(sorted(shape))} change how {base.name} is started;"
            f" give a command = [...] of your own to replace the built-in profile"
        )
    env, pass_env, path = _environment(table, where)
    credentials = table.get("mqtt_credentials", base.mqtt_credentials)
    if credentials is not None and not isinstance(credentials, str):
        raise ConfigError(f"{where}: mqtt_credentials must be the path of a file")
    _check_stop(table.get("stop", {}), where)
    preamble = table.get("preamble", base.preamble)
    if not isinstance(preamble, bool):
        raise ConfigError(f"{where}: preamble must be true or false")
    on_interrupt = table.get("on_interrupt", base.on_interrupt)
    if on_interrupt is not None and on_interrupt not in ("fail", "requeue"):
        raise ConfigError(f"{where}: on_interrupt must be fail or requeue")
    return base._replace(
        env=tuple(sorted({**dict(base.env), **env}.items())),
        pass_env=tuple(dict.fromkeys([*base.pass_env, *pass_env])),
        path=tuple(path) if path is not None else base.path,
        mqtt_credentials=credentials,
        run_as=_run_as(table, where) or base.run_as,
        preamble=preamble,
        on_interrupt=on_interrupt,
        **_agent_permissions(table, where),
    )


def _is_words(value: object) -> TypeGuard[list[str]]:
    """A non-empty list of strings: an argument vector."""
    return isinstance(value, list) and bool(value) and all(isinstance(c, str) for c in value)


def _command(command: object, where: str) -> list[str]:
    if isinstance(command, str):
        command = shlex.split(command)  # split like a shell would, but never run by one
    if _is_words(command):
        return command
    raise ConfigError(f"{where}: command must be a non-empty list of strings")


def _one_of(
    table: dict[str, Any], key: str, default: str, allowed: tuple[str, ...], where: str
) -> str:
    value = table.get(key, default)
    if value not in allowed:
        raise ConfigError(f"{where}: {key} must be one of {', '.join(allowed)}")
    return str(value)


def _environment(
    table: dict[str, Any], where: str
) -> tuple[dict[str, str], list[str], list[str] | None]:
    """`env`, `pass_env` and `path`: what the agent's environment holds."""
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        raise ConfigError(f"{where}: env must be a table of strings")
    pass_env = table.get("pass_env", [])
    if not isinstance(pass_env, list) or not all(isinstance(v, str) for v in pass_env):
        raise ConfigError(f"{where}: pass_env must be a list of variable names")
    path = table.get("path")
    if isinstance(path, str):
        path = path.split(os.pathsep)
    if path is not None and (
        not isinstance(path, list) or not all(isinstance(p, str) and p for p in path)
    ):
        raise ConfigError(f"{where}: path must be a list of folders (or a PATH string)")
    return env, pass_env, path


def _check_stop(stop: object, where: str) -> None:
    """`stop`: at most one of a signal, keys to send, or a command to type."""
    if (
        not isinstance(stop, dict)
        or len(stop) > 1
        or set(stop) - {"signal", "keys", "command"}
        or ("keys" in stop and not isinstance(stop["keys"], list))
    ):
        raise ConfigError(
            f'{where}: stop must be one of {{ signal = "SIGINT" }}, {{ keys = ["C-c"] }}'
            ' or { command = "/exit" }'
        )


def _resume(resume: object, where: str) -> list[str] | None:
    if resume is None or _is_words(resume):
        return resume
    raise ConfigError(f"{where}: resume must be a command list with {{conversation_id}}")


def _cap(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: max_running must be a positive integer")
    return value


def max_running_caps(config: Mapping[str, Any]) -> Caps:
    """The concurrency caps of delegate.toml: `max_running` at the top and per profile."""
    per_agent = {}
    tables = config.get("profiles", {})
    if isinstance(tables, dict):
        for name, table in tables.items():
            if isinstance(table, dict):
                cap = _cap(table.get("max_running"), f"[profiles.{name}]")
                if cap is not None:
                    per_agent[name] = cap
    return Caps(total=_cap(config.get("max_running"), "delegate.toml"), per_agent=per_agent)


def lost_after_s(config: Mapping[str, Any]) -> float | None:
    """`[monitor] lost_after_s`: how long a job's tmux server may stay unseen (its socket
    gone astray, tmux not answering) before the job ends `lost`; None when not set."""
    table = config.get("monitor", {})
    if not isinstance(table, dict) or "lost_after_s" not in table:
        return None
    value = table["lost_after_s"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError("[monitor]: lost_after_s must be a number of seconds, 0 or more")
    return float(value)


DISPOSABLE = ("node_modules", ".venv", "__pycache__", "target", "dist", "build", ".cache")


class WorktreeConfig(NamedTuple):
    """`[worktree]` of delegate.toml, and `worktree = true|false` of a profile."""

    default: bool = False
    per_profile: tuple[tuple[str, bool], ...] = ()
    keep_max_gb: float | None = None  # the monitor and doctor report worktrees over these
    keep_days: float | None = None
    # ignored folders a build makes again: they do not keep a worktree from `clean`
    disposable: tuple[str, ...] = DISPOSABLE

    def wanted(self, profile: str) -> bool:
        """Whether a job of `profile` gets its own worktree when submit does not say."""
        return dict(self.per_profile).get(profile, self.default)


def worktree_config(config: Mapping[str, Any], source: Path) -> WorktreeConfig:
    table = config.get("worktree", {})
    where = f"{source} [worktree]"
    table = checked_table(table, where, {"default", "keep_max_gb", "keep_days", "disposable"})
    default = table.get("default", False)
    if not isinstance(default, bool):
        raise ConfigError(f"{where}: default must be true or false")
    limits = []
    for key in ("keep_max_gb", "keep_days"):
        value = table.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ConfigError(f"{where}: {key} must be a number")
        limits.append(None if value is None else float(value))
    per_profile = []
    tables = config.get("profiles", {})
    for name, profile in tables.items() if isinstance(tables, dict) else ():
        if isinstance(profile, dict) and isinstance(profile.get("worktree"), bool):
            per_profile.append((name, profile["worktree"]))
    disposable = table.get("disposable", list(DISPOSABLE))
    if not isinstance(disposable, list) or not all(
        isinstance(name, str) and name and "/" not in name for name in disposable
    ):
        raise ConfigError(f"{where}: disposable must be a list of folder names")
    return WorktreeConfig(default, tuple(per_profile), limits[0], limits[1], tuple(disposable))


def notifier(config: Mapping[str, Any], source: Path) -> tuple[list[str], tuple[str, ...]] | None:
    """`[notify]`: the notifier argv and the events it hears, or None when there is none."""
    table = config.get("notify")
    if table is None:
        return None
    where = f"{source} [notify]"
    table = checked_table(table, where, {"command", "events"})
    command = table.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        raise ConfigError(f"{where}: command must be a non-empty list of strings (an argv)")
    events = table.get("events", list(NOTIFY_EVENTS_DEFAULT))
    known = ("started", "progress", "permission_required", "completed", "error")
    if not isinstance(events, list) or not all(e in known for e in events):
        raise ConfigError(f"{where}: events must be a list of {', '.join(known)}")
    return list(command), tuple(events)


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


MAX_SUB_JOBS = 8


class SubJobRules(NamedTuple):
    """`[mcp]` of delegate.toml: what an agent's sub-jobs (`job_submit`) may be. `sub_jobs`:
    "same" (its own profile only, no shell command) or "any"; at most `max_sub_jobs` open at
    once per parent; `detach`: whether a sub-job may ask to outlive its parent's end."""

    sub_jobs: str = "same"
    max_sub_jobs: int = MAX_SUB_JOBS
    detach: bool = False


def sub_job_rules(config: Mapping[str, Any], source: Path) -> SubJobRules:
    where = f"{source} [mcp]"
    table = checked_table(config.get("mcp", {}), where, {"sub_jobs", "max_sub_jobs", "detach"})
    kind = _one_of(table, "sub_jobs", "same", ("same", "any"), where)
    most = table.get("max_sub_jobs", MAX_SUB_JOBS)
    if isinstance(most, bool) or not isinstance(most, int) or most < 0:
        raise ConfigError(f"{where}: max_sub_jobs must be a whole number, 0 or more")
    detach = table.get("detach", False)
    if not isinstance(detach, bool):
        raise ConfigError(f"{where}: detach must be true or false")
    return SubJobRules(kind, most, detach)
