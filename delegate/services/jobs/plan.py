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
from typing import Any

from delegate.config.tomlfile import read_toml
from delegate.core.errors import ConfigError, UsageError
from delegate.core.model import validate_job_id

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


def submit_plan(
    jobs: list[PlannedJob],
    check: Callable[[PlannedJob], Any],
    submit_one: Callable[[PlannedJob, str | None], str],
) -> list[tuple[str, str]]:
    """Check every job (`check` raises for one that would be refused), then submit them in
    order (`submit_one(job, after ids)` returns the new job's id): (name, job id) pairs."""
    for job in jobs:
        check(job)
    made: dict[str, str] = {}
    for job in jobs:
        made[job.name] = submit_one(job, after_ids(job, made))
    return list(made.items())
