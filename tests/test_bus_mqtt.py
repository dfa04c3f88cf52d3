"""The MQTT transport against a real Mosquitto started by the tests."""

from __future__ import annotations

import pytest

from .bus_contract import BusContract
from .mqtt_fixtures import Broker


@pytest.fixture
def bus_url(broker: Broker) -> str:
    return broker.url


class TestMqttBus(BusContract):
    pass
