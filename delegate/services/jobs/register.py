"""Registering, listing, showing, picking and cancelling jobs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from delegate.core.errors import UsageError
from delegate.core.model import Job, JobState
from delegate.services.state import State, strip_credentials

DEFAULT_WALL_TIMEOUT_S = 3600.0
DEFAULT_IDLE_TIMEOUT_S = 600.0


def timeout_s(value: float | None, default: float, name: str) -> float:
    if value is None:
        return default
    if value < 0:
        raise UsageError(f"{name} must be zero (no limit) or a positive number of seconds")
    return float(value)


def register_job(
    state: State,
    *,
    command: str | None = None,
    agent: str | None = None,
    workdir: str | None = None,
    session: str | None = None,
    wall_timeout_s: float | None = None,
    idle_timeout_s: float | None = None,
    idempotency_key: str | None = None,
    bus_url: str | None = None,
    job_id: str | None = None,
    token_for: Callable[[str], str] | None = None,
    host: str | None = None,
    launcher: dict[str, Any] | None = None,
    parent: str | None = None,
) -> tuple[Job, bool]:
    """Create a pending job (or return the one an idempotency key already made)."""
    if idempotency_key is not None and not idempotency_key.strip():
        raise UsageError("the idempotency key is empty")
    url = strip_credentials(state.default_bus_url(bus_url))
    return state.registry.register(
        agent=agent,
        command=command,
        workdir=workdir,
        session=session,
        wall_timeout_s=timeout_s(wall_timeout_s, DEFAULT_WALL_TIMEOUT_S, "--wall-timeout"),
        idle_timeout_s=timeout_s(idle_timeout_s, DEFAULT_IDLE_TIMEOUT_S, "--idle-timeout"),
        bus={"url": url},
        idempotency_key=idempotency_key,
        job_id=job_id,
        token_for=token_for,
        host=host,
        launcher=launcher,
        parent=parent,
    )


def parse_status(text: str | None) -> JobState | None:
    if text is None:
        return None
    try:
        return JobState(text)
    except ValueError:
        names = ", ".join(s.value for s in JobState)
        raise UsageError(f"unknown status {text!r}; expected one of {names}") from None


def pick_job(state: State, agent_session: str) -> Job | None:
    if not agent_session.strip():
        raise UsageError("the agent session label is empty")
    return state.registry.pick(agent_session)
