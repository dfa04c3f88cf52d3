"""The tool calls agent CLIs denied, from the jobs' rows (`denied_tools` in status.json):
totals, and per tool (definitions in report/figures)."""

from __future__ import annotations

from typing import Any


def _denied(job: dict[str, Any]) -> list[str]:
    tools = job.get("denied_tools")
    return [t for t in tools if isinstance(t, str)] if isinstance(tools, list) else []


def denial_totals(jobs: list[dict[str, Any]]) -> dict[str, int]:
    """The tool calls agent CLIs denied, and the completed jobs with at least one: work that
    reads as done and was not all done."""
    return {
        "denied_tool_calls": sum(len(_denied(j)) for j in jobs),
        "completed_with_denials": sum(1 for j in jobs if j["status"] == "completed" and _denied(j)),
    }


def denied_per_tool(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per tool: the calls denied and the jobs that had one, most calls first, then by name."""
    calls: dict[str, int] = {}
    holders: dict[str, set[str]] = {}
    for job in jobs:
        for tool in _denied(job):
            calls[tool] = calls.get(tool, 0) + 1
            holders.setdefault(tool, set()).add(job["job_id"])
    return [
        {"tool": tool, "calls": n, "jobs": len(holders[tool])}
        for tool, n in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
