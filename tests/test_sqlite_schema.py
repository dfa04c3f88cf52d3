"""Many processes opening a new SQLite file of ours at the same moment: every one of them gets
a working database (SQLite's busy handler alone let some fail with "database is locked")."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

OPENER = """
import sys, time
from pathlib import Path
kind, path, go = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
if kind == "coord":
    from delegate.coord.store import CoordStore as Store
elif kind == "bus":
    from delegate.adapters.bus.sqlite import SqliteBus as Store
else:
    from delegate.adapters.sessions_db import SessionInventory as Store
while time.time() < go:  # every opener starts at the same instant
    pass
Store(path)
print("tenacity" in sys.modules)
"""


@pytest.mark.parametrize("kind", ["coord", "bus", "sessions"])
def test_twelve_first_openers_at_once_all_succeed(kind: str, tmp_path: Path):
    for round_ in range(4):
        path = tmp_path / f"{kind}-{round_}.db"
        go = time.time() + 0.6
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, kind, str(path), str(go)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(12)
        ]
        results = [(p.communicate(timeout=60), p.returncode) for p in procs]
        assert [(code, err) for (_, err), code in results] == [(0, "")] * 12
    # once the file is made, opening it never reaches for the retry machinery
    again = subprocess.run(
        [sys.executable, "-c", OPENER, kind, str(path), "0"], capture_output=True, text=True
    )
    assert (again.returncode, again.stdout.strip()) == (0, "False"), again.stderr


def test_a_version_1_session_inventory_is_migrated_and_keeps_its_rows(tmp_path: Path):
    import sqlite3

    from delegate.adapters.sessions_db import SCHEMA_VERSION, SessionInventory

    path = tmp_path / "sessions.db"
    old = sqlite3.connect(path)
    old.executescript(
        """
        CREATE TABLE sessions (name TEXT PRIMARY KEY, state TEXT NOT NULL, job_id TEXT,
            agent TEXT, workdir TEXT, pane_pid INTEGER, created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL);
        INSERT INTO sessions VALUES ('dlg-old', 'stopped', '0000000a', 'shell', '/w', 7,
            '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z');
        PRAGMA user_version = 1;
        """
    )
    old.close()
    inventory = SessionInventory(path)
    row = inventory.get("dlg-old")
    assert row is not None and (row.job_id, row.socket) == ("0000000a", None)
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    check.close()
