"""The opened state directory: layout, registry wired to the audit log, and bus selection."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from delegate.adapters.audit import AuditLog
from delegate.adapters.bus import Bus, open_bus
from delegate.adapters.fsio import ensure_private_dir
from delegate.adapters.registry import Registry
from delegate.config.layout import Layout, bus_url, state_home
from delegate.config.settings import BUS_ENV, settings
from delegate.core.errors import DelegateError
from delegate.core.model import Job, JobState

MAX_ATTEMPT_CHAIN = 100  # attempts followed from a job to its latest (a loop never hangs)


def strip_credentials(url: str) -> str:
    """The URL without its user info, for storing in records and showing in logs.

    Who connects is a fact of the side that runs (the delegator, an agent), so the job record
    keeps the broker and its settings, never a user or a password.
    """
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host))


def with_own_credentials(job_url: str, own_url: str | None) -> str:
    """`job_url`, carrying the user info of `own_url` (this side's DELEGATE_BUS) when both name
    the same broker."""
    if not own_url:
        return job_url
    own, job = urlsplit(own_url), urlsplit(job_url)
    if own.username is None or (own.scheme, own.hostname, own.port) != (
        job.scheme,
        job.hostname,
        job.port,
    ):
        return job_url
    userinfo = own.netloc.rsplit("@", 1)[0]
    return urlunsplit(job._replace(netloc=f"{userinfo}@{job.netloc}"))


class State:
    """The opened state directory with its registry (wired to the audit log) and environment."""

    def __init__(
        self, layout: Layout, registry: Registry, audit: AuditLog, env: Mapping[str, str]
    ) -> None:
        self.layout = layout
        self.registry = registry
        self.audit = audit
        self.env = env

    @classmethod
    def open(cls, env: Mapping[str, str] | None = None, home: Path | None = None) -> State:
        env = settings().env if env is None else env
        layout = Layout(home or state_home(env))
        for folder in (layout.home, layout.jobs, layout.logs):
            ensure_private_dir(folder)
        audit = AuditLog(layout.logs)
        registry = Registry(layout.jobs, on_change=audit.record_change, on_discard=audit.discard)
        return cls(layout=layout, registry=registry, audit=audit, env=env)

    def job_states(
        self, job_ids: Iterable[str], known: Mapping[str, Job] | None = None
    ) -> dict[str, JobState]:
        """The state of each of `job_ids` that exists (and reads), by its latest attempt (an
        attempt whose retry is due counts as queued); the others are left out. `known`: open
        jobs just read (an open job is its own latest attempt), not read again."""
        # core.retry (its NamedTuples): for the dependency checks that ask, not for every
        # opened state (a fresh publish opens one)
        from delegate.core.retry import effective_state

        states: dict[str, JobState] = {}
        for job_id in job_ids:
            seen = known.get(job_id) if known is not None else None
            if seen is not None and not seen.status.terminal:
                states[job_id] = seen.status
                continue
            try:
                states[job_id] = effective_state(self.latest_attempt(self.registry.get(job_id)))
            except DelegateError:
                continue
        return states

    def latest_attempt(self, job: Job) -> Job:
        """`job`, or the last of the attempts that followed it (`retried_by`)."""
        for _ in range(MAX_ATTEMPT_CHAIN):
            if not job.retried_by:
                break
            try:
                job = self.registry.get(job.retried_by)
            except DelegateError:
                break
        return job

    def attempts(self, job: Job) -> list[Job]:
        """Every attempt of `job`'s chain, first to last."""
        first = job
        for _ in range(MAX_ATTEMPT_CHAIN):
            if not first.retry_of:
                break
            try:
                first = self.registry.get(first.retry_of)
            except DelegateError:
                break
        chain = [first]
        while chain[-1].retried_by and len(chain) < MAX_ATTEMPT_CHAIN:
            try:
                chain.append(self.registry.get(chain[-1].retried_by))
            except DelegateError:
                break
        return chain

    def default_bus_url(self, explicit: str | None = None) -> str:
        return bus_url(self.layout, self.env, explicit)

    def bus_url_for(self, job: Job) -> str:
        """A job lives on the bus recorded at registration (its per-job override)."""
        return str(job.bus.get("url") or self.default_bus_url())

    def open_bus_for(self, job: Job) -> Bus:
        """The job's bus, with per-job settings from its record (MQTT_CA_CERTS and the like)
        over the environment's."""
        overrides = {k: str(v) for k, v in job.bus.items() if k.startswith("MQTT_")}
        env = {**self.env, **overrides} if overrides else self.env
        url = with_own_credentials(self.bus_url_for(job), self.env.get(BUS_ENV))
        return open_bus(url, env=env)
