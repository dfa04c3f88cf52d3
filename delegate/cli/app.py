"""The `delegate` command line (typer): parse, call one service, print, map errors to exit codes.

This module holds the root: `ROOT_COMMANDS` names every command and the module defining it
(cli/jobs, cli/submit, and one module per command group), imported only when it is called.

Results go to stdout (JSON lines where asked); logs and errors go to stderr, one line each.
"""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import importlib
import re
from typing import Annotated

import click
import typer
from click.exceptions import Abort, ClickException, Exit

from delegate import version_line
from delegate.cli.lazy import LazyGroup, build_from, shell_of, tidy_help
from delegate.core.errors import DelegateError, say

app = typer.Typer(
    cls=LazyGroup,
    name="delegate",
    help="Hand work to AI coding agents and keep an exact, verifiable record of what they did.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(wanted: bool) -> None:
    if wanted:
        print(version_line())
        raise typer.Exit(0)


@app.callback()
def _top(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            help="Print the version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Hand work to AI coding agents and keep an exact, verifiable record of what they did."""


_JOBS = "delegate.cli.jobs"
_SUBMIT = "delegate.cli.submit"
_SESSION = "delegate.cli.session"
_COORD = "delegate.cli.coord"
_UPKEEP = "delegate.cli.upkeep"
_WORKTREE = "delegate.cli.worktree"
_APPROVALS = "delegate.cli.approvals"
# Every command of `delegate`, by the panel `--help` lists it in (panels and commands in the
# order shown), and the module defining it, imported only when the command is called.
PANELS: dict[str, dict[str, str]] = {
    "Jobs": {
        "submit": _SUBMIT,
        "ps": _JOBS,
        "show": "delegate.cli.show",
        "logs": _JOBS,
        "watch": _JOBS,
        "why": _JOBS,
        "cancel": _JOBS,
        "retry": _SUBMIT,
        "jobs": _JOBS,
    },
    "Worktrees": dict.fromkeys(("diff", "merge", "review", "compare", "worktree"), _WORKTREE),
    "Sessions": dict.fromkeys(("attach", "send", "peek", "session"), _SESSION),
    "Queue": {"group": "delegate.cli.group", "cron": "delegate.cli.cron"},
    "Approvals": dict.fromkeys(("approvals", "approve"), _APPROVALS),
    "Views and reports": {
        "top": "delegate.cli.top",
        "dashboard": "delegate.cli.dashboard",
        "report": _UPKEEP,
    },
    "Coordination between agents": dict.fromkeys(
        [
            "heartbeat",
            "agents",
            "block",
            "unblock",
            "deadlocks",
            "msg",
            "lock",
            "claim",
            "board",
            "bb",
        ],
        _COORD,
    ),
    "Hosts and upkeep": {
        "host": "delegate.cli.hosts",
        "monitor": _UPKEEP,
        "doctor": _UPKEEP,
        "bus": _COORD,
    },
    "Plumbing (used by agents)": {
        **dict.fromkeys(("register", "publish", "hook", "pick"), _JOBS),
        "mcp": "delegate.cli.mcp",
    },
}
ROOT_COMMANDS: dict[str, str] = {
    name: module for commands in PANELS.values() for name, module in commands.items()
}
PANEL_OF = {name: panel for panel, commands in PANELS.items() for name in commands}
# What `delegate` alone (and `delegate --help`) ends with: where a person starts.
START_WITH = (
    "delegate submit --agent claude --prompt-file task.md --workdir . --wait",
    "delegate ps",
    "delegate show 1a2b3c4d",
)


def _build(name: str) -> click.Command:
    module = ROOT_COMMANDS[name]
    holder = importlib.import_module(module).commands
    command = tidy_help(build_from(holder, name, settings=app))
    command.rich_help_panel = PANEL_OF[name]  # type: ignore[attr-defined]  # read by typer's help
    return command


def root_command() -> LazyGroup:
    """The `delegate` group; each command is built, and its module imported, when called."""
    root = typer.main.get_command(shell_of(app))
    assert isinstance(root, LazyGroup)
    root.epilog = "\n\n".join(["Start with:", *START_WITH])
    return root.lazy(tuple(ROOT_COMMANDS), _build)


def full_command() -> LazyGroup:
    """The whole tree built at once (what `--help` and the tests walk)."""
    return root_command().load_all()


def run(argv: list[str]) -> int:
    """Run the typer app without letting it exit the process or print a traceback.

    Usage errors become one line on stderr and exit 64, so they never collide with watch's
    outcome codes (0-3).
    """
    if not argv:
        argv = ["--help"]
    command = root_command()
    try:
        result = command.main(args=argv, prog_name="delegate", standalone_mode=False)
    except Exit as exc:
        return int(exc.exit_code)
    except Abort:
        return 130
    except ClickException as exc:
        # click 8.2+ and typer both append "Did you mean ...?"; say it once, on one line.
        sentences = re.split(r"(?<=[.?!])\s+", exc.format_message().strip())
        message = " ".join(dict.fromkeys(s for s in sentences if s))
        say(message)
        return 64
    except DelegateError as exc:
        say(exc)
        return exc.exit_code
    return result if isinstance(result, int) else 0
