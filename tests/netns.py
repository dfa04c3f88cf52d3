"""Machines for tests: Linux network namespaces joined by a bridge (root only).

Each machine is a namespace with one interface on a private /24 that exists only inside the
namespaces this lab created; the bridge lives in a namespace of its own, so nothing of the
test's network touches the real one. A machine's link can be cut (its bridge port set down)
and restored. Teardown kills the processes inside the lab's namespaces (found by namespace,
so only what the test started) and deletes the namespaces, which removes their interfaces.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Lab:
    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:6]
        self.subnet = f"10.{random.randint(64, 250)}.{random.randint(0, 250)}"
        self.switch = f"dlg{self.tag}sw"
        self.machines: dict[str, str] = {}  # role -> namespace
        self.addresses: dict[str, str] = {}
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")

    def machine(self, role: str) -> str:
        """A new namespace named after `role`, linked to the bridge; returns its address."""
        number = len(self.machines) + 1
        ns = f"dlg{self.tag}{role}"
        inside, port = f"v{self.tag}{number}", f"p{self.tag}{number}"
        _ip("netns", "add", ns)
        _ip("link", "add", inside, "type", "veth", "peer", "name", port)
        _ip("link", "set", inside, "netns", ns)
        _ip("link", "set", port, "netns", self.switch)
        address = f"{self.subnet}.{number}"
        _ip("-n", ns, "link", "set", inside, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        self.machines[role] = ns
        self.addresses[role] = address
        return address

    def _port(self, role: str) -> str:
        return f"p{self.tag}{list(self.machines).index(role) + 1}"

    def cut(self, role: str) -> None:
        _ip("-n", self.switch, "link", "set", self._port(role), "down")

    def restore(self, role: str) -> None:
        _ip("-n", self.switch, "link", "set", self._port(role), "up")

    def argv(self, role: str, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.machines[role], *argv]

    def popen(self, role: str, argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(role, argv), **kwargs)  # type: ignore[call-overload]

    def run(self, role: str, argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # type: ignore[call-overload, no-any-return]
            self.argv(role, argv), capture_output=True, text=True, **kwargs
        )

    def serve_host(
        self,
        role: str,
        name: str,
        *,
        key_file: Path,
        workdir: Path,
        env: dict[str, str],
        flags: tuple[str, ...] = (),
        timeout: float = 30,
    ) -> subprocess.Popen[bytes]:
        """`delegate host serve` on machine `role`, returned once it serves (its audit log
        exists in the state dir `env` names)."""
        serve = [sys.executable, "-m", "delegate", "host", "serve", "--name", name]
        server = self.popen(
            role,
            [*serve, "--key-file", str(key_file), "--workdir", str(workdir), *flags],
            env=env,
            stdin=subprocess.DEVNULL,
        )
        audit = Path(env["DELEGATE_HOME"]) / "logs" / f"host-{name}.ndjson"
        deadline = time.monotonic() + timeout
        while not audit.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"host {name} did not start serving")
            time.sleep(0.05)
        return server

    def kill_machine(self, role: str) -> None:
        """Everything running in that machine's namespace, at once (a power cut)."""
        pids = subprocess.run(
            ["ip", "netns", "pids", self.machines[role]], capture_output=True, text=True
        ).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        for role in list(self.machines):
            self.kill_machine(role)
        for ns in [*self.machines.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def netns_available() -> bool:
    if os.geteuid() != 0 or (not Path("/usr/sbin/ip").exists() and not Path("/sbin/ip").exists()):
        return False
    probe = f"dlgprobe{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return made.returncode == 0
