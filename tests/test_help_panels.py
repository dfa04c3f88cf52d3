"""Help people can scan (issue 33): `delegate --help` in panels, `delegate` alone saying where
to start, and every command's help ending with examples that run against its real flags."""

from __future__ import annotations

import contextlib
import io
import shlex
from pathlib import Path

import click
import pytest

from delegate.cli import app as cli
from delegate.cli.lazy import examples_of

from .helpers import run_cli


def walk(command: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    found = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        found += walk(sub, [*path, name])
    return found


TREE = walk(cli.full_command(), [])


def test_every_root_command_is_in_exactly_one_panel():
    listed = [name for commands in cli.PANELS.values() for name in commands]
    assert sorted(listed) == sorted(set(listed)) == sorted(cli.ROOT_COMMANDS)
    root = cli.full_command()
    for name, command in root.commands.items():
        assert getattr(command, "rich_help_panel", None) == cli.PANEL_OF[name], name
    for plumbing in ("register", "publish", "hook", "mcp"):
        assert cli.PANEL_OF[plumbing] == "Plumbing (used by agents)"


def test_delegate_alone_prints_the_panels_and_where_to_start(home: Path):
    result = run_cli(home, env={"COLUMNS": "100"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    positions = [out.index(f"─ {panel} ─") for panel in cli.PANELS]
    assert positions == sorted(positions)  # in the order of PANELS
    assert "─ Commands ─" not in out  # no command left outside a panel
    tail = out[out.index("Start with:") :]
    for line in cli.START_WITH:
        assert line in tail
    assert [c.split()[1] for c in cli.START_WITH] == ["submit", "ps", "show"]
    assert run_cli(home, "--help", env={"COLUMNS": "100"}).stdout == out


def test_root_help_builds_nothing_it_did_not_before():
    """`--help` lists every command with its help, so it builds them all (it always has); a
    command alone still builds only its own (test_cli_polish checks the modules loaded)."""
    root = cli.root_command()
    assert root.commands == {}
    root.get_command(click.Context(root), "ps")
    assert list(root.commands) == ["ps"]


def resolve(words: list[str]) -> tuple[list[str], click.Command, list[str]]:
    """The command path an example names, its command, and the words left for it."""
    command: click.Command = cli.full_command()
    path: list[str] = []
    while isinstance(command, click.Group) and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words[0]]
        words = words[1:]
    return path, command, words


def example_words(example: str) -> list[str]:
    """The words of `delegate ...` in an example (a pipe into it, or a redirection after it,
    is the shell's)."""
    words = shlex.split(example)  # the examples put spaces around `|` and `>`
    start = words.index("delegate") + 1
    end = next((i for i, w in enumerate(words) if i >= start and w in {"|", ">", "<"}), None)
    return words[start:end]


def parses(command: click.Command, name: str, words: list[str]) -> None:
    """Parse `words` as click would for `command`: unknown options, missing arguments and
    values of the wrong type raise; nothing is run."""
    with click.Context(command, info_name=name, resilient_parsing=False) as ctx:
        command.parse_args(ctx, list(words))
        if isinstance(command, click.Group):  # a group's bare word is a subcommand's (claim)
            args = [*ctx._protected_args, *ctx.args]
            sub_name, sub, rest = command.resolve_command(ctx, args)
            assert sub is not None and sub_name is not None
            parses(sub, sub_name, rest)


@pytest.mark.parametrize(("path", "command"), TREE, ids=[" ".join(p) or "<root>" for p, _ in TREE])
def test_every_help_ends_with_examples_that_run(path: list[str], command: click.Command):
    examples = examples_of(command)
    assert 1 <= len(examples) <= (3 if not path else 2), (path, command.epilog)
    assert "Example:" not in (command.help or ""), "the examples are at the end, once"
    for example in examples:
        named, target, rest = resolve(example_words(example))
        assert named[: len(path)] == path, f"{example!r} is not an example of {path}"
        parses(target, " ".join(named), rest)


def test_help_renders_the_examples_last(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("COLUMNS", "120")
    root = cli.full_command()
    for path in (["ps"], ["session", "list"], ["lock"], ["bb"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.suppress(click.exceptions.Exit):
            root.main(args=[*path, "--help"], prog_name="delegate", standalone_mode=False)
        text = out.getvalue().rstrip()
        command = resolve(list(path))[1]
        assert text.splitlines()[-1].strip() == examples_of(command)[-1], text
        assert text.index("Example") > text.index("╰"), "after the options"


def test_a_wrong_example_is_caught():
    """The check above is not vacuous: a flag that does not exist, or a bad value, fails."""
    named, target, rest = resolve(example_words("delegate ps --limit 20 --colour"))
    with pytest.raises(click.UsageError):
        parses(target, "ps", rest)
    named, target, rest = resolve(example_words("delegate ps --limit many"))
    with pytest.raises(click.BadParameter):
        parses(target, "ps", rest)
    named, target, rest = resolve(example_words("echo x | delegate lock acquire"))
    assert named == ["lock", "acquire"]
    with pytest.raises(click.UsageError):
        parses(target, "lock acquire", rest)
