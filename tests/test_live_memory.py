"""A job's memory in `top` and the dashboard (issue 32, item 4): a running agent's resident
memory now (every process below its pane's wrapper, read from /proc), an ended limited job's
peak (its cgroup's counter); the column's words."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate.adapters.bus import open_bus
from delegate.adapters.procfs import tree_memory
from delegate.runtime.dashboard.live import LiveTable
from delegate.runtime.top.rows import cells, columns, memory_text
from delegate.services.state import State

from .helpers import retry_until
from .test_limits import _submit, needs_cgroups

HOLD = (  # holds 96 MiB (touched, so resident) until a file named `go` appears
    "python3 -c 'import os, time\nb = bytearray(96 << 20)\nfor i in range(0, len(b), 4096):"
    ' b[i] = 1\nwhile not os.path.exists("go"): time.sleep(0.05)\''
)


def test_a_tree_s_memory_is_every_process_below_its_root():
    child = (
        "import time; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)"
    )
    root = subprocess.Popen(["sh", "-c", f'{sys.executable} -c "{child}" & wait'])
    try:
        found = retry_until(
            lambda: (m := tree_memory([root.pid]).get(root.pid, 0)) >= 64 << 20 and m,
            timeout=10,
        )
        assert found < 200 << 20  # the child's 64 MiB and an interpreter, not the machine
        assert tree_memory([999_999_999]) == {999_999_999: 0}  # no such process: nothing below
    finally:
        root.kill()
        subprocess.run(["pkill", "-P", str(root.pid)], check=False)
        root.wait()


@pytest.mark.parametrize(
    ("size", "said"),
    [(None, "-"), (812 << 10, "812K"), (41 << 20, "41M"), (int(1.5 * (1 << 30)), "1.5G"),
     (999 << 20, "999M"), (1000 << 20, "1.0G"), (3 << 40, "3.0T")],
)  # fmt: skip
def test_the_memory_column_says_it_in_four_characters(size: int | None, said: str):
    assert memory_text(size) == said and len(said) <= 4
    row = {"job_id": "0000000a", "state": "running", "memory_bytes": size}
    shown = columns(120)
    assert cells(row, shown, event_width=20)[[c.key for c in shown].index("mem")] == said
    assert "mem" not in [c.key for c in columns(80)]  # the free column's room, at 80


@pytest.fixture
def table(home: Path, tmux_env: dict[str, str]) -> Iterator[LiveTable]:
    state = State.open(env={**tmux_env, "DELEGATE_HOME": str(home)})
    bus = open_bus(state.default_bus_url(), env=state.env)
    live = LiveTable(state, bus, recent=10)
    live.start()
    yield live
    live.stop()
    bus.close()


def _row(live: LiveTable, job_id: str) -> dict[str, Any] | None:
    live.refresh()
    return next((r for r in live.snapshot()["rows"] if r["job_id"] == job_id), None)


def test_a_running_agent_s_memory_is_shown_live(
    home: Path, tmux_env: dict[str, str], tmp_path: Path, table: LiveTable
):
    job_id = _submit(home, tmux_env, tmp_path, HOLD)
    row = retry_until(
        lambda: (r := _row(table, job_id)) and (r.get("memory_bytes") or 0) >= 96 << 20 and r,
        timeout=30,
    )
    assert row["state"] == "running" and row["memory_bytes"] < 400 << 20
    (tmp_path / "go").touch()
    ended = retry_until(
        lambda: (r := _row(table, job_id)) and r["state"] == "completed" and r, timeout=30
    )
    assert ended["memory_bytes"] is None  # no limits: no peak was counted


@needs_cgroups
def test_an_ended_limited_job_shows_its_peak(
    home: Path, tmux_env: dict[str, str], tmp_path: Path, table: LiveTable
):
    (tmp_path / "go").touch()  # allocates, then leaves at once
    job_id = _submit(home, tmux_env, tmp_path, HOLD, "--max-memory", "1G")

    def peak() -> int:
        row = _row(table, job_id)
        return int(row["memory_bytes"] or 0) if row and row["state"] == "completed" else 0

    ended = retry_until(peak, timeout=30)
    assert 96 << 20 <= ended <= 1 << 30  # the cgroup's own counter (runtime/limited)
