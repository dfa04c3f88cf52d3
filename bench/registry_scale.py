"""Registry: registers per second with 0 and with 10,000 existing jobs.

Target (issue 2): the rate with 10,000 existing jobs is within 1.2x of the rate with none,
i.e. adding a job does not slow down as history grows.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import emit, temp_home


def rate(root: Path, count: int) -> float:
    from delegate.adapters.audit import AuditLog
    from delegate.adapters.registry import Registry

    audit = AuditLog(root / "logs")
    registry = Registry(root / "jobs", on_change=audit.record_change)
    started = time.perf_counter()
    for _ in range(count):
        registry.register(command="bench")
    return count / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--history", type=int, default=10_000)
    parser.add_argument("--sample", type=int, default=500)
    args = parser.parse_args()
    with temp_home() as empty, temp_home() as full:
        empty_rate = rate(empty, args.sample)
        fill_started = time.perf_counter()
        rate(full, args.history)
        fill_s = time.perf_counter() - fill_started
        full_rate = rate(full, args.sample)
        existing = len(list((full / "jobs").glob("*.json")))
    ratio = empty_rate / full_rate
    emit(
        {
            "benchmark": "registry registers per second (records, audit meta/status/events, fsync)",
            "registers_per_s_empty": round(empty_rate, 1),
            "registers_per_s_with_history": round(full_rate, 1),
            "history_jobs": existing - args.sample,
            "history_fill_s": round(fill_s, 1),
            "slowdown_ratio": round(ratio, 3),
            "target_ratio_max": 1.2,
            "meets_target": ratio <= 1.2,
        }
    )


if __name__ == "__main__":
    main()
