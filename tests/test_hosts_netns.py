"""Three machines in network namespaces joined by a bridge: a delegator, a broker (the example's
TLS + ACL configuration) and an agent host with its own state dir and tmux server."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import cli_env, json_lines, retry_until, signed_assignment
from .mqtt_fixtures import ROOT, make_ca, server_cert
from .netns import Lab, netns_available
from .tmux_fixtures import kill_processes_of

pytestmark = pytest.mark.skipif(not netns_available(), reason="network namespaces need root")

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
HOST = "build-1"  # the host the example ACL names
LOST_AFTER_S = 20


class Machines:
    def __init__(self, lab: Lab, folder: Path, home: Path, host_home: Path) -> None:
        self.lab, self.folder, self.home, self.host_home = lab, folder, home, host_home
        self.env: dict[str, str] = {}
        self.host_env: dict[str, str] = {}
        self.broker: subprocess.Popen[bytes] | None = None
        self.server: subprocess.Popen[bytes] | None = None

    def delegate(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.lab.run(
            "d", [sys.executable, "-m", "delegate", *args], env=self.env, timeout=timeout
        )

    def here(self) -> State:
        return State.open(env={"DELEGATE_HOME": str(self.home)})

    def there(self) -> State:
        return State.open(env={"DELEGATE_HOME": str(self.host_home)})


def _start_broker(lab: Lab, folder: Path, address: str) -> subprocess.Popen[bytes]:
    certs = folder / "certs"
    certs.mkdir(parents=True)
    (folder / "data").mkdir()
    make_ca(certs, "ca")
    server_cert(certs, f"IP:{address}")
    passwd = folder / "passwd"
    for i, user in enumerate(("delegator", f"host-{HOST}")):
        flags = ["-b", "-c"] if i == 0 else ["-b"]
        subprocess.run(["mosquitto_passwd", *flags, str(passwd), user, f"{user}-pw"], check=True)
    example = ROOT / "examples" / "mosquitto"
    (folder / "acl").write_text((example / "acl").read_text())
    config = (example / "mosquitto.conf").read_text()
    config = config.replace("/var/lib/mosquitto/", f"{folder / 'data'}/")
    config = config.replace("/etc/mosquitto/", f"{folder}/")
    import getpass

    (folder / "mosquitto.conf").write_text(f"user {getpass.getuser()}\n" + config)
    log = folder / "mosquitto.log"
    proc = lab.popen(
        "b",
        [MOSQUITTO, "-c", str(folder / "mosquitto.conf"), "-v"],
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )
    retry_until(
        lambda: log.exists() and "listen socket on port 8883" in log.read_text(), timeout=15
    )
    return proc


@pytest.fixture
def machines(
    request: pytest.FixtureRequest, tmp_path: Path, tmux_socket: str
) -> Iterator[Machines]:
    lost_after = getattr(request, "param", LOST_AFTER_S)
    lab = Lab()
    home, host_home = tmp_path / "state", tmp_path / "agent-host"
    made = Machines(lab, tmp_path, home, host_home)
    try:
        lab.machine("d")
        broker_ip = lab.machine("b")
        lab.machine("h")
        made.broker = _start_broker(lab, tmp_path / "broker", broker_ip)
        url = f"mqtts://{broker_ip}:8883"
        ca = str(tmp_path / "broker" / "certs" / "ca.crt")
        made.env = cli_env(
            home,
            {
                "DELEGATE_BUS": url,
                "MQTT_CA_CERTS": ca,
                "MQTT_USERNAME": "delegator",
                "MQTT_PASSWORD": "delegator-pw",
            },
        )
        made.host_env = cli_env(
            host_home,
            {
                "DELEGATE_BUS": url,
                "MQTT_CA_CERTS": ca,
                "MQTT_USERNAME": f"host-{HOST}",
                "MQTT_PASSWORD": f"host-{HOST}-pw",
                "DELEGATE_TMUX_SOCKET": tmux_socket,
                "HOME": str(tmp_path),
                "SHELL": "/bin/sh",
            },
        )
        added = made.delegate("host", "add", HOST, "--lost-after", str(lost_after))
        assert added.returncode == 0, added.stderr
        key_file = tmp_path / "host.key"
        key_file.write_text(added.stdout)
        key_file.chmod(0o600)
        work = tmp_path / "work"
        work.mkdir()
        made.server = lab.serve_host(
            "h",
            HOST,
            key_file=key_file,
            workdir=work,
            env=made.host_env,
            flags=("--presence-every", "2"),
        )
        yield made
    finally:
        lab.close()  # every process in the three machines, then the namespaces
        kill_processes_of(home)
        kill_processes_of(host_home)


def _submit(m: Machines, prompt: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return m.delegate("submit", "--host", HOST, "--agent", "shell", *flags, "--prompt", prompt)


def test_three_machines_submit_waits_and_the_token_is_nowhere_on_the_broker(machines: Machines):
    m = machines
    result = _submit(m, 'delegate publish --event progress --detail "from build-1"', "--wait")
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    job_id = events[0]["job_id"]
    here, there = m.here(), m.there()
    retry_until(lambda: there.registry.get(job_id).status is JobState.COMPLETED, timeout=30)
    assert [e["event"] for e in here.audit.read_events(job_id, "received")] == [
        "started",
        "progress",
        "completed",
    ]
    assert [e["event"] for e in there.audit.read_events(job_id, "published")] == [
        "started",
        "progress",
        "completed",
    ]
    hosts = json_lines(m.delegate("host", "list", "--json").stdout)
    assert [(h["name"], h["online"]) for h in hosts] == [(HOST, True)]
    # the broker keeps what it holds (the retained outcome, queued messages) in its
    # persistence file: the job is there, its token is not
    token = here.registry.get(job_id).auth_token.encode()
    assert m.broker is not None
    m.broker.send_signal(signal.SIGTERM)  # saves the database on the way out
    m.broker.wait(timeout=15)
    saved = (m.folder / "broker" / "data" / "mosquitto.db").read_bytes()
    assert job_id.encode() in saved and token not in saved


def test_a_cut_link_shorter_than_lost_after_loses_and_doubles_nothing(machines: Machines):
    m = machines
    prompt = (
        "delegate publish --event progress --detail before; sleep 4;"
        " delegate publish --event progress --detail during; sleep 16;"
        " delegate publish --event progress --detail after"
    )
    submitted = _submit(m, prompt, "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    here = m.here()

    def received() -> list[tuple[str, str]]:
        return [
            (e["event"], e["envelope"].get("detail", ""))
            for e in here.audit.read_events(job_id, "received")
        ]

    retry_until(lambda: ("progress", "before") in received(), timeout=60)
    m.lab.cut("h")
    time.sleep(15)  # the outage itself: what the test is about
    assert ("progress", "during") not in received()
    m.lab.restore("h")
    ended = retry_until(lambda: (j := here.registry.get(job_id)).status.terminal and j, timeout=90)
    assert ended.status is JobState.COMPLETED, ended.error
    assert received() == [
        ("started", "shell starting"),
        ("progress", "before"),
        ("progress", "during"),
        ("progress", "after"),
        ("completed", received()[-1][1]),
    ]
    assert [e["seq"] for e in here.audit.read_events(job_id, "received")] == [1, 2, 3, 4, 5]


KILL_LOST_AFTER_S = 6


@pytest.mark.parametrize("machines", [KILL_LOST_AFTER_S], indirect=True)
def test_a_host_killed_outright_fails_its_job_host_lost(machines: Machines):
    m = machines
    submitted = _submit(m, "sleep 300", "--no-wait")
    job_id = submitted.stdout.strip()
    here = m.here()
    retry_until(lambda: here.registry.get(job_id).status is JobState.RUNNING, timeout=60)
    m.lab.kill_machine("h")
    killed_at = time.monotonic()
    ended = retry_until(
        lambda: (j := here.registry.get(job_id)).status.terminal and j,
        timeout=KILL_LOST_AFTER_S + 40,
    )
    assert ended.status is JobState.ERROR and ended.error == "host_lost"
    # not before its grace period (counted from the last presence, up to 2 s before the kill)
    assert time.monotonic() - killed_at >= KILL_LOST_AFTER_S - 2.5
    verdict = retry_until(lambda: here.audit.read_events(job_id, "reconciled"), timeout=10)[0]
    assert verdict["evidence"]["host"] == HOST
    assert verdict["evidence"]["silent_s"] >= KILL_LOST_AFTER_S


def test_forged_and_replayed_assignments_and_a_remote_cancel_across_machines(
    machines: Machines, tmp_path: Path
):
    m = machines

    work = tmp_path / "work"
    key = bytes.fromhex((tmp_path / "host.key").read_text().strip())
    forged = signed_assignment(b"\x01" * 32, HOST, "forged", work)
    genuine = signed_assignment(key, HOST, "genuine", work)
    # published from the delegator's machine with its broker login, as an attacker holding
    # that login (but not the host key) could
    publish = (
        "import os, sys, ssl, paho.mqtt.publish as p;"
        "p.single(sys.argv[1], open(sys.argv[2], 'rb').read(), qos=1, hostname=sys.argv[3],"
        " port=8883, auth={'username': 'delegator', 'password': 'delegator-pw'},"
        " tls={'ca_certs': os.environ['MQTT_CA_CERTS']})"
    )
    broker_ip = m.lab.addresses["b"]
    for name, payload in (("forged", forged), ("genuine", genuine), ("again", genuine)):
        (tmp_path / name).write_bytes(payload)
        sent = m.lab.run(
            "d",
            [
                sys.executable,
                "-c",
                publish,
                f"delegate/hosts/{HOST}/assign",
                str(tmp_path / name),
                broker_ip,
            ],
            env=m.env,
            timeout=60,
        )
        assert sent.returncode == 0, sent.stderr
        if name == "genuine":
            retry_until(lambda: m.there().registry.exists("0badf00d"), timeout=30)
    audit = m.host_home / "logs" / f"host-{HOST}.ndjson"

    def refusals() -> list[str]:
        return [
            json.loads(x).get("reason")
            for x in audit.read_text().splitlines()
            if json.loads(x)["kind"] == "refused"
        ]

    retry_until(lambda: refusals() == ["bad_signature", "replayed"], timeout=30)
    assert [j.job_id for j in m.there().registry.list()] == ["0badf00d"]

    # cancel across machines: the agent's whole tree on the host is killed
    submitted = _submit(m, "sleep 300 & echo $! > child.pid; sleep 300", "--no-wait")
    job_id = submitted.stdout.strip()
    retry_until(
        lambda: (
            m.there().registry.exists(job_id)
            and m.there().registry.get(job_id).status is JobState.RUNNING
            and (work / "child.pid").exists()
        ),
        timeout=60,
    )
    child = int((work / "child.pid").read_text())
    assert m.delegate("cancel", job_id).returncode == 0
    retry_until(lambda: m.there().registry.get(job_id).status is JobState.CANCELLED, timeout=30)
    retry_until(lambda: not Path(f"/proc/{child}").exists(), timeout=30)
