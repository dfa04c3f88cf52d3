"""The generated parts of the documentation site, made from the code so they cannot drift.

- the command reference: every command's `--help`, walked from `delegate.cli.app.full_command()`
  and rendered with click's plain formatter at a fixed width (never rich: the text is the same
  whatever the terminal);
- the environment variables: `delegate.config.settings.env_table()`, the table the code keeps;
- the `delegate.toml` keys, their defaults read from the code's own default values.

The docs hook (`docs/hooks/generated.py`) puts them into the pages at build time, in place of
the markers `<!-- generated: NAME -->`; nothing generated is committed. `config_keys_checked()`
reads the key sets the readers in `delegate/config/` accept (with `ast`) and fails when one of
them is not documented here: a new key needs a row in `TOML` below.

    python scripts/gen_docs.py --out DIR    # writes commands.md and configuration.md into DIR
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import click

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 100  # the help's width, fixed: the same page on every machine


# --- the command reference ------------------------------------------------------------------


def walk(
    command: click.Command, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every command under `command` (itself first), with its path of names, in the order the
    CLI lists them."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=" ".join(path))
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, (*path, name))


def command_tree() -> click.Command:
    """The whole `delegate` command tree, every command built."""
    from delegate.cli.app import full_command  # the typer app: only when asked for

    return full_command()


def plain_help(command: click.Command, path: tuple[str, ...]) -> str:
    """`command`'s help as click formats it, without rich, at `WIDTH` columns."""
    parent = None
    for depth in range(1, len(path)):
        parent = click.Context(
            click.Group(path[depth - 1]), info_name=path[depth - 1], parent=parent
        )
    ctx = click.Context(
        command,
        info_name=path[-1],
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
    )
    formatter = click.HelpFormatter(width=WIDTH, max_width=WIDTH)
    # click's own format_help: typer's override would draw rich panels
    click.Command.format_help(command, ctx, formatter)
    # typer escapes a `[` its rich markup would read (`\\[default: 10]`); plain text needs none
    return formatter.getvalue().replace("\\[", "[").rstrip() + "\n"


def commands_markdown() -> str:
    """The command reference: an index, then one section per command with its help."""
    tree = list(walk(command_tree(), ("delegate",)))
    lines = ["| command | what it does |", "| --- | --- |"]
    for path, command in tree[1:]:
        summary = command.get_short_help_str(limit=90).replace("|", "\\|")
        lines.append(f"| [`{' '.join(path)}`](#{anchor(path)}) | {summary} |")
    lines.append("")
    for path, command in tree:
        depth = min(len(path) + 1, 5)  # under the page's "## Every command"
        lines.append(f"{'#' * (depth + 1)} `{' '.join(path)}` {{ #{anchor(path)} }}")
        lines.append("")
        lines.append("```text")
        lines.append(plain_help(command, path).rstrip())
        lines.append("```")
        lines.append("")
    return "\n".join(lines)


def anchor(path: tuple[str, ...]) -> str:
    return "-".join(path)


# --- the configuration reference ------------------------------------------------------------


class Key(NamedTuple):
    table: str  # "" for the top level
    key: str
    default: str
    meaning: str


def _toml_keys() -> list[Key]:
    """Every key of delegate.toml, its default read from the code where the code has one."""
    from delegate.config.budget import RATE_LIMIT_MAX_WAIT_S
    from delegate.config.profiles import (
        AGENT_SANDBOXES,
        NOTIFY_EVENTS_DEFAULT,
        PERMISSION_MODES,
        PROMPT_MODES,
        Profile,
        SubJobRules,
        WorktreeConfig,
    )
    from delegate.config.sandbox import SandboxSettings
    from delegate.coord.heartbeats import Thresholds
    from delegate.core.approvals import BEHAVIOURS, ApprovalSettings, Rule
    from delegate.core.policy import DEFAULT_LOST_AFTER_S
    from delegate.core.sandbox import NETWORKS

    profile, sandbox, worktree = Profile("x", ()), SandboxSettings(), WorktreeConfig()
    rules, approvals, beats = SubJobRules(), ApprovalSettings(), Thresholds()
    rule_match = Rule._field_defaults.get("match", "*")  # NamedTuple's defaults
    P = "profiles.NAME"
    return [
        Key("", "max_running", "none", "at most this many jobs run at once; more wait queued"),
        Key(
            P,
            "command",
            "",
            "the agent's argv (a list, or a string split as a shell would);"
            " `{prompt_file}`, `{workdir}`, `{job_id}` are filled in; without it a table on a"
            " built-in profile's name extends that profile",
        ),
        Key(
            P,
            "prompt",
            code(profile.prompt),
            f"how the prompt reaches the agent: {either(PROMPT_MODES)}",
        ),
        Key(
            P,
            "clean_exit",
            code(profile.clean_exit),
            "what exit status 0 without a report means: `completed` or `error`",
        ),
        Key(
            P,
            "preamble",
            "`true` for a profile of your own",
            "prepend the reporting instructions of `skills/delegate-job/SKILL.md` to the prompt",
        ),
        Key(P, "max_running", "none", "at most this many jobs of this profile run at once"),
        Key(P, "env", "`{}`", "variables set in the agent's environment"),
        Key(P, "pass_env", "`[]`", "variables copied from the submitter's environment when set"),
        Key(P, "path", "the submitter's `PATH`", "the agent's `PATH` (a list of folders)"),
        Key(
            P,
            "mqtt_credentials",
            "",
            "a 0600 TOML file with the agent's own broker `username` and `password`",
        ),
        Key(P, "run_as", "", "start the agent as this OS user (the wrapper runs as root)"),
        Key(
            P,
            "stop",
            '`{ signal = "SIGINT" }`',
            "how `session stop --mode graceful` asks the"
            ' agent first: `{ signal = ... }`, `{ keys = ["C-c"] }` or `{ command = "/exit" }`',
        ),
        Key(
            P,
            "channel",
            code(profile.channel),
            "the agent's structured output: `none`, `claude-stream` or `codex-json`",
        ),
        Key(
            P,
            "resume",
            "",
            "the command that continues a conversation, with"
            " `{conversation_id}` (and `{settings_file}`)",
        ),
        Key(P, "worktree", "as `[worktree] default`", "each job in its own git worktree"),
        Key(
            P,
            "on_interrupt",
            "`fail`",
            "`requeue`: a job whose pane, tmux server or host vanished gets a new attempt",
        ),
        Key(
            P,
            "permission_mode",
            "Claude Code's own",
            f"Claude Code's `--permission-mode`: {either(PERMISSION_MODES)}",
        ),
        Key(
            P,
            "allowed_tools",
            "`[]`",
            "Claude Code's `--allowedTools`: tools it runs without asking",
        ),
        Key(
            P,
            "agent_sandbox",
            "`workspace-write` (codex)",
            f"Codex's own sandbox: {either(AGENT_SANDBOXES)}",
        ),
        Key(P, "sandbox", "as `[sandbox] default`", "run the agent in delegate's bubblewrap box"),
        Key(P, "network", "as `[sandbox] network`", f"its box's network: {either(NETWORKS)}"),
        Key("worktree", "default", code(worktree.default), "every job in its own worktree"),
        Key(
            "worktree",
            "keep_max_gb",
            "none",
            "`doctor` and the monitor warn when worktrees take more",
        ),
        Key("worktree", "keep_days", "none", "`doctor` and the monitor warn about older worktrees"),
        Key(
            "worktree",
            "disposable",
            code(list(worktree.disposable)),
            "ignored folders a"
            " build makes again: they do not keep a worktree from `worktree clean`",
        ),
        Key("notify", "command", "", "the notifier's argv; the event's JSON on its stdin"),
        Key("notify", "events", code(list(NOTIFY_EVENTS_DEFAULT)), "the events it hears"),
        Key(
            "approvals",
            "timeout",
            code(approvals.timeout_s),
            "seconds a permission request waits for a person",
        ),
        Key(
            "approvals",
            "on_timeout",
            code(approvals.on_timeout),
            f"what the wait ending gives: {either(BEHAVIOURS)}",
        ),
        Key(
            "approvals",
            "rules",
            "`[]`",
            "`[[approvals.rules]]`: requests decided without a person, the first match wins",
        ),
        Key("[approvals.rules]", "tool", "", "a tool name or glob"),
        Key(
            "[approvals.rules]",
            "match",
            code(rule_match),
            "a glob over each simple command of"
            " a Bash call, a file tool's resolved path, or the input",
        ),
        Key("[approvals.rules]", "decision", "", either(BEHAVIOURS)),
        Key("budget", "max_cost", "none", "USD a job may spend"),
        Key("budget", "max_tokens", "none", "tokens a job may use"),
        Key(
            "budget",
            "profiles",
            "",
            "`[budget.profiles.NAME]`: a profile's own `max_cost`"
            " and `max_tokens`, over the defaults",
        ),
        Key(
            "prices.MODEL",
            "input",
            "",
            "USD per million input tokens, for an agent that reports no cost",
        ),
        Key("prices.MODEL", "output", "", "USD per million output tokens"),
        Key(
            "rate_limit",
            "max_wait",
            code(RATE_LIMIT_MAX_WAIT_S),
            "seconds: a rate-limited attempt resumes only when its limit resets within this",
        ),
        Key("limits", "max_memory", "none", "memory a job's process tree may hold (`512M`, `4G`)"),
        Key("limits", "max_cpus", "none", "cores its process tree may use (`0.5`, `2`)"),
        Key("limits", "max_pids", "none", "processes and threads it may have at once"),
        Key(
            "limits",
            "profiles",
            "",
            "`[limits.profiles.NAME]`: a profile's own limits, over the defaults",
        ),
        Key(
            "limits",
            "groups",
            "",
            "`[limits.groups.NAME]`: a queue group's own limits (`submit --group NAME`), over"
            " its profile's and the defaults",
        ),
        Key(
            "sandbox",
            "default",
            code(sandbox.default),
            "every job in the box unless its profile or `--no-sandbox` says not",
        ),
        Key(
            "sandbox",
            "read",
            code(list(sandbox.read)),
            "paths (absolute or `~/...`) readable inside",
        ),
        Key("sandbox", "write", code(list(sandbox.write)), "paths writable inside"),
        Key("sandbox", "network", code(sandbox.network), f"{either(NETWORKS)}"),
        Key(
            "sandbox",
            "allow_hosts",
            code(list(sandbox.allow_hosts)),
            "hosts the allowlist"
            " proxy lets through (`*.domain` for any name below it), besides the profile's own"
            " API hosts",
        ),
        Key(
            "monitor",
            "lost_after_s",
            code(DEFAULT_LOST_AFTER_S),
            "seconds a job's tmux server may stay unseen before the job ends `lost`",
        ),
        Key(
            "heartbeat",
            "warn",
            code(beats.warn_ms / 1000),
            "seconds from which a heartbeat is WARN",
        ),
        Key("heartbeat", "stale", code(beats.stale_ms / 1000), "STALE"),
        Key("heartbeat", "dead", code(beats.dead_ms / 1000), "DEAD"),
        Key(
            "mcp",
            "sub_jobs",
            code(rules.sub_jobs),
            "what an agent's sub-jobs may be: `same` (its own profile, no shell command) or `any`",
        ),
        Key("mcp", "max_sub_jobs", code(rules.max_sub_jobs), "sub-jobs open at once per parent"),
        Key("mcp", "detach", code(rules.detach), "whether a sub-job may ask to outlive its parent"),
    ]


def code(value: object) -> str:
    """A default as TOML would spell it, in backquotes."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    elif isinstance(value, str):
        text = value
    elif isinstance(value, list):
        text = "[" + ", ".join(f'"{v}"' for v in value) + "]"
    else:
        text = str(value)
    return f"`{text}`"


def either(values: tuple[str, ...]) -> str:
    return ", ".join(f"`{v}`" for v in values)


# Strings in the readers' key sets that are no key of their own table.
_NOT_KEYS = {
    "signal",
    "keys",  # `stop = { signal | keys | command }`
}


def accepted_keys() -> set[str]:
    """Every string the readers in delegate/config/ list in a set of keys (a set literal, or
    `frozenset({...})`): what delegate.toml may say."""
    found: set[str] = set()
    for module in sorted((ROOT / "delegate" / "config").glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Set) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts
            ):
                found.update(e.value for e in node.elts if isinstance(e, ast.Constant))
    return found


def config_keys_checked() -> list[Key]:
    """The documented keys, after checking that every key the code accepts is among them;
    ValueError naming the ones that are not."""
    keys = _toml_keys()
    documented = {k.key for k in keys}
    missing = accepted_keys() - documented - _NOT_KEYS
    if missing:
        raise ValueError(
            "delegate.toml keys the code reads but the configuration reference does not"
            f" document: {', '.join(sorted(missing))} (add them to TOML in scripts/gen_docs.py)"
        )
    return keys


def toml_markdown() -> str:
    """The delegate.toml reference: one table per TOML table."""
    out: list[str] = []
    tables: dict[str, list[Key]] = {}
    for key in config_keys_checked():
        tables.setdefault(key.table, []).append(key)
    for table, keys in tables.items():
        title = f"`[{table}]`" if table else "the top level"
        out += [f"### {title}", "", "| key | default | meaning |", "| --- | --- | --- |"]
        out += [f"| `{k.key}` | {k.default} | {k.meaning} |" for k in keys]
        out.append("")
    return "\n".join(out)


def env_markdown() -> str:
    from delegate.config.settings import env_table

    return env_table()


def architecture_markdown() -> str:
    """ARCHITECTURE.md without its title (the page has its own)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    return text.split("\n", 1)[1].lstrip("\n") if text.startswith("# ") else text


GENERATED = {
    "architecture": architecture_markdown,
    "commands": commands_markdown,
    "environment": env_markdown,
    "toml": toml_markdown,
}


def fill(markdown: str) -> str:
    """`markdown` with each `<!-- generated: NAME -->` marker replaced by its text."""
    for name, make in GENERATED.items():
        marker = f"<!-- generated: {name} -->"
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the generated pages")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for page in ("commands", "configuration"):
        source = ROOT / "docs" / "reference" / f"{page}.md"
        (args.out / f"{page}.md").write_text(fill(source.read_text()))


if __name__ == "__main__":
    main()
