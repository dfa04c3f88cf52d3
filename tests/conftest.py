from __future__ import annotations

from pathlib import Path

import pytest

from delegate.services.state import State


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def state(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


pytest_plugins = ["tests.tmux_fixtures", "tests.mqtt_fixtures"]


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for every report test of the run (a JVM takes ~20 s to start)."""
    pytest.importorskip("pyspark")
    from delegate.report.figures import spark_session

    session = spark_session("local[1]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
