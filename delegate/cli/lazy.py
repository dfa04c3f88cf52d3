"""A typer group that builds a subcommand only when it is called.

Building the click object of a typer command (reading its signature, making each option) costs
a millisecond or more per command, and importing a command group's module costs more: building
all ~60 commands of `delegate` took about 100 ms before one of them ran. `LazyGroup` knows its
subcommands by name and builds (and imports) only the one asked for; `--help`, which lists them
all with their help, builds them all.

A command's examples are written in its docstring, each on a line of its own starting
`Example:`; `tidy_help` moves them to its epilog, so its help ends with them, after the
options, whatever else the docstring says.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from difflib import get_close_matches

import click
import typer
from typer.core import TyperGroup

Builder = Callable[[str], click.Command]
EXAMPLE = "Example:"
# What rich would read as markup in an example (its `escape` rule), so it prints as written.
MARKUP_TAG = re.compile(r"(\[[a-z#/@][^[]*?])")


class LazyGroup(TyperGroup):
    """A TyperGroup whose subcommands come from `names` (in the order listed) and `build`."""

    names: tuple[str, ...] = ()
    build: Builder | None = None

    def lazy(self, names: tuple[str, ...], build: Builder) -> LazyGroup:
        self.names = names
        self.build = build
        return self

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.names) if self.build is not None else super().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.names and self.build is not None:
            self.commands[cmd_name] = self.build(cmd_name)
        return self.commands.get(cmd_name)

    def load_all(self) -> LazyGroup:
        """Build every subcommand now (the whole tree, as `--help` and the tests see it)."""
        for name in self.names:
            self.get_command(click.Context(self), name)
        return self

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """As typer's, with its "Did you mean" drawn from every name, built or not."""
        try:
            return click.Group.resolve_command(self, ctx, args)
        except click.UsageError as exc:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if self.suggest_commands and matches:
                suggestions = ", ".join(f"{m!r}" for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"  # type: ignore[misc]  # as typer does
            raise


def build_from(holder: typer.Typer, name: str, settings: typer.Typer) -> click.Command:
    """Build the command or group called `name` among those registered on `holder`, with the
    root app's (`settings`) exception and markup settings, as typer would build it."""
    for info in holder.registered_commands:
        assert info.callback is not None
        if (info.name or typer.main.get_command_name(info.callback.__name__)) == name:
            return typer.main.get_command_from_info(
                info,
                pretty_exceptions_short=settings.pretty_exceptions_short,
                rich_markup_mode=settings.rich_markup_mode,
            )
    for group in holder.registered_groups:
        if group.name == name:
            return typer.main.get_group_from_info(
                group,
                pretty_exceptions_short=settings.pretty_exceptions_short,
                suggest_commands=settings.suggest_commands,
                rich_markup_mode=settings.rich_markup_mode,
            )
    raise LookupError(f"no command {name!r} on {holder!r}")


def shell_of(app: typer.Typer) -> typer.Typer:
    """`app` without its commands: the root group (callback, options, help) built alone."""
    shell = copy.copy(app)
    shell.registered_commands = []
    shell.registered_groups = []
    return shell


def tidy_help(command: click.Command) -> click.Command:
    """`command` and every subcommand below it with the `Example:` lines of their help moved to
    their epilog (`Example:` or `Examples:`, then one command a line), so help ends with them,
    and their first paragraph on one line where a group lists them (rich keeps its breaks)."""
    lines = (command.help or "").splitlines()
    if command.help and command.short_help is None:
        command.short_help = " ".join(command.help.split("\n\n")[0].split())
    examples = [line.strip().removeprefix(EXAMPLE).strip() for line in lines if is_example(line)]
    if examples and command.epilog is None:
        kept = "\n".join(line for line in lines if not is_example(line))
        command.help = kept.rstrip()
        heading = "Examples:" if len(examples) > 1 else EXAMPLE
        # rich's help joins an epilog's paragraphs one a line: one paragraph per example
        command.epilog = "\n\n".join([heading, *(MARKUP_TAG.sub(r"\\\1", e) for e in examples)])
    for sub in getattr(command, "commands", {}).values():
        tidy_help(sub)
    return command


def is_example(line: str) -> bool:
    return line.strip().startswith(EXAMPLE)


def examples_of(command: click.Command) -> list[str]:
    """The examples `tidy_help` put at the end of `command`'s help, as written."""
    paragraphs = (command.epilog or "").split("\n\n")[1:]
    return [p.strip().replace("\\[", "[") for p in paragraphs if p.strip()]
