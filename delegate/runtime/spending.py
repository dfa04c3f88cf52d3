"""A job's spending as its agent reports it, in the wrapper: tokens per message or turn, cost
estimated from `[prices]` until the agent says its own; the record keeps the running figures,
and a job that crosses its budget is ended `budget_exceeded` and its agent stopped: SIGINT
(what an interrupt key sends), then SIGTERM, then SIGKILL, a few seconds apart."""

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
from delegate.core.budget import Budget, Price, Spent, add_usage, overspent, with_reported_cost
from delegate.core.errors import PublishRefused
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State

STOP_LADDER = ((signal.SIGINT, 3.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 0.0))


class Spending:
    def __init__(self, state: State, job_id: str, stop: Callable[[], None]) -> None:
        job = state.registry.get(job_id)
        self.state, self.job_id, self.stop = state, job_id, stop
        self.budget = Budget(job.max_cost_usd, job.max_tokens)
        config = read_config(state.layout.home, state.env)
        self.prices: Mapping[str, Price] = prices(config.tables, config.path)
        self.spent = Spent()
        self.ended = False

    def count(self, usage: Mapping[str, Any], model: str | None) -> None:
        """One message's or turn's usage: recorded, and checked against the budget."""
        self.spent = add_usage(self.spent, usage, model, self.prices)
        self._record()

    def reported(self, cost_usd: object) -> None:
        """The agent's own cost (its final word): it replaces the estimate."""
        self.spent = with_reported_cost(self.spent, cost_usd)

    def _record(self) -> None:
        spent = self.spent
        changes: dict[str, Any] = {"tokens_in": spent.tokens_in, "tokens_out": spent.tokens_out}
        if spent.cost_usd:
            changes["cost_usd"] = round(spent.cost_usd, 6)
        self.state.registry.update(self.job_id, **changes)
        reason = overspent(spent, self.budget) if self.budget.limited else None
        if reason is not None and not self.ended:
            self.ended = True
            figures = {"tokens": spent.tokens, "cost_usd": round(spent.cost_usd, 6)}
            with contextlib.suppress(PublishRefused):  # it ended otherwise meanwhile
                publish_event(self.state, self.job_id, "error", detail=reason, data=figures)
            self.stop()


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
