"""Attempts and retries in the report: which job records are attempts of one job, and how
those chains ended.

Every job record is one attempt. When an attempt is followed by another (`delegate retry`, a
retry rule, a requeue), the toolkit writes a `retried` line into the earlier attempt's log
naming the next one (`attempt`); the log summary keeps it as `retried_by`. A chain runs from
its first attempt (one no other attempt names) along those links to its final attempt, and
counts once, by its final attempt's outcome:
- retried: a chain of more than one attempt;
- retried then succeeded: its final attempt completed after an earlier one ended otherwise;
- retried, still failed: its final attempt ended in error.
A retried chain whose final attempt was cancelled or has not ended is neither of the last two.
Chains are drawn among the jobs the report counts: an attempt whose log is not among them (a
`--since` that leaves the earlier ones out, an attempt on another host) is not followed.

Plain Python over the collected job rows: a chain can be any length (`delegate retry` again
and again), which Spark would follow with one join per step.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

FIGURES = ("attempts", "retried", "retried_then_succeeded", "retried_still_failed")


def chains(jobs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The jobs as chains of attempts, each first to final, in the order of their first
    attempts in `jobs`."""
    by_id = {job["job_id"]: job for job in jobs}
    previous: dict[str, str] = {}  # an attempt -> the one it followed
    for job in jobs:
        following = str(job.get("retried_by"))
        if following in by_id and following != job["job_id"] and following not in previous:
            previous[following] = job["job_id"]
    out, placed = [], set()
    for job in jobs:
        if job["job_id"] in previous:
            continue  # reached from its first attempt
        chain = [job]
        placed.add(job["job_id"])
        while (following := str(chain[-1].get("retried_by"))) not in placed:
            if previous.get(following) != chain[-1]["job_id"]:
                break  # no next attempt in the report (or another attempt claimed it)
            chain.append(by_id[following])
            placed.add(following)
        out.append(chain)
    # attempts that name each other in a ring have no first attempt: each counts on its own
    out.extend([job] for job in jobs if job["job_id"] not in placed)
    return out


def number_attempts(jobs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Give each job row its place in its chain (`attempt`, from 1) and the attempt it
    followed (`retry_of`); return the chains."""
    found = chains(jobs)
    for chain in found:
        for n, job in enumerate(chain, 1):
            job["attempt"] = n
            job["retry_of"] = chain[n - 2]["job_id"] if n > 1 else None
    return found


def _empty() -> dict[str, int]:
    return dict.fromkeys(FIGURES, 0)


def count(found: Iterable[list[dict[str, Any]]]) -> dict[str, int]:
    """FIGURES over `found` chains."""
    figures = _empty()
    for chain in found:
        figures["attempts"] += len(chain)
        if len(chain) < 2:
            continue
        figures["retried"] += 1
        final = chain[-1]["status"]
        earlier_failed = any(job["status"] != "completed" for job in chain[:-1])
        if final == "completed" and earlier_failed:
            figures["retried_then_succeeded"] += 1
        elif final == "error":
            figures["retried_still_failed"] += 1
    return figures


def per_key(found: list[list[dict[str, Any]]], key: str) -> dict[Any, dict[str, int]]:
    """FIGURES per `key` (agent) of each chain's final attempt."""
    grouped: dict[Any, list[list[dict[str, Any]]]] = {}
    for chain in found:
        grouped.setdefault(chain[-1].get(key), []).append(chain)
    return {value: count(group) for value, group in grouped.items()}
