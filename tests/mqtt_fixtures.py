"""Private Mosquitto brokers for the tests: a plain one per module, and a TLS one started from
examples/mosquitto/mosquitto.conf with certificates, users and ACLs made by the test."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
MOSQUITTO = "/usr/sbin/mosquitto"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Broker:
    def __init__(self, folder: Path, config: str, port: int) -> None:
        self.folder = folder
        self.port = port
        self.config_path = folder / "mosquitto.conf"
        self.config_path.write_text(config)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.folder / "mosquitto.log").open("ab")
        self.process = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config_path)], stdout=log, stderr=log
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError((self.folder / "mosquitto.log").read_text())
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("mosquitto did not start listening")

    def saves(self) -> int:
        log = self.folder / "mosquitto.log"
        return log.read_text().count("Saving in-memory database") if log.exists() else 0

    def wait_for_save(self, timeout: float = 15.0) -> None:
        """Wait until the broker has written its persistence file whole once more, from now
        on: its log says "Saving" as a save starts, so a kill right after the first such line
        may leave the save before it, made before now; the second line starts after the
        first save is written (the broker saves on its one thread)."""
        before = self.saves()
        deadline = time.monotonic() + timeout
        while self.saves() <= before + 1:
            if time.monotonic() > deadline:
                raise RuntimeError("mosquitto did not save its database")
            time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"


PLAIN = """
user {user}
listener {port} 127.0.0.1
allow_anonymous true
persistence true
persistence_location {data}/
autosave_interval 1
max_queued_messages 1000000
max_queued_bytes 0
max_inflight_messages 1000
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    folder = tmp_path_factory.mktemp("mosquitto")
    (folder / "data").mkdir()
    port = free_port()
    b = Broker(folder, PLAIN.format(port=port, data=folder / "data", user=_user()), port)
    b.start()
    yield b
    b.stop()


def _user() -> str:
    """Run as ourselves: started as root, mosquitto would switch to its own user and could not
    write its persistence file into the test's folder."""
    import getpass

    return getpass.getuser()


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder: Path, name: str) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "2",
        "-subj",
        f"/CN={name}",
        cwd=folder,
    )


def server_cert(certs: Path, san: str) -> None:
    """server.key and server.crt, signed by the CA in `certs`, for the names in `san`."""
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=broker",
        cwd=certs,
    )
    (certs / "ext").write_text(f"subjectAltName={san}\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "ext",
        cwd=certs,
    )


class TlsBroker(NamedTuple):
    broker: Broker
    ca: Path
    wrong_ca: Path
    users: dict[str, str]

    @property
    def url(self) -> str:
        return f"mqtts://localhost:{self.broker.port}"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsBroker]:
    folder = tmp_path_factory.mktemp("mosquitto-tls")
    certs = folder / "certs"
    certs.mkdir()
    (folder / "data").mkdir()
    make_ca(certs, "ca")
    make_ca(certs, "wrong-ca")
    server_cert(certs, "DNS:localhost,IP:127.0.0.1")
    users = {"delegator": "delegator-secret", "agent": "agent-secret"}
    passwd = folder / "passwd"
    for i, (user, password) in enumerate(users.items()):
        flags = ["-b", "-c"] if i == 0 else ["-b"]
        subprocess.run(["mosquitto_passwd", *flags, str(passwd), user, password], check=True)
    example = ROOT / "examples" / "mosquitto"
    (folder / "acl").write_text((example / "acl").read_text())
    port = free_port()
    config = (example / "mosquitto.conf").read_text()
    config = config.replace("/var/lib/mosquitto/", f"{folder / 'data'}/")
    config = config.replace("/etc/mosquitto/", f"{folder}/")
    assert "listener 8883\n" in config
    config = config.replace("listener 8883\n", f"listener {port} 127.0.0.1\n")
    config = f"user {_user()}\n" + config
    b = Broker(folder, config, port)
    b.start()
    yield TlsBroker(b, certs / "ca.crt", certs / "wrong-ca.crt", users)
    b.stop()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Broker]:
    """A broker of the test's own, which it may stop and start again."""
    folder = tmp_path / "broker"
    (folder / "data").mkdir(parents=True)
    port = free_port()
    broker = Broker(folder, PLAIN.format(port=port, data=folder / "data", user=_user()), port)
    broker.start()
    yield broker
    broker.stop()
