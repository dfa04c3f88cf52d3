"""A job's spending as its agent reports it, in the wrapper: tokens per message or turn, cost
estimated from `[prices]` until the agent says its own; the record keeps the running figures,
and a job that crosses its budget is ended `budget_exceeded` and its agent stopped: SIGINT
(what an interrupt key sends), then SIGTERM, then SIGKILL, a few seconds apart.

A sub-job's spending is added to the counter of every job above it (`sub_jobs_tokens`,
`sub_jobs_cost_usd`): a budget is one counter for a job and all its sub-jobs. The sub-job that
crosses a budget above it is stopped at once; the others drawing on it (its parent included)
stop at their next usage report, and no new sub-job is admitted (services/jobs/subjob)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from delegate.config.budget import prices
from delegate.config.profiles import read_config
from delegate.core.budget import (
    Price,
    Spent,
    add_usage,
    budget_of,
    overspent,
    with_reported_cost,
    with_sub_jobs,
)
from delegate.core.errors import JobNotFound, PublishRefused
from delegate.core.model import Job
from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.subjob import ancestors
from delegate.services.state import State

STOP_LADDER = ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0))


class Spending:
    def __init__(self, state: State, job_id: str, stop: Callable[[], None]) -> None:
        job = state.registry.get(job_id)
        self.state, self.job_id, self.stop = state, job_id, stop
        self.budget = budget_of(job)
        # the jobs whose counters its spending adds to: every one above it, budgeted or not
        # (a budgeted one further up counts through them all)
        self.above = [above.job_id for above in ancestors(state, job_id)]
        config = read_config(state.layout.home, state.env)
        self.prices: Mapping[str, Price] = prices(config.tables, config.path)
        self.spent = Spent()
        self.shared = Spent()  # what it has added to their counters so far
        self.ended = False

    def count(self, usage: Mapping[str, Any], model: str | None) -> None:
        """One message's or turn's usage: recorded, and checked against the budget."""
        self.spent = add_usage(self.spent, usage, model, self.prices)
        self._record()

    def reported(self, cost_usd: object) -> None:
        """The agent's own cost (its final word): it replaces the estimate."""
        self.spent = with_reported_cost(self.spent, cost_usd)
        self._share()  # its ending is under way: the counters above learn the figure

    def _record(self) -> None:
        spent = self.spent
        changes: dict[str, Any] = {"tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out}
        if spent.cost_usd:
            changes["cost_usd"] = round(spent.cost_usd, 6)
        job = self.state.registry.update(self.job_id, **changes)
        reason = None
        if self.budget.limited:
            reason = overspent(with_sub_jobs(job, spent), self.budget)
        shared = self._share()
        if reason is None and shared is not None:
            reason = f"{overspent(with_sub_jobs(shared), budget_of(shared))} (the budget of job"
            reason += f" {shared.job_id}, shared with its sub-jobs)"
        if reason is not None and not self.ended:
            self.ended = True
            figures = {"tokens": spent.tokens, "cost_usd": round(spent.cost_usd, 6)}
            with contextlib.suppress(PublishRefused):  # it ended otherwise meanwhile
                publish_event(self.state, self.job_id, "error", detail=reason, data=figures)
            self.stop()

    def _share(self) -> Job | None:
        """Add what it spent since last told to the counter of every job above it; the first of
        them whose budget that crosses, else None."""
        tokens = self.spent.tokens - self.shared.tokens
        cost = self.spent.cost_usd - self.shared.cost_usd
        if not self.above or (tokens == 0 and cost == 0):
            return None
        self.shared = self.spent
        crossed = None
        for job_id in self.above:
            try:
                above = self.state.registry.add_sub_jobs_spent(job_id, tokens, cost)
            except JobNotFound:  # removed by `gc`
                continue
            budget = budget_of(above)
            if crossed is None and budget.limited and overspent(with_sub_jobs(above), budget):
                crossed = above
        return crossed


def stop_ladder(pgid: int) -> None:
    """Stop the agent's process group gracefully, on a thread of its own (the wrapper's
    output copier calls it and must keep reading what the agent says meanwhile)."""

    def climb() -> None:
        for sig, grace in STOP_LADDER:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                try:
                    os.killpg(pgid, 0)
                except (ProcessLookupError, PermissionError):
                    return
                time.sleep(0.05)

    threading.Thread(target=climb, name="budget-stop", daemon=True).start()
