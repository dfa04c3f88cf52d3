"""The wait-for graph and every cycle in it.

Agents declare what they wait for (`block`): another agent, or a resource, which stands for
whoever holds it (a live lock or claim). Each elementary cycle of that graph is a deadlock;
all are reported, each once, starting from its smallest agent so the output is stable.
networkx finds the cycles (Johnson's algorithm).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from delegate.coord.leases import holders
from delegate.coord.store import CoordStore
from delegate.core.errors import UsageError

AGENT, RESOURCE = "agent", "resource"


def block(
    store: CoordStore, agent: str, *, waiting_for: str | None, resource: str | None
) -> dict[str, Any]:
    if not agent:
        raise UsageError("an agent id is needed (--agent)")
    if (waiting_for is None) == (resource is None):
        raise UsageError("give one of --waiting-for AGENT or --resource NAME")
    kind, target = (AGENT, waiting_for) if waiting_for is not None else (RESOURCE, resource)
    assert target is not None
    if kind == AGENT and target == agent:
        raise UsageError("an agent cannot wait for itself")
    with store.write() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO blocks (agent, kind, target, since_ms) VALUES (?, ?, ?, ?)",
            (agent, kind, target, store.now()),
        )
    return {"agent": agent, "kind": kind, "target": target}


def unblock(
    store: CoordStore, agent: str, *, waiting_for: str | None = None, resource: str | None = None
) -> int:
    """Drop `agent`'s waits: the one named, or all of them. Returns how many went."""
    with store.write() as conn:
        if waiting_for is None and resource is None:
            cur = conn.execute("DELETE FROM blocks WHERE agent = ?", (agent,))
        else:
            kind, target = (AGENT, waiting_for) if waiting_for is not None else (RESOURCE, resource)
            cur = conn.execute(
                "DELETE FROM blocks WHERE agent = ? AND kind = ? AND target = ?",
                (agent, kind, target),
            )
        return int(cur.rowcount)


def find_cycles(
    waits: Iterable[tuple[str, str, str]], holders: Mapping[str, str]
) -> list[list[dict[str, str]]]:
    """Every cycle among agents. `waits`: (agent, kind, target); `holders`: resource -> agent.

    A cycle is a list of steps {"agent", "waits_for", "via"?}: the agent, the agent it waits
    for, and the resource that makes it wait when it is one.
    """
    import networkx as nx  # networkx: ~100 ms, only when cycles are looked for

    graph: nx.MultiDiGraph[str] = nx.MultiDiGraph()
    for agent, kind, target in waits:
        if kind == AGENT:
            graph.add_edge(agent, target, via=None)
        elif target in holders and holders[target] != agent:
            graph.add_edge(agent, holders[target], via=target)
    simple: nx.DiGraph[str] = nx.DiGraph(graph)  # one edge per pair; the vias stay in `graph`
    cycles = []
    for nodes in nx.simple_cycles(simple):
        start = nodes.index(min(nodes))
        nodes = nodes[start:] + nodes[:start]
        # parallel edges (waiting for an agent and for its resource) give one cycle per path
        paths: list[list[dict[str, str]]] = [[]]
        for i, a in enumerate(nodes):
            b = nodes[(i + 1) % len(nodes)]
            vias = sorted(
                {d["via"] for d in graph.get_edge_data(a, b).values()}, key=lambda v: v or ""
            )
            paths = [
                [*p, {"agent": a, "waits_for": b, **({"via": v} if v else {})}]
                for p in paths
                for v in vias
            ]
        cycles.extend(paths)
    cycles.sort(key=lambda c: [(s["agent"], s.get("via", "")) for s in c])
    return cycles


def describe(cycle: list[dict[str, str]]) -> str:
    parts = []
    for step in cycle:
        arrow = f" -[{step['via']}]-> " if "via" in step else " -> "
        parts.append(step["agent"] + arrow)
    return "".join(parts) + cycle[0]["agent"]


def deadlocks(store: CoordStore) -> list[list[dict[str, str]]]:
    waits = [
        (str(a), str(k), str(t)) for a, k, t in store.read("SELECT agent, kind, target FROM blocks")
    ]
    return find_cycles(waits, holders(store))


def waits(store: CoordStore) -> list[dict[str, Any]]:
    rows = store.read("SELECT agent, kind, target, since_ms FROM blocks ORDER BY agent, since_ms")
    return [{"agent": a, "kind": k, "target": t, "since_ms": s} for a, k, t, s in rows]
