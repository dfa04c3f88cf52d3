"""The fast path of `delegate submit`: one job, without typer.

Scripts and cron lines submit often, and typer with click costs more than everything a
`submit --no-wait` does. This path reads the options of the typer command (`cli/submit.py`,
whose help is the reference) and runs the very code that command runs after parsing
(`submit_one`). It leaves to typer what it does not take: `--help`, combined short options,
a job file (`--from-file`), a fan-out (`--fan-out`, several `--agent`), any positional
argument, and any value it cannot read (typer says why).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from delegate.core.errors import DelegateError, say
from delegate.entry.argv import parse_options
from delegate.entry.output import event_printer, print_submitted
from delegate.services.jobs.jobfile import merge_job_file
from delegate.services.jobs.submit import (
    SubmitRequest,
    read_prompt,
    submit,
    submit_remote,
)
from delegate.services.state import State

# option -> the typer command's parameter it sets, by how its text is read
_TEXT: dict[str, str] = {
    "--agent": "agent",
    "--cmd": "cmd",
    "--prompt": "prompt",
    "--session": "session",
    "--bus": "bus",
    "--idempotency-key": "idempotency_key",
    "--on-event": "on_event",
    "--host": "host",
    "--after": "after",
    "--after-rule": "after_rule",
    "--group": "group",
    "--branch": "branch",
    "--base": "base",
    "--retry-on": "retry_on",
    "--backoff": "backoff",
    "--on-interrupt": "on_interrupt",
    "--max-memory": "max_memory",
}
_PATHS = {"--prompt-file": "prompt_file", "--workdir": "workdir"}
_FLOATS = {
    "--wall-timeout": "wall_timeout",
    "--idle-timeout": "idle_timeout",
    "--max-cost": "max_cost",
    "--max-cpus": "max_cpus",
}
_INTS = {
    "--max-running": "max_running",
    "--max-tokens": "max_tokens",
    "--max-pids": "max_pids",
    "--retries": "retries",
}
_FLAGS = {
    "--wait": ("wait", True),
    "--no-wait": ("wait", False),
    "--worktree": ("worktree", True),
    "--no-worktree": ("worktree", False),
    "--sandbox": ("sandbox", True),
    "--no-sandbox": ("sandbox", False),
}
SUBMIT_OPTIONS: dict[str, bool] = {
    **dict.fromkeys([*_TEXT, *_PATHS, *_FLOATS, *_INTS], True),
    **dict.fromkeys([*_FLAGS, "--no-mcp", "--json"], False),
}
# every option of the typer command that goes into the job's settings (None: not given)
FLAG_NAMES = [
    *_TEXT.values(),
    *_PATHS.values(),
    *_FLOATS.values(),
    *_INTS.values(),
    "wait",
    "worktree",
    "sandbox",
]


SHORT = {
    "-a": "--agent",
    "-p": "--prompt",
    "-f": "--prompt-file",
    "-C": "--workdir",
    "-s": "--session",
    "-w": "--wait",
    "-g": "--group",
}


def _long_options(argv: list[str]) -> list[str] | None:
    """`argv` with the typer command's short options spelled long (an option's value is left
    as it is, even `-p`), or None when it holds a short option of another kind (`-wa`)."""
    spelled: list[str] = []
    rest = iter(argv)
    for arg in rest:
        if arg in SHORT:
            arg = SHORT[arg]
        elif arg.startswith("-") and not arg.startswith("--") and arg != "-":
            return None
        spelled.append(arg)
        if SUBMIT_OPTIONS.get(arg):  # its value, whatever it looks like
            value = next(rest, None)
            if value is not None:  # (none: parse_options says it needs one)
                spelled.append(value)
    return spelled


def parse_submit_args(argv: list[str]) -> tuple[dict[str, Any], bool, bool] | None:
    """(the typer command's flags, --no-mcp, --json) of a `submit` this path answers, or None
    when typer should."""
    spelled = _long_options(argv)
    if spelled is None:
        return None
    argv = spelled
    if argv.count("--agent") + sum(a.startswith("--agent=") for a in argv) > 1:
        return None  # several agents: a fan-out
    try:
        positional, values = parse_options("submit", SUBMIT_OPTIONS, argv)
        if positional:
            return None
        return _flags(argv, values), bool(values.get("--no-mcp")), bool(values.get("--json"))
    except (DelegateError, ValueError):
        return None


def _flags(argv: list[str], values: dict[str, str | bool]) -> dict[str, Any]:
    flags: dict[str, Any] = dict.fromkeys(FLAG_NAMES)
    for option, value in values.items():
        if option in _TEXT:
            flags[_TEXT[option]] = value
        elif option in _PATHS:
            flags[_PATHS[option]] = Path(str(value))
        elif option in _FLOATS:
            flags[_FLOATS[option]] = float(str(value))
        elif option in _INTS:
            flags[_INTS[option]] = int(str(value))
    taken = iter(argv)
    for arg in taken:  # of --wait/--no-wait (and the worktree pair), the last one given wins
        if arg in _FLAGS:
            name, on = _FLAGS[arg]
            flags[name] = on
        elif SUBMIT_OPTIONS.get(arg):
            next(taken, None)  # its value, never a flag (`--prompt --wait`)
    if flags["agent"] is not None:
        flags["agent"] = str(flags["agent"])
    return flags


def submit_one(
    flags: dict[str, Any], from_file: Path | None, *, no_mcp: bool, as_json: bool
) -> int:
    """Submit one job as `flags` (and the job file `from_file`) say, follow it when waited for,
    and print it: what `delegate submit` does once its options are read."""
    settings = merge_job_file(from_file, **flags)
    text = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=sys.stdin)
    request = SubmitRequest.from_settings(settings, text)._replace(no_mcp=no_mcp)
    # cron, scripts and pipes get the job id at once; a person at a terminal sees it through
    waiting = sys.stdout.isatty() if settings["wait"] is None else bool(settings["wait"])
    emit = event_printer(as_json)
    state = State.open()
    if settings["host"]:
        result = submit_remote(state, request, settings["host"], wait=waiting, emit=emit, note=say)
    else:
        result = submit(state, request, wait=waiting, emit=emit, note=say)
    if result.outcome is not None:  # a retried attempt: follow it to the final outcome
        # services.jobs.retry, as the watcher: only a submit that followed its job loads it
        from delegate.services.jobs.retry import follow_attempts

        result = follow_attempts(state, result, emit=emit, note=say)
    if result.queue_position is not None:
        print(
            f"job {result.job.job_id} queued at position {result.queue_position}:"
            f" {result.waiting_for or 'it starts when a slot frees'}",
            file=sys.stderr,
        )
    return print_submitted(result, as_json)


def main_submit(argv: list[str]) -> int | None:
    """Run `submit ARGV` here and return its exit status, or None to leave it to typer."""
    parsed = parse_submit_args(argv)
    if parsed is None:
        return None
    flags, no_mcp, as_json = parsed
    return submit_one(flags, None, no_mcp=no_mcp, as_json=as_json)
