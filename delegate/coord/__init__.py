"""Coordination between agents (DESIGN 10): messages, locks and claims with fencing tokens,
heartbeats, the wait-for graph, board deliberation and a blackboard, all in `coord.db`.

Every change is one SQLite transaction, so no read-modify-write can interleave with another;
times are integer epoch milliseconds with `now` passed in (tests inject it, nothing sleeps).
"""

from __future__ import annotations

from delegate.config.settings import AGENT_ENV, JOB_ENV, settings

TYPE_CHECKING = False  # the fast path of `lock acquire` imports this package
if TYPE_CHECKING:
    from collections.abc import Mapping


def default_agent(given: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """`--owner`/`--agent` when given, else this agent's id: DELEGATE_AGENT_ID, else its job."""
    env = settings().env if env is None else env
    return given or env.get(AGENT_ENV) or env.get(JOB_ENV) or None
