"""MQTT benchmarks against a private loopback mosquitto started here.

1. In-process publish-to-receive latency, signing and verification included, beside raw paho
   QoS 1 measured in the same run. Target (issue 4): our p50 within 2x of raw paho; p99 reported.
2. `delegate publish` as a fresh process over MQTT, beside `mosquitto_pub` (the reference).
   Target: median <= 60 ms.
3. Throughput, one publisher to one subscriber at QoS 1: messages/s, ours and raw paho.
"""

from __future__ import annotations

import argparse
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import ROOT, bench_env, delegate_exe, emit, precompile, started_job, summary_ms

sys.path.insert(0, str(ROOT))
from tests.mqtt_fixtures import PLAIN, Broker, free_port


def start_broker(folder: Path) -> Broker:
    import getpass

    (folder / "data").mkdir()
    port = free_port()
    broker = Broker(
        folder, PLAIN.format(port=port, data=folder / "data", user=getpass.getuser()), port
    )
    broker.start()
    return broker


def raw_paho_latency(port: int, n: int) -> tuple[list[float], float]:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    topic = f"bench/raw/{secrets.token_hex(4)}"
    arrivals: dict[int, float] = {}
    got_all = threading.Event()
    handed: queue.Queue[int] = queue.Queue()

    def on_message(client, userdata, message):  # type: ignore[no-untyped-def]
        arrivals[int(message.payload)] = time.perf_counter()
        handed.put(int(message.payload))
        if len(arrivals) == n:
            got_all.set()

    subscribed = threading.Event()
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    sub.on_message = on_message
    sub.on_subscribe = lambda *a: subscribed.set()
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    sub.subscribe(topic, qos=1)
    subscribed.wait(10)
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    pub.connect("127.0.0.1", port)
    pub.loop_start()
    sent: dict[int, float] = {}
    in_hand: dict[int, float] = {}
    for i in range(n):
        sent[i] = time.perf_counter()
        pub.publish(topic, str(i).encode(), qos=1).wait_for_publish(5)
        handed.get(timeout=10)  # like ours: the message is in the calling thread's hands
        in_hand[i] = time.perf_counter()
        time.sleep(0.002)
    got_all.wait(30)
    latencies = [in_hand[i] - sent[i] for i in range(n)]
    in_callback = [arrivals[i] - sent[i] for i in range(n) if i in arrivals]
    # throughput
    arrivals.clear()
    got_all.clear()
    started = time.perf_counter()
    infos = [pub.publish(topic, str(i).encode(), qos=1) for i in range(n)]
    for info in infos:
        info.wait_for_publish(30)
    got_all.wait(60)
    rate = len(arrivals) / (time.perf_counter() - started)
    for client in (pub, sub):
        client.disconnect()
        client.loop_stop()
    return latencies, in_callback, rate


def delegate_latency(url: str, n: int) -> tuple[list[float], float]:
    from delegate.adapters.bus import open_bus
    from delegate.core.protocol import Receiver, build_envelope, encode, sign

    job_id, token = secrets.token_hex(4), secrets.token_urlsafe(32)
    bus = open_bus(url)
    sub = bus.subscribe(job_id)
    receiver = Receiver(job_id, token)
    latencies = []
    for seq in range(1, n + 1):
        started = time.perf_counter()
        envelope = sign(build_envelope(job_id=job_id, seq=seq, event="progress"), token)
        bus.publish(job_id, encode(envelope))
        message = sub.get(timeout=10)
        assert message is not None
        assert receiver.check(message.payload).__class__.__name__ == "Accepted"
        sub.ack(message)
        latencies.append(time.perf_counter() - started)
        time.sleep(0.002)
    # throughput: a publisher thread at full speed, the subscriber verifying every message
    job2 = secrets.token_hex(4)
    sub2 = bus.subscribe(job2)
    receiver2 = Receiver(job2, token)
    payloads = [
        encode(sign(build_envelope(job_id=job2, seq=s, event="progress"), token))
        for s in range(1, n + 1)
    ]
    started = time.perf_counter()
    publisher = threading.Thread(target=lambda: [bus.publish(job2, p) for p in payloads])
    publisher.start()
    accepted = 0
    while accepted < n:
        message = sub2.get(timeout=30)
        if message is None:
            break
        accepted += receiver2.check(message.payload).__class__.__name__ == "Accepted"
        sub2.ack(message)
    rate = accepted / (time.perf_counter() - started)
    publisher.join()
    sub.close()
    sub2.close()
    bus.close()
    return latencies, rate


def fresh_process(url: str, port: int, n: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = bench_env(Path(tmp) / "state", DELEGATE_BUS=url)
        exe = delegate_exe()
        job = started_job(env)
        ours, reference, bare = [], [], []
        for i in range(n):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], check=True)
            bare.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(
                [exe, "publish", "--job", job, "--event", "progress", "--detail", f"step {i}"],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            ours.append(time.perf_counter() - started)
            started = time.perf_counter()
            subprocess.run(
                [
                    "mosquitto_pub",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-q",
                    "1",
                    "-t",
                    "bench/ref",
                    "-m",
                    "x",
                ],
                check=True,
            )
            reference.append(time.perf_counter() - started)
    return ours, reference, bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--processes", type=int, default=40)
    args = parser.parse_args()
    precompile()
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_broker(Path(tmp))
        try:
            raw_lat, raw_callback, raw_rate = raw_paho_latency(broker.port, args.n)
            our_lat, our_rate = delegate_latency(broker.url, args.n)
            ours, reference, bare = fresh_process(broker.url, broker.port, args.processes)
        finally:
            broker.stop()
    raw, our = summary_ms(raw_lat), summary_ms(our_lat)
    fresh = summary_ms(ours)
    emit(
        {
            "benchmark": "MQTT over loopback mosquitto",
            "latency_raw_paho_qos1": raw,
            "latency_raw_paho_in_callback": summary_ms(raw_callback),
            "latency_delegate_signed_verified": our,
            "latency_p50_ratio": round(our["p50_ms"] / raw["p50_ms"], 2),
            "latency_target": "p50 within 2x of raw paho (PUBACK, message in the caller's hands)",
            "publish_fresh_process": fresh,
            "mosquitto_pub_fresh_process": summary_ms(reference),
            "bare_python_fresh_process": summary_ms(bare),
            "publish_fresh_target_p50_ms": 60,
            "throughput_msgs_per_s": {"raw_paho": round(raw_rate), "delegate": round(our_rate)},
            "meets_latency_target": our["p50_ms"] <= 2 * raw["p50_ms"],
            "meets_fresh_publish_target": fresh["p50_ms"] <= 60,
        }
    )


if __name__ == "__main__":
    main()
