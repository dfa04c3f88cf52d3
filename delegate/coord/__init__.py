"""Coordination between agents (DESIGN 10): messages, locks and claims with fencing tokens,
heartbeats, the wait-for graph, board deliberation and a blackboard, all in `coord.db`.

Every change is one SQLite transaction, so no read-modify-write can interleave with another;
times are integer epoch milliseconds with `now` passed in (tests inject it, nothing sleeps).
"""
