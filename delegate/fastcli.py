"""The fast path of `delegate publish`: parsed without typer, which costs ~40 ms to import.

Agents call publish many times per job, so this path imports only the standard library pieces
it needs. Its options mirror the typer command (a test checks the two stay the same).
"""

from __future__ import annotations

import json
import os
import sys

from .errors import DelegateError, UsageError

PUBLISH_OPTIONS = ("--job", "--event", "--detail", "--data")


def parse_publish_args(argv: list[str]) -> dict[str, str | None]:
    """Parse `--opt value` and `--opt=value` for the four publish options.

    argparse would do, but it imports shutil and locale to build a help formatter even when no
    help is shown (~7 ms); help comes from the typer command instead.
    """
    values: dict[str, str | None] = {"job": None, "event": None, "detail": "", "data": None}
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, sep, value = arg.partition("=")
        if name not in PUBLISH_OPTIONS:
            raise UsageError(
                f"unexpected argument {arg!r} (publish takes {', '.join(PUBLISH_OPTIONS)})"
            )
        if not sep:
            if not rest:
                raise UsageError(f"option {name} needs a value")
            value = rest.pop(0)
        values[name[2:]] = value
    if values["event"] is None:
        raise UsageError("missing option --event")
    return values


def run_publish(*, job: str | None, event: str, detail: str = "", data: str | None = None) -> int:
    """Publish and print a one-line JSON receipt; errors propagate as DelegateError."""
    from .services.publish import parse_data, publish_event, resolve_job_id
    from .services.state import State

    state = State.open()
    job_id = resolve_job_id(job, os.environ)
    envelope = publish_event(state, job_id, event, detail=detail, data=parse_data(data))
    receipt = {"job_id": job_id, "seq": envelope["seq"], "event": envelope["event"]}
    sys.stdout.write(json.dumps(receipt) + "\n")
    return 0


def main_publish(argv: list[str]) -> int:
    try:
        args = parse_publish_args(argv)
        return run_publish(
            job=args["job"],
            event=str(args["event"]),
            detail=args["detail"] or "",
            data=args["data"],
        )
    except DelegateError as exc:
        print(f"delegate: {exc}", file=sys.stderr)
        return exc.exit_code
