"""The documentation: the site builds with `mkdocs build --strict` (no broken link, no page left
out of the nav), its references are made from the code, the README is a front door, and every
`delegate ...` line of a shell example names a real command with real flags."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import click
import pytest

from delegate.cli.app import full_command
from delegate.config.settings import ENV_VARS

ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = {"", "sh", "shell", "bash", "console", "text"}  # what a shell example is in


def load_script(name: str) -> ModuleType:
    """scripts/NAME.py as a module (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


gen_docs = load_script("gen_docs")


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


# --- the site ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=240,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    return out


def test_the_site_builds_strict_with_every_page_in_the_nav(site: Path):
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").rglob("*.md"):
        assert page.relative_to(ROOT / "docs").as_posix() in nav, f"{page} is not in the nav"
    assert (site / "index.html").exists()
    assert (site / "images" / "top.svg").exists()


def test_the_command_reference_is_every_commands_help(site: Path):
    page = (site / "reference" / "commands" / "index.html").read_text()
    for path, command in gen_docs.walk(full_command(), ("delegate",)):
        assert f'id="{gen_docs.anchor(path)}"' in page, f"{' '.join(path)} has no section"
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in page, f"{' '.join(path)} {param.opts[-1]}"
    assert "<!-- generated" not in page


def test_the_configuration_reference_is_the_codes(site: Path):
    page = (site / "reference" / "configuration" / "index.html").read_text()
    for var in ENV_VARS:
        assert var.name in page
    for key in gen_docs.config_keys_checked():
        assert f"<code>{key.key}</code>" in page
    assert "<!-- generated" not in page


def test_a_toml_key_the_code_reads_but_the_docs_do_not_fails_the_build(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(gen_docs, "accepted_keys", lambda: {"max_running", "brand_new_key"})
    with pytest.raises(ValueError, match="brand_new_key"):
        gen_docs.fill("<!-- generated: toml -->")


def test_nothing_generated_is_committed():
    """The markers stay in the committed pages; the tables exist only in the built site."""
    for page in ("commands", "configuration"):
        text = (ROOT / "docs" / "reference" / f"{page}.md").read_text()
        assert "<!-- generated: " in text
        assert "Usage: delegate" not in text and "| `DELEGATE_HOME` |" not in text


# --- the README -------------------------------------------------------------------------------


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "](docs/images/top.svg)" in text
    assert "make demo" in text and "make test" in text
    assert "delegate submit --agent claude" in text
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        if "://" not in link:
            assert (ROOT / link).exists(), f"README.md links to {link}, which does not exist"


# --- the shell examples -----------------------------------------------------------------------


class Example(NamedTuple):
    file: Path
    line: int  # where the (logical) line starts
    text: str


def shell_examples(path: Path) -> Iterator[Example]:
    """The lines of `path`'s fenced shell blocks, continuation lines joined, `$ ` dropped."""
    fence: str | None = None  # the opening marker, inside a block
    shell = False
    held: list[str] = []
    start = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        stripped = line.strip()
        if fence is None:
            opening = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
            if opening:
                fence, shell = opening.group(1), opening.group(2) in SHELL_FENCES
            continue
        if stripped.startswith(fence) and not stripped.strip(fence[0]):
            fence, held = None, []
            continue
        if not shell:
            continue
        if not held:
            start = number
            line = re.sub(r"^\s*\$ ", "", line)
        if line.endswith("\\"):
            held.append(line[:-1])
            continue
        yield Example(path, start, " ".join([*held, line]))
        held = []


def delegate_calls(text: str) -> Iterator[list[str]]:
    """The words of each simple command in a shell line that runs `delegate` (after any
    `NAME=value` assignments; in a pipeline, a list, or `$(...)`)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    vars(lexer)["whitespace_split"] = True  # words end at blanks too (set so, as shlex.split does)
    try:
        words = list(lexer)
    except ValueError:  # unbalanced quotes: no shell line
        return
    command: list[str] = []
    for word in [*words, ";"]:
        if word and set(word) <= set("|&;()<>"):
            while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
                command.pop(0)
            if command and (command[0] == "delegate" or command[0].endswith("/delegate")):
                yield command
            command = []
        else:
            command.append(word)


def subcommand(group: click.Group, words: list[str]) -> tuple[str, click.Command] | None:
    """Which subcommand `group` runs for `words`, as click would decide it (a group may read
    its first word another way: `claim TASK` is `claim acquire TASK`)."""
    ctx = click.Context(group, resilient_parsing=True)
    found = group.get_command(ctx, words[0])
    if found is not None:
        return words[0], found
    group.parse_args(ctx, list(words))
    rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
    found = group.get_command(ctx, rest[0]) if rest else None
    return (rest[0], found) if found is not None and rest[0] != words[0] else None


def option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts, param.secondary_opts)
    return names


def problems(words: list[str], root: click.Command) -> Iterator[str]:
    """What is wrong with `delegate WORDS`: a command that does not exist, a flag that is not
    one of its command's."""
    command, path, rest = root, ["delegate"], words[1:]
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        found = subcommand(command, rest)
        if found is None:
            yield f"`{' '.join(path)}` has no command {rest[0]!r}"
            return
        name, command = found
        path.append(name)
        rest = rest[1:] if rest[0] == name else rest
    known = option_names(command)
    for word in rest:
        if word == "--":
            break
        if not word.startswith("-") or word == "-" or re.match(r"^-\d", word):
            continue
        flag = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        if flag not in known:
            yield f"`{' '.join(path)}` has no option {flag}"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_delegate_line_names_real_commands_and_flags(path: Path):
    root = full_command()
    found = []
    for example in shell_examples(path):
        for words in delegate_calls(example.text):
            found.extend(
                f"{path.relative_to(ROOT)}:{example.line}: {problem}\n    {example.text}"
                for problem in problems(words, root)
            )
    assert not found, "\n".join(found)


def test_the_example_checker_reads_shell_as_a_shell_does(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "text\n"
        "```sh\n"
        "$ FOO=1 delegate ps --all --bogus | jq .\n"
        "delegate submit --agent shell \\\n"
        "    --no-such-flag x   # a comment --not-a-flag\n"
        'id=$(delegate submit -a shell -p "x" --no-wait) && delegate nosuch\n'
        "delegate claim build --owner me && delegate claim acquire build --lease 5\n"
        "echo delegate --whatever\n"
        "```\n"
        "```toml\n"
        "delegate = --not-shell\n"
        "```\n"
    )
    root = full_command()
    said = [
        (example.line, problem)
        for example in shell_examples(page)
        for words in delegate_calls(example.text)
        for problem in problems(words, root)
    ]
    assert said == [
        (3, "`delegate ps` has no option --bogus"),
        (4, "`delegate submit` has no option --no-such-flag"),
        (6, "`delegate` has no command 'nosuch'"),
    ]
