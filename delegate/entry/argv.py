"""The one small argv parser of the typer-free fast paths (lock, ps).

`--opt value`, `--opt=value` and flags, positionals, and `--` before positionals only. argparse
would do, but it imports shutil and locale to build a help formatter even when no help is
shown; help comes from the typer commands instead.
"""

from __future__ import annotations

from delegate.core.errors import UsageError


def parse_options(
    what: str, known: dict[str, bool], argv: list[str]
) -> tuple[list[str], dict[str, str | bool]]:
    """(positionals, {option: value or True}) of `argv`; `known` maps each option to whether it
    takes a value. Raises UsageError naming `what` (`lock acquire`) for anything else."""
    values: dict[str, str | bool] = {}
    positional: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        if arg == "--":
            positional.extend(rest)
            break
        if not arg.startswith("--"):
            positional.append(arg)
            continue
        name, sep, value = arg.partition("=")
        if name not in known:
            raise UsageError(f"{what}: no such option {name}")
        if not known[name]:
            if sep:
                raise UsageError(f"{what}: {name} takes no value")
            values[name] = True
            continue
        if not sep:
            if not rest:
                raise UsageError(f"{what}: option {name} needs a value")
            value = rest.pop(0)
        values[name] = value
    return positional, values
