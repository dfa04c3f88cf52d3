"""A delegator, a broker and agent hosts in network namespaces (root), for the host benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _common import ROOT

sys.path.insert(0, str(ROOT))
from tests.netns import Lab

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"


class Fleet:
    def __init__(self, lab: Lab, folder: Path, hosts: list[str]) -> None:
        self.lab, self.folder, self.hosts = lab, folder, hosts
        self.home = folder / "delegator"
        self.url = ""
        self.env: dict[str, str] = {}

    def host_home(self, name: str) -> Path:
        return self.folder / name


def _wait_for(check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.05)


@contextmanager
def fleet(folder: Path, hosts: list[str], *, socket_prefix: str) -> Iterator[Fleet]:
    """The delegator "d", a plain broker "b" and one namespace per host, each host serving."""
    import os

    lab = Lab()
    made = Fleet(lab, folder, hosts)
    try:
        lab.machine("d")
        broker = lab.machine("b")
        for n, _ in enumerate(hosts):
            lab.machine(f"h{n}")
        (folder / "broker").mkdir(parents=True)
        config = folder / "broker" / "mosquitto.conf"
        config.write_text(
            "user root\nlistener 1883\nallow_anonymous true\nmax_queued_messages 1000000\n"
            "max_inflight_messages 1000\n"
        )
        log = folder / "broker" / "log"
        lab.popen(
            "b",
            [MOSQUITTO, "-c", str(config), "-v"],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        _wait_for(lambda: log.exists() and "listen socket on port 1883" in log.read_text(), 15)
        made.url = f"mqtt://{broker}:1883"
        base = {k: v for k, v in os.environ.items() if not k.startswith("DELEGATE_")}
        made.env = {
            **base,
            "DELEGATE_HOME": str(made.home),
            "DELEGATE_BUS": made.url,
            "DELEGATE_TMUX_SOCKET": f"{socket_prefix}-d",
        }
        for n, name in enumerate(hosts):
            key = lab.run(
                "d", [sys.executable, "-m", "delegate", "host", "add", name], env=made.env
            ).stdout
            key_file = folder / f"{name}.key"
            key_file.write_text(key)
            key_file.chmod(0o600)
            work = folder / f"{name}-work"
            work.mkdir()
            host_env = {
                **base,
                "DELEGATE_HOME": str(made.host_home(name)),
                "DELEGATE_BUS": made.url,
                "DELEGATE_TMUX_SOCKET": f"{socket_prefix}-{n}",
            }
            lab.serve_host(f"h{n}", name, key_file=key_file, workdir=work, env=host_env)
        yield made
    finally:
        lab.close()
        for n in range(len(hosts)):
            subprocess.run(
                ["tmux", "-L", f"{socket_prefix}-{n}", "kill-server"], capture_output=True
            )
        subprocess.run(["tmux", "-L", f"{socket_prefix}-d", "kill-server"], capture_output=True)
