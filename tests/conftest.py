from __future__ import annotations

from pathlib import Path

import pytest

from delegate.config.statefiles import PUBLISH_SERVER_LOCK, SUPERVISOR_LOCK
from delegate.services import warm_report
from delegate.services.jobs import warm_publish
from delegate.services.state import State


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def state(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


pytest_plugins = ["tests.tmux_fixtures", "tests.mqtt_fixtures", "tests.models.fixtures"]


def _uses_spark(item: pytest.Item) -> bool:
    return "spark" in getattr(item, "fixturenames", ())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that use the shared `spark` session run first. Under pytest-xdist (`make
    test`: -n auto, `--dist load`) each worker is first handed a run of consecutive tests, a
    quarter of its share: on a few cores all of them fall in the first worker's run, so one
    JVM serves them rather than one per worker, and the long Spark tests start at once while
    the many short tests even out the end. (`--dist loadgroup` with an xdist_group mark would
    say so outright, but pytest-xdist 3.8.0 marks a grouped test through `item._nodeid`, which
    pytest 9 no longer reads.)"""
    items[:] = [item for item in items if _uses_spark(item)] + [
        item for item in items if not _uses_spark(item)
    ]


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for every report test of the run (a JVM takes ~20 s to start)."""
    pytest.importorskip("pyspark")
    from delegate.report.figures import spark_session
    from delegate.services import class_archive
    from delegate.services.report import check_requirements

    # from the class archive `make` made, as every report starts (services/class_archive)
    archive = class_archive.archive_for(check_requirements())
    session = spark_session("local[1]", class_archive=class_archive.using(archive))
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


def _stop_report_servers_under(folder: Path, patterns: tuple[str, ...]) -> None:
    for depth in range(len(patterns) + 2):  # a state dir's warm publisher, at most that deep
        for lock in folder.glob("*/" * depth + PUBLISH_SERVER_LOCK):
            warm_publish.stop(str(lock.parent))
    for pattern in patterns:
        for analytics in folder.glob(pattern):
            if (analytics / warm_report.START_LOCK).exists():
                warm_report.stop(analytics.parent)


@pytest.fixture(autouse=True)
def _stop_report_servers(request: pytest.FixtureRequest):
    """A report run by a test leaves its state dir's warm Spark waiting for the next one
    (services/warm_report), a publish no wrapper served its state dir's warm publisher
    (services/jobs/warm_publish): stop the ones under the test's own tmp_path when it ends;
    and the supervisor a command started (services/supervisor), with whatever it launched."""
    yield
    tmp_path = request.node.funcargs.get("tmp_path")
    if tmp_path is not None:
        _stop_report_servers_under(tmp_path, ("*/analytics", "*/*/analytics"))
        if (tmp_path / "state" / SUPERVISOR_LOCK).exists():  # the state dir's supervisor ran
            from tests.tmux_fixtures import kill_processes_of  # a plugin: loaded by now

            kill_processes_of(tmp_path / "state")


@pytest.fixture(autouse=True, scope="session")
def _stop_shared_report_servers(tmp_path_factory: pytest.TempPathFactory):
    """The same at the end of the run, for state dirs a module or the session shared."""
    yield
    _stop_report_servers_under(tmp_path_factory.getbasetemp(), ("*/*/analytics", "*/*/*/analytics"))
