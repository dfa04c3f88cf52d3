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
