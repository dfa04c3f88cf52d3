"""How a job's events, its outcome and a submitted job are printed: by the typer commands
(cli/) and by the typer-free `submit` path alike."""

from __future__ import annotations

import sys
from typing import Any

from delegate.adapters.console import print_json, terminal_width, wants_json
from delegate.core.eventlines import event_line, outcome_line
from delegate.core.model import Job
from delegate.services.state import State


def event_printer(as_json: bool) -> Any:
    """What `submit --wait`, `watch` and `session resume --wait` print per event: a readable
    line at a terminal, the signed envelope as one JSON line otherwise."""
    if wants_json(as_json):
        return print_json
    width = terminal_width()

    def emit_line(envelope: dict[str, Any]) -> None:
        print(event_line(envelope, width=width), flush=True)

    return emit_line


def say_outcome(state: State, job_id: str) -> None:
    """How the job ended, in words, on stderr (`job 1a2b3c4d timed out: no activity for 10m`)."""
    print(outcome_line(state.registry.get(job_id).public_dict()), file=sys.stderr)


def print_submitted(result: Any, as_json: bool) -> int:
    """What submit and session resume print: the outcome's code when waited for, else the job."""
    if result.outcome is not None:
        state = State.open()
        say_outcome(state, result.job.job_id)
        print(f"audit log: {state.audit.events_path(result.job.job_id)}", file=sys.stderr)
        return int(result.outcome.exit_code)
    print_job(result.job, as_json)
    return 0


def print_job(job: Job, as_json: bool) -> None:
    """A job just registered or picked: its public record as JSON, else its id alone."""
    if as_json:
        print_json(job.public_dict())
    else:
        print(job.job_id)
