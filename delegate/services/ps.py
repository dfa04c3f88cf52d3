"""`delegate ps`: jobs and their sessions side by side, from one tmux query."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any, NamedTuple

from ..model import Job
from ..tmux import Tmux, TmuxError
from .state import State
from .submit import inventory


class Row(NamedTuple):
    job_id: str
    job_state: str
    session: str
    session_state: str
    tmux: str
    agent: str
    age_s: float
    last_event: str

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def last_event(state: State, job_id: str) -> str:
    """The newest published or received event of a job, read from the end of its log."""
    path = state.audit.events_path(job_id)
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 16384))
            tail = handle.read().splitlines()
    except FileNotFoundError:
        return ""
    for line in reversed(tail):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("kind") in ("published", "received"):
            return f"{entry.get('seq')} {entry.get('event')}"
    return ""


def _age_s(job: Job, now: datetime) -> float:
    created = datetime.strptime(job.created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return max(0.0, (now - created).total_seconds())


def rows(state: State, *, tmux: Tmux | None = None) -> list[Row]:
    now = datetime.now(UTC)
    sessions = {s.name: s for s in inventory(state).list()}
    try:
        panes = {p.session: p for p in (tmux or Tmux.from_env(state.env)).panes()}
    except TmuxError:
        panes = {}
    out = []
    for job in state.registry.list():
        session = sessions.get(job.session or "")
        pane = panes.get(job.session or "")
        if pane is None:
            live = "-" if session is None else "gone"
        elif pane.dead:
            # tmux 3.3 now and then leaves a pane's process unreaped (seen with many panes
            # exiting at once) and cannot tell its status; the job's own record still has it.
            live = f"exited {'?' if pane.exit_status is None else pane.exit_status}"
        else:
            live = "alive"
        out.append(
            Row(
                job.job_id,
                job.status.value,
                job.session or "-",
                session.state.value if session else "-",
                live,
                job.agent or "-",
                round(_age_s(job, now), 1),
                last_event(state, job.job_id),
            )
        )
    return out


def human_age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"
