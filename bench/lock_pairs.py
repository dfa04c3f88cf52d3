"""Lock acquire+release pairs per second through the library: one process, and 8 processes
taking turns on one lock (the contended case) and on a lock each.

Target (issue 12): >= 2,000 pairs/s from one process on this 2-core machine.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from pathlib import Path

from _common import emit, temp_home

from delegate.coord import leases
from delegate.coord.store import CoordStore


def pairs(home: str, owner: str, resource: str, count: int) -> float:
    store = CoordStore(Path(home) / "coord.db")
    started = time.perf_counter()
    for _ in range(count):
        leases.acquire(store, "lock", resource, owner, ttl_s=60, wait_s=60)
        leases.release(store, "lock", resource, owner)
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def _worker(args: tuple[str, str, str, int]) -> float:
    return pairs(*args)


def in_processes(home: Path, count: int, *, shared: bool) -> dict[str, float]:
    jobs = [(str(home), f"p{i}", "one" if shared else f"own-{i}", count) for i in range(8)]
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        # timed inside the workers: from each one's first pair to its last, not the spawning
        elapsed = max(pool.map(_worker, jobs))
    return {
        "pairs": 8 * count,
        "seconds": round(elapsed, 3),
        "pairs_per_s": round(8 * count / elapsed),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=4000, help="pairs in the one-process run")
    args = parser.parse_args()
    with temp_home() as home:
        CoordStore(home / "coord.db").close()
        pairs(str(home), "warm", "warm", 100)
        one = pairs(str(home), "solo", "one", args.n)
        contended = in_processes(home, args.n // 8, shared=True)
        separate = in_processes(home, args.n // 8, shared=False)
    rate = args.n / one
    emit(
        {
            "benchmark": "lock acquire+release pairs per second (library, coord.db)",
            "one_process": {"pairs": args.n, "seconds": round(one, 3), "pairs_per_s": round(rate)},
            "eight_processes_one_lock": contended,
            "eight_processes_own_locks": separate,
            "target_pairs_per_s_min": 2000,
            "meets_target": rate >= 2000,
        }
    )


if __name__ == "__main__":
    main()
