"""The production broker example (examples/mosquitto): TLS, passwords and ACLs, for real."""

from __future__ import annotations

import json
import time

import pytest

from delegate.adapters.bus.mqtt import BrokerAuthError, BrokerTlsError, MqttBus, settings_from
from delegate.core.errors import ConfigError

from .helpers import (
    assert_one_line_error,
    json_lines,
    popen_cli,
    retry_until,
    run_cli,
    submit_shell,
)
from .mqtt_fixtures import TlsBroker, free_port


def _env(tls: TlsBroker, user: str | None, *, ca=None, password=None) -> dict[str, str]:
    env = {"MQTT_CA_CERTS": str(ca or tls.ca), "DELEGATE_BUS": tls.url}
    if user:
        env["MQTT_USERNAME"] = user
        env["MQTT_PASSWORD"] = password or tls.users[user]
    return env


def _bus(tls: TlsBroker, user: str | None, **kwargs) -> MqttBus:
    return MqttBus(settings_from(tls.url, _env(tls, user, **kwargs)))


def test_delegator_reads_and_agent_writes_over_tls(home, tls_broker: TlsBroker):
    delegator, agent = _env(tls_broker, "delegator"), _env(tls_broker, "agent")
    job_id = run_cli(home, "register", env=delegator).stdout.strip()
    ready = home / "ready"
    watcher = popen_cli(home, "watch", job_id, "--ready-file", str(ready), env=delegator)
    retry_until(ready.exists, timeout=20)
    for event in ("started", "progress", "completed"):
        result = run_cli(home, "publish", "--job", job_id, "--event", event, env=agent)
        assert result.returncode == 0, result.stderr
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert [e["event"] for e in json_lines(out)] == ["started", "progress", "completed"]
    record = (home / "jobs" / f"{job_id}.json").read_text()
    assert "agent-secret" not in record and "delegator-secret" not in record


def test_anonymous_clients_are_refused(tls_broker: TlsBroker):
    bus = _bus(tls_broker, None)
    with pytest.raises(BrokerAuthError, match="anonymous"):
        bus.subscribe("0123abcd")
    with pytest.raises(BrokerAuthError):
        bus.publish("0123abcd", b"x")
    bus.close()


def test_a_wrong_password_is_refused(tls_broker: TlsBroker):
    with pytest.raises(BrokerAuthError, match="delegator"):
        _bus(tls_broker, "delegator", password="guess").probe()


def test_an_agent_cannot_read_any_job(tls_broker: TlsBroker):
    agent = _bus(tls_broker, "agent")
    delegator = _bus(tls_broker, "delegator")
    try:
        try:
            sub = agent.subscribe("fedcba98")
        except BrokerAuthError:
            return  # refused outright in SUBACK
        delegator_sub = delegator.subscribe("fedcba98")
        agent.publish("fedcba98", b"for the delegator only")
        got = delegator_sub.get(timeout=5)
        assert got is not None and got.payload == b"for the delegator only"
        assert sub.get(timeout=1) is None  # granted on paper, but nothing is delivered
    finally:
        agent.close()
        delegator.close()


def test_a_wrong_ca_fails_fast_with_a_clear_error(home, tls_broker: TlsBroker):
    started = time.monotonic()
    with pytest.raises(BrokerTlsError, match="cannot verify the certificate"):
        _bus(tls_broker, "delegator", ca=tls_broker.wrong_ca).probe()
    assert time.monotonic() - started < 3
    job_id = run_cli(home, "register", env=_env(tls_broker, "delegator")).stdout.strip()
    started = time.monotonic()
    result = run_cli(
        home, "watch", job_id, env=_env(tls_broker, "delegator", ca=tls_broker.wrong_ca)
    )
    assert_one_line_error(result)
    assert result.returncode == 69 and "MQTT_CA_CERTS" in result.stderr
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("case", "failing"),
    [("ok", None), ("wrong-ca", "tls"), ("wrong-password", "credentials"), ("no-broker", "broker")],
)
def test_doctor_names_what_is_wrong(home, tls_broker: TlsBroker, case: str, failing):
    env = _env(tls_broker, "delegator")
    if case == "wrong-ca":
        env["MQTT_CA_CERTS"] = str(tls_broker.wrong_ca)
    elif case == "wrong-password":
        env["MQTT_PASSWORD"] = "guess"
    elif case == "no-broker":
        env["DELEGATE_BUS"] = f"mqtts://localhost:{free_port()}"
    result = run_cli(home, "doctor", "--json", env=env)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    if failing is None:
        assert result.returncode == 0, checks
        assert [checks[n]["status"] for n in ("broker", "tls", "credentials")] == ["ok"] * 3
    else:
        assert result.returncode == 1
        assert checks[failing]["status"] == "fail", checks
        assert all(c["status"] != "fail" for n, c in checks.items() if n != failing)


def test_bad_mqtt_settings_are_refused(home):
    with pytest.raises(ConfigError, match="prefix"):
        settings_from("mqtt://host:1883?prefix=a/%2B")
    with pytest.raises(ConfigError, match="unknown parameter"):
        settings_from("mqtt://host:1883?colour=blue")
    settings = settings_from("mqtts://u:p%40ss@host?prefix=team", {"MQTT_USERNAME": "other"})
    assert (settings.username, settings.password, settings.port, settings.prefix) == (
        "u",
        "p@ss",
        8883,
        "team",
    )


def test_per_job_settings_travel_in_the_job_record(home, tls_broker: TlsBroker):
    """The bus URL recorded at registration keeps its settings (the CA here), never a password;
    credentials come from each side's environment."""
    url = (
        f"mqtts://delegator:delegator-secret@localhost:{tls_broker.broker.port}?ca={tls_broker.ca}"
    )
    job_id = run_cli(home, "register", env={"DELEGATE_BUS": url}).stdout.strip()
    record = json.loads((home / "jobs" / f"{job_id}.json").read_text())
    assert "delegator-secret" not in json.dumps(record)
    assert f"ca={tls_broker.ca}" in record["bus"]["url"]
    # the agent has no MQTT_CA_CERTS of its own: the job's settings are enough
    agent = {"MQTT_USERNAME": "agent", "MQTT_PASSWORD": "agent-secret"}
    for event in ("started", "completed"):
        published = run_cli(home, "publish", "--job", job_id, "--event", event, env=agent)
        assert published.returncode == 0, published.stderr
    assert "delegator" not in record["bus"]["url"]  # no user either: identity is per side
    # the delegator's own DELEGATE_BUS names the same broker, with its credentials; it gets the
    # retained outcome at once
    watched = run_cli(home, "watch", job_id, env={"DELEGATE_BUS": url})
    assert watched.returncode == 0, watched.stderr
    assert [e["event"] for e in json_lines(watched.stdout)] == ["completed"]
    anonymous = run_cli(home, "watch", job_id)  # no credentials at all: refused, one line
    assert_one_line_error(anonymous)
    assert anonymous.returncode == 69 and "anonymous" in anonymous.stderr


def test_an_agent_reports_with_its_own_write_only_login(
    home, tls_broker: TlsBroker, tmux_env, tmp_path
):
    delegator = _env(tls_broker, "delegator")
    submitter = {
        **tmux_env,
        **delegator,
        "DELEGATE_AGENT_MQTT_USERNAME": "agent",
        "DELEGATE_AGENT_MQTT_PASSWORD": tls_broker.users["agent"],
    }
    script = (
        "env > env.txt\n"
        'delegate publish --event progress --detail "through the wrapper"\n'
        'DELEGATE_PUBLISH_SOCKET= delegate publish --event progress --detail "by itself"\n'
    )
    result = submit_shell(home, submitter, tmp_path, script, "--idle-timeout", "60")
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)  # read by the delegator, which may only read
    assert [e["event"] for e in events] == ["started", "progress", "progress", "completed"]
    env = dict(
        line.split("=", 1)
        for line in (tmp_path / "env.txt").read_text().splitlines()
        if "=" in line
    )
    assert env["MQTT_USERNAME"] == "agent" and env["MQTT_PASSWORD"] == tls_broker.users["agent"]
    assert "delegator-secret" not in (tmp_path / "env.txt").read_text()
    assert not any(k.startswith("DELEGATE_AGENT_") for k in env)
