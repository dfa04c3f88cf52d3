"""Coordination as a service: the store opened from the state dir, and its events announced.

Every acquire, release, break, claim and board phase change is logged in `coord.db` in the
transaction that made it. When the actor runs inside a job (DELEGATE_JOB_ID), the event is also
published on that job's bus as a `progress` event with `data.coord`, so `delegate logs`, the
monitor and the report see coordination beside the job's own events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from delegate.config.layout import Layout, state_home
from delegate.config.logsetup import get_logger
from delegate.config.settings import HOME_ENV, JOB_ENV, settings
from delegate.coord import default_agent
from delegate.coord.heartbeats import Thresholds
from delegate.coord.store import CoordStore
from delegate.core import fastjson as json
from delegate.core.errors import DelegateError

log = get_logger(__name__)

__all__ = [
    "announce",
    "default_agent",
    "finished_job_agents",
    "heartbeat_thresholds",
    "open_coord",
]


def open_coord(env: Mapping[str, str] | None = None) -> CoordStore:
    env = settings().env if env is None else env
    return CoordStore(Layout(state_home(env)).coord_db)


def heartbeat_thresholds(env: Mapping[str, str] | None = None) -> Thresholds:
    """`[heartbeat] warn/stale/dead` of delegate.toml, else the defaults."""
    from delegate.config.profiles import read_config  # off the lock fast path but --break-dead

    env = settings().env if env is None else env
    config = read_config(state_home(env), env).tables
    return Thresholds.from_config(config.get("heartbeat"))


def describe_event(event: Mapping[str, Any]) -> str:
    kind = str(event["kind"])
    subject = event["subject"]
    if kind == "board_phase":
        return f"board {subject}: {event.get('phase')}"
    what, _, verb = kind.partition("_")
    token = f" (token {event['token']})" if "token" in event else ""
    return f"{what} {verb}: {subject}{token}"


def announce(events: list[dict[str, Any]], env: Mapping[str, str] | None = None) -> None:
    """Publish coordination events on the actor's own job's bus, when it runs in a job. The
    change is already recorded; a publish that fails is a warning, never an error."""
    env = settings().env if env is None else env
    if not events or not env.get(JOB_ENV) or not env.get(HOME_ENV):
        return
    # services.jobs.publish (registry, bus): only inside a job; `lock acquire --break-dead`
    # loads this module without it
    from delegate.services.jobs.publish import publish_own

    for event in events:
        try:
            publish_own("progress", describe_event(event), json.dumps({"coord": event}))
        except (DelegateError, OSError) as exc:
            log.warning(
                "coordination event %s not published on the job's bus: %s", event["kind"], exc
            )


def finished_job_agents(agents: list[str], env: Mapping[str, str] | None = None) -> set[str]:
    """The agents among `agents` that belong to a job that has ended: a job's wrapper beats
    under the job's id (and an agent in a job is that job unless DELEGATE_AGENT_ID says
    otherwise), so an agent named as a job whose record is terminal is done for good."""
    from delegate.core.model import validate_job_id  # off the lock fast path (see announce)
    from delegate.services.state import State  # registry: off the lock fast path (see announce)

    env = settings().env if env is None else env
    candidates = []
    for agent in agents:
        try:
            candidates.append(validate_job_id(agent))
        except DelegateError:
            continue
    if not candidates:
        return set()
    registry = State.open(env).registry
    ended = set()
    for job_id in candidates:
        try:
            if registry.get(job_id).status.terminal:
                ended.add(job_id)
        except DelegateError:
            continue  # no such job here: an agent that merely looks like a job id
    return ended
