"""Budgets: what a job may spend (`submit --max-cost USD --max-tokens N`, `[budget]`), counted
as its agent reports usage, and the words that end a job that spent too much. Pure.

Claude's stream reports tokens per message and its cost only with its final word; Codex reports
tokens per turn and no cost. Between those, the cost is estimated from `[prices]` in
delegate.toml (per million tokens, by model) when the agent reports none.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import.

from collections.abc import Mapping
from math import inf
from typing import Any, NamedTuple

from delegate.core.model import BUDGET_EXCEEDED, Job


class Budget(NamedTuple):
    max_cost_usd: float | None = None
    max_tokens: int | None = None

    @property
    def limited(self) -> bool:
        return self.max_cost_usd is not None or self.max_tokens is not None


class Price(NamedTuple):
    """USD per million tokens, in and out."""

    input: float
    output: float


class Spent(NamedTuple):
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    cost_reported: bool = False  # the agent said its cost (else: estimated, or unknown)

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out


def _count(usage: Mapping[str, Any], *keys: str) -> int:
    return sum(v for k in keys if isinstance(v := usage.get(k), int) and not isinstance(v, bool))


def add_usage(
    spent: Spent, usage: Mapping[str, Any], model: str | None, prices: Mapping[str, Price]
) -> Spent:
    """`spent` plus one message's or turn's `usage` (cache reads and writes count as input),
    its cost estimated from `prices[model]` unless the agent reported a cost already."""
    tokens_in = _count(
        usage,
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "cached_input_tokens",
    )
    tokens_out = _count(usage, "output_tokens")
    cost = spent.cost_usd
    price = prices.get(model or "")
    if price is not None and not spent.cost_reported:
        cost += (tokens_in * price.input + tokens_out * price.output) / 1_000_000
    return Spent(
        spent.tokens_in + tokens_in, spent.tokens_out + tokens_out, cost, spent.cost_reported
    )


def with_reported_cost(spent: Spent, cost_usd: object) -> Spent:
    """The agent's own figure replaces the estimate (a finite one, 0 or more: the channel
    checked it as it entered; this keeps a figure from elsewhere as honest)."""
    if isinstance(cost_usd, int | float) and not isinstance(cost_usd, bool) and 0 <= cost_usd < inf:
        return spent._replace(cost_usd=float(cost_usd), cost_reported=True)
    return spent


def budget_of(job: Job) -> Budget:
    return Budget(job.max_cost_usd, job.max_tokens)


def with_sub_jobs(job: Job, own: Spent | None = None) -> Spent:
    """What `job`'s budget counts: its own spending (`own`, else its record's figures) and what
    its sub-jobs spent (one counter for a job and every job below it)."""
    if own is None:
        own = Spent(job.tokens_in or 0, job.tokens_out or 0, job.cost_usd or 0.0)
    return own._replace(
        tokens_in=own.tokens_in + (job.sub_jobs_tokens or 0),
        cost_usd=own.cost_usd + (job.sub_jobs_cost_usd or 0.0),
    )


def overspent(spent: Spent, budget: Budget) -> str | None:
    """The end reason when `spent` crosses `budget`, with the figures; None within it."""
    if budget.max_tokens is not None and spent.tokens > budget.max_tokens:
        return f"{BUDGET_EXCEEDED}: {spent.tokens:,} tokens, over the {budget.max_tokens:,} allowed"
    if budget.max_cost_usd is not None and spent.cost_usd > budget.max_cost_usd:
        return (
            f"{BUDGET_EXCEEDED}: ${spent.cost_usd:.4f} spent, over the"
            f" ${budget.max_cost_usd:.2f} allowed"
        )
    return None
