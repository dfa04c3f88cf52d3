"""watch, publish and the audit trail over MQTT, against a real Mosquitto."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from delegate.adapters.bus import open_bus
from delegate.core.model import JobState
from delegate.core.protocol import build_envelope, encode, sign
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State

from .helpers import json_lines, popen_cli, retry_until, run_cli
from .mqtt_fixtures import Broker


def _state(home: Path, url: str) -> State:
    return State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_BUS": url})


def test_round_trip_over_mqtt(home: Path, broker: Broker):
    env = {"DELEGATE_BUS": broker.url}
    job_id = run_cli(home, "register", env=env).stdout.strip()
    ready = home / "watch.ready"
    watcher = popen_cli(home, "watch", job_id, "--ready-file", str(ready), env=env)
    retry_until(ready.exists, timeout=20)
    for event in ("started", "progress", "completed"):
        result = run_cli(home, "publish", "--job", job_id, "--event", event, env=env)
        assert result.returncode == 0, result.stderr
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert [(e["seq"], e["event"]) for e in json_lines(out)] == [
        (1, "started"),
        (2, "progress"),
        (3, "completed"),
    ]
    record = json.loads(run_cli(home, "show", job_id, "--json", env=env).stdout)
    assert record["bus"]["url"] == broker.url and record["status"] == "completed"


def test_a_late_subscriber_gets_the_retained_outcome_at_once(home: Path, broker: Broker):
    state = _state(home, broker.url)
    for terminal, code in (("completed", 0), ("error", 1)):
        job, _ = state.registry.register(bus={"url": broker.url}, idle_timeout_s=60)
        publish_event(state, job.job_id, "started")
        publish_event(state, job.job_id, terminal, detail="done")
        started = time.monotonic()
        result = run_cli(home, "watch", job.job_id, env={"DELEGATE_BUS": broker.url})
        assert result.returncode == code, result.stderr
        assert time.monotonic() - started < 10  # not an idle timeout: the retained event
        assert json_lines(result.stdout)[-1]["event"] == terminal


def test_watch_survives_a_broker_killed_and_restarted(home: Path, broker: Broker):
    state = _state(home, broker.url)
    job, _ = state.registry.register(bus={"url": broker.url}, idle_timeout_s=120)
    ready = home / "watch.ready"
    watcher = popen_cli(
        home, "watch", job.job_id, "--ready-file", str(ready), env={"DELEGATE_BUS": broker.url}
    )
    retry_until(ready.exists, timeout=20)
    publish_event(state, job.job_id, "started")
    publish_event(state, job.job_id, "progress", detail="before the crash")
    retry_until(lambda: len(state.audit.read_events(job.job_id, kind="received")) == 2, timeout=20)
    # A broker killed with SIGKILL keeps what it last saved: wait for a save that holds the
    # subscriber's session (mosquitto saves on a timer, about every 2 s with interval 1).
    broker.wait_for_save()
    broker.kill()
    broker.start()
    # the publisher retries until the broker is back; the watcher reconnects by itself
    for i in range(3):
        publish_event(state, job.job_id, "progress", detail=f"after the crash {i}")
    publish_event(state, job.job_id, "completed", detail="done")
    out, err = watcher.communicate(timeout=60)
    assert watcher.returncode == 0, err
    seqs = [e["seq"] for e in json_lines(out)]
    assert seqs == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing twice
    # the state dir's supervisor receives them (after the watcher, which only follows)
    retry_until(lambda: len(state.audit.read_events(job.job_id, kind="received")) >= 6, timeout=30)
    received = [e["seq"] for e in state.audit.read_events(job.job_id, kind="received")]
    assert received == [1, 2, 3, 4, 5, 6]
    assert state.registry.get(job.job_id).status is JobState.COMPLETED


def test_a_burst_of_20000_events_arrives_complete(home: Path, broker: Broker):
    state = _state(home, broker.url)
    job, _ = state.registry.register(bus={"url": broker.url})
    bus = open_bus(broker.url)
    sub = bus.subscribe(job.job_id)
    try:
        token = job.auth_token
        payloads = [
            encode(sign(build_envelope(job_id=job.job_id, seq=seq, event="progress"), token))
            for seq in range(1, 20_001)
        ]
        for payload in payloads:
            bus.publish(job.job_id, payload)
        seen: set[int] = set()
        deliveries = 0
        deadline = time.monotonic() + 120
        while len(seen) < 20_000 and time.monotonic() < deadline:
            message = sub.get(timeout=1)
            if message is None:
                continue
            deliveries += 1
            seen.add(json.loads(message.payload)["seq"])
            sub.ack(message)
        assert seen == set(range(1, 20_001))  # 0 lost
        assert deliveries >= 20_000  # duplicates, if any, are what the receiver drops by seq
    finally:
        sub.close()
        bus.close()


def test_an_event_signed_outside_the_toolkit_is_accepted(home: Path, broker: Broker, tmp_path):
    state = _state(home, broker.url)
    job, _ = state.registry.register(bus={"url": broker.url}, idle_timeout_s=30)
    topic = f"delegate/jobs/{job.job_id}/events"
    script = tmp_path / "send.sh"
    # Canonical JSON by hand, HMAC by openssl, sent by mosquitto_pub: no delegate code involved.
    script.write_text(f"""
set -eu
sign() {{ printf '%s' "$1" | openssl dgst -sha256 -hmac "$TOKEN" | sed 's/^.*= //'; }}
send() {{
  body="{{\\"data\\":{{}},\\"detail\\":\\"$2\\",\\"event\\":\\"$1\\",\\"job_id\\":\\"{job.job_id}\\",\\"schema_version\\":1,\\"seq\\":$3,\\"timestamp\\":\\"2026-11-22T00:00:00Z\\"}}"
  sig=$4
  [ "$sig" = auto ] && sig=$(sign "$body")
  msg=$(printf '%s' "$body" | sed "s/\\"data\\":{{}}/\\"data\\":{{\\"hmac_sig\\":\\"$sig\\"}}/")
  mosquitto_pub -h 127.0.0.1 -p {broker.port} -q 1 -t {topic} -m "$msg"
}}
send started "from the shell" 1 auto
send progress "forged" 2 0000000000000000000000000000000000000000000000000000000000000000
send completed "shell says done" 3 auto
""")
    ready = home / "watch.ready"
    watcher = popen_cli(
        home, "watch", job.job_id, "--ready-file", str(ready), env={"DELEGATE_BUS": broker.url}
    )
    retry_until(ready.exists, timeout=20)
    subprocess.run(
        ["bash", str(script)], check=True, env={"TOKEN": job.auth_token, "PATH": "/usr/bin:/bin"}
    )
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert [(e["seq"], e["event"]) for e in json_lines(out)] == [(1, "started"), (3, "completed")]
    rejected = state.audit.read_events(job.job_id, kind="rejected")
    assert [(r["reason"], r["seq"]) for r in rejected] == [("bad_signature", 2)]


def test_submit_and_the_wrapper_work_unchanged_over_mqtt(
    home: Path, broker: Broker, tmux_env, tmp_path: Path
):
    env = {**tmux_env, "DELEGATE_BUS": broker.url}
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "shell",
        "--workdir",
        str(tmp_path),
        "--prompt",
        'delegate publish --event progress --detail "over mqtt"; exit 0',
        "--idle-timeout",
        "30",
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    job = _state(home, broker.url).registry.get(events[0]["job_id"])
    assert job.bus["url"] == broker.url and job.status is JobState.COMPLETED
    failed = run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "shell",
        "--workdir",
        str(tmp_path),
        "--prompt",
        "exit 4",
        "--idle-timeout",
        "30",
        env=env,
        timeout=120,
    )
    assert failed.returncode == 1 and '"exit_status": 4' in failed.stdout
