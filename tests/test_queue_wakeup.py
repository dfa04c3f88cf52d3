"""No missed wake-up under the cap (issue 20, item 7): a slot that frees launches the next job.

Six short jobs under a global `max_running = 2`, no monitor running: only the jobs' own
supervisors launch the queued ones. Sampled every 50 ms, no moment may show a job queued while
fewer than two hold a slot for longer than a second.
"""

from __future__ import annotations

import time
from pathlib import Path

from delegate.adapters.sessions_db import SessionInventory
from delegate.core.caps import busy_sessions, occupies_slot
from delegate.core.model import JobState

from .test_monitor import kill_supervisor, open_state, submit_no_wait

CAP = 2
STARVED_LIMIT_S = 1.0
SESSIONS_HOLD = False


def _submit_six(
    home: Path, env: dict[str, str], workdir: Path, *, without_supervisor: tuple[int, ...] = ()
) -> list[str]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(f"max_running = {CAP}\n")
    ids = []
    for n in range(6):
        ids.append(submit_no_wait(home, env, workdir, "sleep 4"))
        if n in without_supervisor:
            kill_supervisor(home, ids[-1])
    return ids


def test_no_queued_job_waits_while_a_slot_is_free(home: Path, tmux_env, tmp_path: Path):
    ids = _submit_six(home, tmux_env, tmp_path)
    assert_never_starved(home, ids)


def test_a_queued_job_without_its_supervisor_still_gets_the_free_slot(
    home: Path, tmux_env, tmp_path: Path
):
    """The oldest queued job's supervisor is gone (killed, crashed), and so are those of the
    running jobs (no one's end launches the next): the slot the policy gives that job must
    not go unused, nor hold back the jobs queued behind it, whose supervisors wait too."""
    ids = _submit_six(home, tmux_env, tmp_path, without_supervisor=(0, 1, 2))
    assert_never_starved(home, ids)


def assert_never_starved(home: Path, ids: list[str]) -> None:
    state = open_state(home)
    sessions = SessionInventory(state.layout.sessions_db)
    starved_since: float | None = None
    worst = 0.0
    most = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        jobs = [state.registry.get(j) for j in ids]
        if all(j.status.terminal for j in jobs):
            break
        holding = {j.job_id for j in jobs if occupies_slot(j)}
        holding |= set(busy_sessions(sessions.live())) if SESSIONS_HOLD else set()
        most = max(most, len(holding))
        queued = [j for j in jobs if j.status is JobState.QUEUED]
        now = time.monotonic()
        if queued and len(holding) < CAP:
            starved_since = now if starved_since is None else starved_since
            worst = max(worst, now - starved_since)
        else:
            starved_since = None
        time.sleep(0.05)
    jobs = [state.registry.get(j) for j in ids]
    assert all(j.status is JobState.COMPLETED for j in jobs), [j.status for j in jobs]
    assert most <= CAP
    assert worst <= STARVED_LIMIT_S, f"a job stayed queued {worst:.2f} s with a slot free"
