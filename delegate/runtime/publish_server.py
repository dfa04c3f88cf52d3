"""A state dir's warm publisher, for the jobs no wrapper serves
(`python -m delegate.runtime.publish_server SOCKET LOCK_FD`; services/jobs/warm_publish starts
it, holding the state dir's publish-server.lock on LOCK_FD, which it keeps for its life).

- It answers publish requests for any job of its state dir (publish_socket's protocol, the
  same answers as a wrapper's) with the registry, the audit log, the bus and HMAC loaded once.
  A job's last event it leaves to its client (`{"direct": true}`; warm_publish says why).
- It works in `/`, with the environment its starter gave it (warm_publish.server_env).
- A request whose fingerprint is not the server's, or that arrives after the server's own code
  changed on disk, is answered `{"stale": true}` unpublished (its client publishes by itself),
  and the server ends.
- It ends after `$DELEGATE_PUBLISH_WARM_S` idle seconds; when its socket is removed or replaced
  or its state dir is gone; on `{"op": "stop"}`. Ending, it stops listening first and answers
  every request that reached it, so no publish is lost or made twice.
- Its stdout and stderr are the state dir's publish-server.log.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import delegate.adapters.bus.sqlite  # noqa: F401 - the default bus, loaded before a request
from delegate.adapters.bus.base import Bus
from delegate.adapters.publish_socket import PublishServer
from delegate.config.settings import publish_warm_s, state_home_text
from delegate.core.errors import guarded
from delegate.core.ids import is_job_id
from delegate.services.jobs.publish import answer_publish
from delegate.services.jobs.warm_publish import SERVED_EVENTS, fingerprint
from delegate.services.state import State

USAGE = "usage: python -m delegate.runtime.publish_server SOCKET LOCK_FD"
STALE = {"ok": False, "stale": True, "message": "another server's request", "exit_code": 75}
DIRECT = {"ok": False, "direct": True, "message": "publish it yourself", "exit_code": 75}


class WarmPublisher:
    """What the server answers, and when it is time to end."""

    def __init__(self, state: State, idle_s: float) -> None:
        self.state = state
        self.idle_s = idle_s
        # as its clients name it (entry/publish), so that the fingerprints compare
        self.home = state_home_text(state.env) or str(state.layout.home)
        self.fingerprint = fingerprint(self.home, state.env)
        self.code = loaded_code()
        self.ending = threading.Event()
        self.buses: dict[str, Bus] = {}  # kept open: see services/jobs/publish._send

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "stop":
            self.ending.set()
            return {"ok": True}
        if request.pop("fingerprint", None) != self.fingerprint or self.code_changed():
            self.ending.set()  # the client starts a server of its own once this one is gone
            return STALE
        if request.get("event") not in SERVED_EVENTS:
            return DIRECT
        job = request.get("job")
        if not is_job_id(job):
            return {"ok": False, "message": f"not a job id: {job!r}", "exit_code": 64}
        return answer_publish(self.state, str(job), request, kept=self.buses)

    def code_changed(self) -> bool:
        """Whether a module this server loaded changed on disk since (the ones it loads later
        are added: they are loaded as they are now)."""
        now = loaded_code()
        if any(now.get(path, -1) != mtime for path, mtime in self.code.items()):
            return True
        self.code = now
        return False

    def ends(self, idle_s: float) -> bool:
        return self.ending.is_set() or idle_s >= self.idle_s or not os.path.isdir(self.home)

    def close(self) -> None:
        for bus in self.buses.values():
            bus.close()


def loaded_code() -> dict[str, int]:
    """The modification time of every delegate module this process loaded: a toolkit upgraded
    or edited under a running server makes it stale."""
    code = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.startswith("delegate") and path:
            try:
                code[path] = os.stat(path).st_mtime_ns
            except OSError:
                code[path] = -1
    return code


def socket_and_lock(argv: list[str] | None, usage: str) -> tuple[str, int] | None:
    """A state dir's warm server's arguments, SOCKET and LOCK_FD (its starter holds the lock
    on that descriptor and hands it down); None, having printed `usage`, when they are not."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or not argv[1].isdigit():
        print(usage, file=sys.stderr)
        return None
    os.chdir("/")  # nobody's folder: a worktree it started in can be cleaned
    return argv[0], int(argv[1])


def main(argv: list[str] | None = None) -> int:
    given = socket_and_lock(argv, USAGE)
    if given is None:
        return 64
    path, lock = given

    def serve() -> int:
        state = State.open()
        publisher = WarmPublisher(state, publish_warm_s(state.env))
        try:
            tick_s = min(1.0, max(publisher.idle_s / 2, 0.05))
            PublishServer(path, publisher.answer, ends_when=publisher.ends, tick_s=tick_s).wait()
        finally:
            publisher.close()
        return 0

    try:
        return guarded(serve)
    finally:
        os.close(lock)  # the next publish may start a server


if __name__ == "__main__":
    sys.exit(main())
