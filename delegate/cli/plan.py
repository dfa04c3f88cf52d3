"""`delegate submit --from-file plan.toml` for a file declaring several jobs (services/jobs/plan):
every job checked first, then all registered at once, one `NAME JOB_ID` line each (JSON with
--json). A plan never waits: the state dir's supervisor follows its jobs, as with --no-wait."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from delegate.adapters.terminal import print_json
from delegate.cli.common import open_state
from delegate.core.errors import UsageError
from delegate.services.jobs.jobfile import merge_job_settings
from delegate.services.jobs.plan import PlannedJob, read_plan, submit_plan
from delegate.services.jobs.submit import SubmitRequest, read_prompt

# What names one job and cannot hold for several at once.
_ONE_JOB_FLAGS = ("after", "session", "idempotency_key", "host")


def submit_plan_file(
    path: Path, flags: dict[str, Any], *, as_json: bool, no_mcp: bool
) -> int | None:
    """Submit the jobs `path` declares; None when it declares one job (the usual path)."""
    jobs = read_plan(path)
    if jobs is None:
        return None
    given = [f"--{name.replace('_', '-')}" for name in _ONE_JOB_FLAGS if flags.get(name)]
    if given or flags.get("wait"):
        said = ", ".join(given + (["--wait"] if flags.get("wait") else []))
        raise UsageError(f"{path} declares several jobs: {said} cannot apply to all of them")
    state = open_state()

    def request(job: PlannedJob, after: str | None) -> SubmitRequest:
        settings = merge_job_settings(path, job.fields, **{**flags, "after": after, "wait": False})
        if settings["prompt"] == "-":
            raise UsageError(f"{path}: {job.name}: a plan's prompts cannot come from stdin")
        text = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=sys.stdin)
        return SubmitRequest.from_settings(settings, text)._replace(no_mcp=no_mcp)

    failed = 0
    for planned in submit_plan(state, jobs, request):
        if as_json:
            print_json({"name": planned.name, "job_id": planned.job_id, "created": planned.created})
        else:
            print(f"{planned.name} {planned.job_id}")
        if planned.failure is not None:
            print(f"{planned.name}: job {planned.job_id} could not start: {planned.failure}",
                  file=sys.stderr)  # fmt: skip
            failed += 1
    return 1 if failed else 0
