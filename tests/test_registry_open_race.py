"""The open index under a concurrent reader: `open_jobs` (ps, the dashboard, top) running while
jobs are registered must never drop the marker of a job whose record is being written."""

from __future__ import annotations

import threading

from delegate.services.jobs.register import register_job
from delegate.services.state import State


def test_a_reader_never_drops_the_marker_of_a_job_being_registered(state: State):
    registered: list[str] = []
    done = threading.Event()

    def read_all_along() -> None:
        reader = State.open(env=dict(state.env))  # a process of its own would have its own
        while not done.is_set():
            reader.registry.open_jobs()

    reader = threading.Thread(target=read_all_along)
    reader.start()
    try:
        for i in range(150):
            registered.append(register_job(state, command=f"echo {i}")[0].job_id)
    finally:
        done.set()
        reader.join()
    listed = {job.job_id for job in state.registry.open_jobs()}
    assert set(registered) <= listed, sorted(set(registered) - listed)
