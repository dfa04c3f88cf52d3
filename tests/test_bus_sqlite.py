from __future__ import annotations

import stat
from pathlib import Path

import pytest

from delegate.adapters.bus import open_bus
from delegate.adapters.bus.sqlite import SqliteBus
from delegate.core.errors import BusError

from .bus_contract import JOB, BusContract, drain


@pytest.fixture
def bus_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'bus.db'}"


class TestSqliteBus(BusContract):
    pass


def test_payloads_over_4k_live_in_content_addressed_blobs(tmp_path: Path):
    bus = SqliteBus(tmp_path / "bus.db")
    bus.publish(JOB, b"x" * 5000)
    bus.publish(JOB, b"x" * 5000)
    bus.publish(JOB, b"small")
    blobs = list((tmp_path / "blobs").iterdir())
    assert len(blobs) == 1 and blobs[0].name.startswith("sha256-")
    assert drain(bus.subscribe(JOB), count=3) == [b"x" * 5000, b"x" * 5000, b"small"]


def test_a_missing_blob_is_reported_not_fatal(tmp_path: Path):
    bus = SqliteBus(tmp_path / "bus.db")
    bus.publish(JOB, b"y" * 5000)
    for blob in (tmp_path / "blobs").iterdir():
        blob.unlink()
    message = bus.subscribe(JOB).get(timeout=1)
    assert message is not None and message.problem == "blob_missing" and message.payload == b""


def test_more_than_one_batch_is_read_without_new_commits(tmp_path: Path):
    bus = SqliteBus(tmp_path / "bus.db")
    for i in range(600):
        bus.publish(JOB, str(i).encode())
    sub = bus.subscribe(JOB)
    assert drain(sub, count=600) == [str(i).encode() for i in range(600)]


def test_bus_file_is_private(tmp_path: Path):
    SqliteBus(tmp_path / "bus.db").close()
    assert stat.S_IMODE((tmp_path / "bus.db").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    "url",
    ["sqlite://relative/bus.db", "carrier-pigeon://x", "no-scheme"],
    ids=["relative", "unknown-scheme", "no-scheme"],
)
def test_bad_urls_are_refused(url: str):
    with pytest.raises(BusError):
        open_bus(url)


def test_unusable_location_is_a_bus_error(tmp_path: Path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the state folder should be")
    with pytest.raises(BusError, match="cannot open the SQLite bus"):
        SqliteBus(blocker / "bus.db")


def test_a_corrupt_bus_file_is_a_bus_error(tmp_path: Path):
    (tmp_path / "bus.db").write_bytes(b"this is not a database" * 100)
    with pytest.raises(BusError, match="cannot open the SQLite bus"):
        SqliteBus(tmp_path / "bus.db")
