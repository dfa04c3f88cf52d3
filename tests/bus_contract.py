"""The contract every bus transport keeps. A transport's test module subclasses `BusContract`
and provides the `bus_url` fixture; the same tests then run against it (as huey does for its
storage backends)."""

from __future__ import annotations

import secrets
import threading
import time

import pytest

from delegate.adapters.bus import Bus, open_bus
from delegate.core.errors import BusError

JOB = "0123abcd"
OTHER = "fedcba98"


def drain(sub, *, count: int, timeout: float = 10.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = sub.get(timeout=0.2)
        if message is not None:
            got.append(message.payload)
            sub.ack(message)
    return got


class BusContract:
    @pytest.fixture(autouse=True)
    def _fresh_job_ids(self, monkeypatch):
        """Each test gets its own job ids: a broker keeps retained messages between tests."""
        import sys

        module = sys.modules[__name__]
        monkeypatch.setattr(module, "JOB", secrets.token_hex(4))
        monkeypatch.setattr(module, "OTHER", secrets.token_hex(4))

    @pytest.fixture
    def bus(self, bus_url: str):
        bus = open_bus(bus_url)
        yield bus
        bus.close()

    def test_messages_of_one_job_arrive_in_order(self, bus: Bus):
        sub = bus.subscribe(JOB)
        payloads = [f"m{i}".encode() for i in range(50)]
        for p in payloads:
            bus.publish(JOB, p)
        assert drain(sub, count=50) == payloads
        sub.close()

    def test_subscribers_see_only_their_job(self, bus: Bus):
        mine = bus.subscribe(JOB)
        theirs = bus.subscribe(OTHER)
        bus.publish(OTHER, b"other-1")
        bus.publish(JOB, b"mine-1")
        bus.publish(OTHER, b"other-2")
        assert drain(mine, count=1) == [b"mine-1"]
        assert mine.get(timeout=0.3) is None
        assert drain(theirs, count=2) == [b"other-1", b"other-2"]

    def test_all_jobs_subscription_sees_every_job(self, bus: Bus):
        every = bus.subscribe(None)
        bus.publish(JOB, b"a")
        bus.publish(OTHER, b"b")
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            m = every.get(timeout=0.2)
            if m is not None:
                got.append((m.job_id, m.payload))
        assert got == [(JOB, b"a"), (OTHER, b"b")]

    def test_a_late_subscriber_learns_the_terminal_event(self, bus: Bus):
        bus.publish(JOB, b"progress")
        bus.publish(JOB, b"terminal", retain=True)
        late = bus.subscribe(JOB)
        assert b"terminal" in drain(late, count=2, timeout=3)

    def test_large_payloads_round_trip(self, bus: Bus):
        sub = bus.subscribe(JOB)
        big = bytes(range(256)) * 200  # 51,200 bytes, binary
        bus.publish(JOB, big)
        assert drain(sub, count=1) == [big]

    def test_get_waits_for_a_message_published_later(self, bus: Bus):
        sub = bus.subscribe(JOB)
        timer = threading.Timer(0.2, lambda: bus.publish(JOB, b"later"))
        timer.start()
        try:
            message = sub.get(timeout=5)
        finally:
            timer.join()
        assert message is not None and message.payload == b"later"

    def test_get_returns_none_at_its_timeout(self, bus: Bus):
        sub = bus.subscribe(JOB)
        started = time.monotonic()
        assert sub.get(timeout=0.3) is None
        assert 0.25 <= time.monotonic() - started < 2.0

    def test_a_durable_consumer_resumes_after_its_last_ack(self, bus_url: str, bus: Bus):
        sub = bus.subscribe(JOB, consumer="monitor-test")
        for i in range(3):
            bus.publish(JOB, f"m{i}".encode())
        first = sub.get(timeout=5)
        assert first is not None and first.payload == b"m0"
        sub.ack(first)
        second = sub.get(timeout=5)
        assert second is not None and second.payload == b"m1"
        sub.close()  # m1 was not acknowledged: it must come again
        again = open_bus(bus_url)
        try:
            resumed = again.subscribe(JOB, consumer="monitor-test")
            assert drain(resumed, count=2) == [b"m1", b"m2"]
        finally:
            again.close()

    def test_using_a_closed_bus_is_an_error(self, bus_url: str):
        bus = open_bus(bus_url)
        bus.close()
        bus.close()  # closing twice is fine
        with pytest.raises(BusError):
            bus.publish(JOB, b"x")
