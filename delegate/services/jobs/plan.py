"""A job file that declares several jobs (`[[jobs]]`, each with a `name`), whose `after` may
name the other jobs of the file: `delegate submit --from-file plan.toml`.

The whole plan is checked before any job exists: names unique, every `after` a name of the file
or an existing job id, no circle (the error names it). Jobs are then submitted in an order where
each comes after those it waits for, each `after` name replaced by that job's id. Fields at the
top of the file are defaults for every job; a job's own fields win.

    backoff = "1s..4s"          # a default for every job below
    [[jobs]]
    name = "build"
    cmd = "make"
    [[jobs]]
    name = "test"
    cmd = "make test"
    after = ["build"]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from graphlib import CycleError, TopologicalSorter
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.registry import QUEUED_DETAIL
from delegate.adapters.tmux import Tmux
from delegate.config.profiles import read_config
from delegate.config.tomlfile import read_toml
from delegate.core.caps import Slots, waiting_for
from delegate.core.errors import ConfigError, DelegateError, UsageError
from delegate.core.model import Job, JobState, validate_job_id
from delegate.services import worktrees
from delegate.services.jobs.launch import busy_now, caps, gate_for, launch_in_tmux, this_launcher
from delegate.services.jobs.register import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_WALL_TIMEOUT_S,
    timeout_s,
)
from delegate.services.jobs.submit import (
    Prepared,
    SubmitRequest,
    end_unstarted,
    launch_spec,
    prepare,
)
from delegate.services.state import State, strip_credentials
from delegate.services.supervisor import ensure_supervisor

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


class PlannedJob:
    def __init__(self, name: str, fields: dict[str, Any], after: list[str]) -> None:
        self.name, self.fields, self.after = name, fields, after


def read_plan(path: Path) -> list[PlannedJob] | None:
    """The jobs of a plan file in the order to submit them; None for a one-job file."""
    data = read_toml(path)
    tables = data.get("jobs")
    if tables is None:
        return None
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{path}: jobs must be one or more [[jobs]] tables")
    defaults = {k: v for k, v in data.items() if k != "jobs"}
    planned: dict[str, PlannedJob] = {}
    for table in tables:
        name = table.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{path}: every [[jobs]] needs a name (letters, digits, _ . -)")
        if name in planned:
            raise ConfigError(f"{path}: two jobs are named {name!r}")
        fields = {**defaults, **{k: v for k, v in table.items() if k != "name"}}
        after = fields.pop("after", [])
        after = [after] if isinstance(after, str) else after
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            raise ConfigError(f"{path}: {name}: after must be a name or a list of names or ids")
        planned[name] = PlannedJob(name, fields, after)
    return [planned[name] for name in _order(path, planned)]


def _order(path: Path, planned: dict[str, PlannedJob]) -> list[str]:
    graph: dict[str, set[str]] = {}
    for job in planned.values():
        waits = set()
        for item in job.after:
            if item in planned:
                waits.add(item)
                continue
            try:
                validate_job_id(item)
            except Exception:
                raise UsageError(
                    f"{path}: {job.name}: after {item!r} is no job of this file"
                ) from None
        graph[job.name] = waits
    try:
        return list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        circle = " -> ".join(reversed(exc.args[1])) if len(exc.args) > 1 else "?"
        raise UsageError(f"{path}: the jobs wait for each other in a circle: {circle}") from None


def after_ids(job: PlannedJob, made: dict[str, str]) -> str | None:
    """`job`'s `after` with the names of the file replaced by the ids their jobs got."""
    ids = [made.get(item, item) for item in job.after]
    return ",".join(ids) if ids else None


class PlanJob(NamedTuple):
    """One job of a plan as registered: its name, its id, whether this plan made it (a job
    its idempotency key named already is only named)."""

    name: str
    job_id: str
    created: bool
    failure: str | None = None  # it could not be launched: it ended launch_failed


def submit_plan(
    state: State,
    jobs: list[PlannedJob],
    request_for: Callable[[PlannedJob, str | None], SubmitRequest],
    *,
    tmux: Tmux | None = None,
) -> list[PlanJob]:
    """Check every job (`request_for(job, after ids)` gives its request), then register them
    all in one registry transaction (Registry.commit_plan: one lock, one sync), then launch
    those a slot lets start now; the state dir's supervisor launches the others as their
    turns come. A job whose idempotency key names one already is not made again.

    Nothing is recorded when a job is refused; a job that cannot be launched ends
    `launch_failed` and the others still start (PlanJob.failure says why)."""
    tmux = tmux or Tmux.from_env(state.env)
    config = read_config(state.layout.home, state.env)
    made: dict[str, str] = {}
    for job in jobs:  # a key that names a job already: that job stands for this one
        key = job.fields.get("idempotency_key")
        found = state.registry.find_by_key(key) if isinstance(key, str) and key else None
        if found is not None:
            made[job.name] = found.job_id
    new = [job for job in jobs if job.name not in made]
    made.update(zip((job.name for job in new), state.registry.new_ids(len(new)), strict=True))
    fresh = frozenset(made[job.name] for job in new)
    ready = [
        prepare(
            state, request_for(job, after_ids(job, made)), tmux, config_file=config, fresh=fresh
        )
        for job in new
    ]
    try:
        records = [
            _record(state, made[job.name], prepared, tmux)
            for job, prepared in zip(new, ready, strict=True)
        ]
        committed = state.registry.commit_plan(
            records, _start_policy(state, records, fresh), _audit_beside(state)
        )
    except BaseException:
        for job_id in fresh:  # what was written beside records never committed
            if not state.registry.exists(job_id):
                state.audit.discard(job_id)
        raise
    ensure_supervisor(state)
    failures = {}
    for record in committed:
        if record.status is not JobState.PENDING:
            continue  # queued: the supervisor launches it when its turn comes
        try:
            launch_in_tmux(state, record, tmux)
        except DelegateError as exc:  # its ending says why; the others still start
            end_unstarted(state, record.job_id, "launch_failed", exc, raise_again=False)
            failures[record.job_id] = str(exc)
    return [
        PlanJob(job.name, made[job.name], made[job.name] in fresh, failures.get(made[job.name]))
        for job in jobs
    ]


def _record(state: State, job_id: str, prepared: Prepared, tmux: Tmux) -> Job:
    """The record of a plan's job, complete: registered and admitted in one write, claimed
    by this process (a job the cap holds back is queued by the commit)."""
    request, profile = prepared.request, prepared.profile
    tree: dict[str, Any] = {}
    if prepared.tree is not None:  # made at launch (launch_in_tmux), now or when a slot frees
        tree = worktrees.fields_for(state, job_id, prepared.tree)
        prepared = prepared._replace(workdir=Path(tree["workdir"]))
    launch, fields = launch_spec(state, job_id, prepared, tmux, durable=False)
    return state.registry.new_record(
        job_id,
        agent=profile.name,
        command=" ".join(profile.command),
        wall_timeout_s=timeout_s(request.wall_timeout_s, DEFAULT_WALL_TIMEOUT_S, "--wall-timeout"),
        idle_timeout_s=timeout_s(request.idle_timeout_s, DEFAULT_IDLE_TIMEOUT_S, "--idle-timeout"),
        bus={"url": strip_credentials(state.default_bus_url(request.bus_url))},
        idempotency_key=request.idempotency_key,
        launch=launch,
        launcher=this_launcher(),
        parent=request.parent,
        **{"workdir": str(prepared.workdir), **tree, **fields},
    )


def _start_policy(
    state: State, records: list[Job], fresh: frozenset[str]
) -> Callable[[list[Job]], Callable[[Job], bool]]:
    """The cap policy for a plan, given the open jobs under the registry's lock: the slots,
    groups and dependencies counted once, each job let start counted for the next (a plan of
    10,000 is judged in 10,000 look-ups, not 10,000 walks over the queue)."""
    cap = caps(state)

    def decide_for(open_jobs: list[Job]) -> Callable[[Job], bool]:
        known = gate_for(state, records, known={j.job_id: j for j in open_jobs})
        states = {**known.dependencies, **dict.fromkeys(fresh, JobState.QUEUED)}
        gate = known._replace(dependencies=states)
        busy = busy_now(state)
        slots = Slots(open_jobs, busy)

        def decide(job: Job) -> bool:
            if waiting_for(job, [], cap, busy, gate, slots) is not None:
                return False
            slots.take(job)
            states[job.job_id] = JobState.PENDING
            return True

        return decide

    return decide_for


def _audit_beside(state: State) -> Callable[[Job], None]:
    """A plan's job's audit lines as a submit writes them: registered (pending), then queued
    when it waits; synced with the plan's commit."""

    cause = {"source": "queue", "observed": True, "detail": QUEUED_DETAIL}
    return lambda job: state.audit.record_planned(job, cause)
