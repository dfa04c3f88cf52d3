"""Agent hosts over the broker (DESIGN 13), the delegator's side: the host book, remote submit
and cancel, and presence. The service on the machine that hosts the agents, `delegate host
serve`, is `delegate.runtime.host_server`.

The delegator's registry stays the single source of truth: a remote job is registered there
first, with a token derived from the host key, then assigned. The host registers the same job
id with the same derived token in its own state dir and launches it exactly as a local submit
(profiles, environment policy, wrapper, tmux, audit), so the job's events flow back on the
usual topic, signed with a token that never travelled.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from delegate.adapters.bus.mqtt import DURABLE_SESSION_S, Connection
from delegate.adapters.bus.mqtt_wire import SyncPublisher, settings_from
from delegate.adapters.fsio import atomic_write, ensure_private_dir
from delegate.config.logsetup import get_logger
from delegate.coord.leases import iso_ms
from delegate.core import hostproto
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import Job
from delegate.core.timefmt import parse_timestamp, record_timestamp
from delegate.services.state import State

log = get_logger(__name__)


# --- the delegator's book of hosts --------------------------------------------------------


class HostBook:
    """`hosts/` in the state dir: `<name>.key` (0600), `<name>.json` (settings) and
    `<name>.seen` (the last presence heard from it)."""

    def __init__(self, state: State) -> None:
        self.dir = state.layout.home / "hosts"

    def add(self, name: str, *, lost_after_s: float) -> str:
        hostproto.check_host_name(name)
        if lost_after_s <= 0:
            raise UsageError("--lost-after is a number of seconds above 0")
        ensure_private_dir(self.dir)
        if (self.dir / f"{name}.key").exists():
            raise UsageError(f"host {name} exists; its key was printed when it was added")
        key = os.urandom(hostproto.KEY_BYTES).hex()
        atomic_write(self.dir / f"{name}.key", key.encode() + b"\n")  # 0600
        settings = {"name": name, "lost_after_s": lost_after_s, "added_at": record_timestamp()}
        atomic_write(self.dir / f"{name}.json", json.dumps(settings).encode())
        return key

    def remove(self, name: str, state: State) -> None:
        """Forget a host (its key, settings and presence); refused while it has open jobs.
        Adding it again makes a new key: that is how a key is rotated."""
        self.key(name)  # refuses an unknown host in one line
        busy = [j.job_id for j in state.registry.open_jobs() if j.host == name]
        if busy:
            raise UsageError(
                f"host {name} has open jobs ({', '.join(busy[:5])}); cancel them first"
            )
        for suffix in (".key", ".json", ".seen"):
            (self.dir / f"{name}{suffix}").unlink(missing_ok=True)

    def names(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.stem for p in self.dir.glob("*.key"))

    def key(self, name: str) -> bytes:
        hostproto.check_host_name(name)
        try:
            return hostproto.parse_key((self.dir / f"{name}.key").read_text())
        except FileNotFoundError:
            raise UsageError(f"no host {name}; add it with `delegate host add {name}`") from None

    def settings(self, name: str) -> dict[str, Any]:
        try:
            loaded = json.loads((self.dir / f"{name}.json").read_text())
        except (FileNotFoundError, ValueError):
            loaded = {}
        loaded.setdefault("lost_after_s", hostproto.DEFAULT_LOST_AFTER_S)
        return loaded  # type: ignore[no-any-return]

    def presence(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / f"{name}.seen").read_text())  # type: ignore[no-any-return]
        except (FileNotFoundError, ValueError):
            return None

    def record_listening(self, connected: bool, now_ms: int) -> bool:
        """Whether this side can hear the broker now, and since when (`.listening`): while it
        cannot, hosts' silence is no evidence, and once it can again, silence counts only from
        then. True when that changed (written only then)."""
        before = self.listening()
        was = before.get("connected")
        if was is connected:
            return False
        record = {"connected": connected, "since_ms": now_ms}
        atomic_write(self.dir / LISTENING, json.dumps(record).encode(), durable=False)
        return was is not None or not connected

    def listening(self) -> dict[str, Any]:
        try:
            return json.loads((self.dir / LISTENING).read_text())  # type: ignore[no-any-return]
        except (FileNotFoundError, ValueError):
            return {}

    def record_presence(self, name: str, message: dict[str, Any], *, heard_ms: int) -> None:
        """Keep what a host said of itself: online or not, and when it was last heard."""
        if not (self.dir / f"{name}.key").exists():
            return  # not a host of ours
        before = self.presence(name) or {}
        online = bool(message.get("online"))
        seen = heard_ms if online else before.get("last_seen_ms")
        record = {
            "online": online,
            "last_seen_ms": max(filter(None, (seen, before.get("last_seen_ms"))), default=None),
            "running_jobs": message.get("running_jobs"),
            "jobs": message.get("jobs") if online else before.get("jobs"),
        }
        atomic_write(self.dir / f"{name}.seen", json.dumps(record).encode())


def mqtt_settings(state: State, bus_url: str | None = None) -> Any:
    url = state.default_bus_url(bus_url)
    if not url.startswith(("mqtt://", "mqtts://")):
        raise UsageError(f"agent hosts are reached through an MQTT broker; this bus is {url}")
    return settings_from(url, state.env)


def _publish(settings: Any, topic: str, payload: bytes, *, retain: bool = False) -> None:
    publisher = SyncPublisher(settings, f"delegate-pub-{uuid.uuid4().hex[:12]}")
    try:
        publisher.publish(topic, payload, retain=retain)
    finally:
        publisher.close()


class PresenceWatch:
    """Follows every host's retained presence on the broker into the host book, from paho's
    network thread. A retained message counts from the time the host stamped on it; a live one
    from when it arrived."""

    def __init__(self, state: State, settings: Any) -> None:
        self.book = HostBook(state)
        self.heard = threading.Event()
        prefix = settings.prefix
        wanted = hostproto.topic(prefix, "+", "presence")

        def on_connected(client: Any) -> None:
            client.subscribe(wanted, qos=1)

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            parts = message.topic.split("/")
            try:
                body = json.loads(message.payload)
                stamped = int(body.get("ts_ms") or 0)
                heard = stamped if message.retain and stamped else int(time.time() * 1000)
                self.book.record_presence(parts[-2], body, heard_ms=heard)
            except (ValueError, AttributeError, OSError) as exc:
                log.warning("presence on %s not understood: %s", message.topic, exc)
            finally:
                client.ack(message.mid, message.qos)
            self.heard.set()

        self.connection = Connection(
            settings,
            f"delegate-presence-{uuid.uuid4().hex[:12]}",
            clean_start=True,
            expiry_s=min(DURABLE_SESSION_S, 60),
            on_connected=on_connected,
            on_message=on_message,
        )

    def note_listening(self) -> bool:
        """Record whether the broker is heard now; True when that changed."""
        connected = self.connection.connected.is_set()
        return self.book.record_listening(connected, int(time.time() * 1000))

    def close(self) -> None:
        self.connection.close()


def refresh_presence(state: State, *, listen_s: float = 1.0) -> None:
    """Read every host's retained presence into the host book once, then stop listening. A
    broker that cannot be reached leaves the book as it was (and says so in the log)."""
    book = HostBook(state)
    try:
        watch = PresenceWatch(state, mqtt_settings(state))
    except DelegateError as exc:
        log.warning("hosts' presence not refreshed: %s", exc)
        book.record_listening(False, int(time.time() * 1000))
        return
    book.record_listening(True, int(time.time() * 1000))
    try:
        # retained presences arrive right after subscribing, one per host, back to back
        if watch.heard.wait(listen_s):
            while True:
                watch.heard.clear()
                if not watch.heard.wait(0.1):
                    break
    finally:
        watch.close()


def host_rows(state: State, *, listen_s: float = 1.0) -> list[dict[str, Any]]:
    """Each host: when it was last heard, whether it is online, how many of its jobs run."""
    book = HostBook(state)
    names = book.names()
    if names:
        refresh_presence(state, listen_s=listen_s)
    running: dict[str, int] = {}
    for job in state.registry.open_jobs():
        if job.host:
            running[job.host] = running.get(job.host, 0) + 1
    rows = []
    for name in names:
        seen = book.presence(name) or {}
        settings = book.settings(name)
        last = seen.get("last_seen_ms")
        rows.append(
            {
                "name": name,
                "last_seen": iso_ms(last) if last else None,
                "online": bool(seen.get("online")),
                "running_jobs": running.get(name, 0),
                "lost_after_s": settings["lost_after_s"],
            }
        )
    return rows


def host_jobs(state: State, name: str) -> list[dict[str, Any]]:
    """What host `name` last said of its open jobs (refreshed from the broker first)."""
    book = HostBook(state)
    book.key(name)  # a host of ours
    refresh_presence(state)
    seen = book.presence(name) or {}
    return list(seen.get("jobs") or [])


def broker_unheard(state: State) -> bool:
    """Whether this side cannot hear the broker (its presence watch is cut off): then hosts'
    silence says nothing, and their jobs are not judged."""
    return HostBook(state).listening().get("connected") is False


def host_ages(state: State, jobs: list[Job], now_ms: int) -> dict[str, tuple[float, float]]:
    """For each host of `jobs`: seconds since it was last heard (since the oldest of its jobs
    was registered, if never) and its `lost_after`, for the reconcile policy."""
    book = HostBook(state)
    listening = book.listening()
    heard_since = int(listening.get("since_ms") or 0) if listening.get("connected") else 0
    ages: dict[str, tuple[float, float]] = {}
    for job in jobs:
        if not job.host or job.status.terminal:
            continue
        seen = (book.presence(job.host) or {}).get("last_seen_ms")
        since = seen or int(parse_timestamp(job.created_at).timestamp() * 1000)
        since = max(since, heard_since)  # silence counts only while the broker was heard
        age = max(0.0, (now_ms - since) / 1000)
        lost_after = float(book.settings(job.host)["lost_after_s"])
        previous = ages.get(job.host)
        ages[job.host] = (age if previous is None else min(age, previous[0]), lost_after)
    return ages


# --- remote submit and cancel -------------------------------------------------------------


ASSIGNMENT_FILE = "assignment.json"
LISTENING = ".listening"  # in the hosts folder: whether the broker could be heard, and until when


def assignment_for(job: Job, prompt: bytes, request: Any) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "agent": request.agent,
        "cmd": request.cmd,
        "prompt_b64": base64.b64encode(prompt).decode(),
        "workdir": str(request.workdir) if request.workdir else None,
        "session": request.session,
        "wall_timeout_s": job.wall_timeout_s,
        "idle_timeout_s": job.idle_timeout_s,
        # counted on the host, among its own jobs: it queues the job there until a slot frees
        "max_running": request.max_running,
        # its own git worktree, made on the host from the host's repository (`--worktree`)
        "worktree": request.worktree,
        "branch": request.branch,
        "base": request.base,
    }


def _send(state: State, job: Job, what: str, build: Callable[[str, int], dict[str, Any]]) -> str:
    """Sign a request for the job's host with its key and publish it on `hosts/<host>/<what>`;
    returns the request id (what the host remembers to refuse a replay)."""
    assert job.host is not None
    key = HostBook(state).key(job.host)
    settings = mqtt_settings(state, job.bus.get("url"))
    request_id = uuid.uuid4().hex
    payload = hostproto.sign(key, build(request_id, int(time.time() * 1000)))
    if len(payload) > hostproto.MAX_ASSIGNMENT:
        raise UsageError(
            f"the {what} request is {len(payload)} bytes, over the {hostproto.MAX_ASSIGNMENT}"
            " limit; put a large prompt in a file on the host"
        )
    _publish(settings, hostproto.topic(settings.prefix, job.host, what), payload)
    return request_id


def save_assignment(state: State, job: Job, prompt: bytes, request: Any) -> None:
    """Keep what the host will be sent (prompt included, 0600) in the job's folder before it
    is sent: a submit that dies before sending leaves it for the monitor or cron to send."""
    path = state.audit.job_dir(job.job_id, create=True) / ASSIGNMENT_FILE
    atomic_write(path, json.dumps(assignment_for(job, prompt, request)).encode())


def saved_assignment(state: State, job: Job) -> dict[str, Any]:
    """What job `job` is (or was) assigned to its host with: its folder's assignment.json,
    the prompt as given (the host adds its preamble) and the spec resolved there."""
    try:
        loaded = json.loads((state.audit.job_dir(job.job_id) / ASSIGNMENT_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        raise UsageError(f"job {job.job_id}: its assignment cannot be read ({exc})") from None
    if not isinstance(loaded, dict):
        raise UsageError(f"job {job.job_id}: its assignment is not a JSON object")
    return loaded


def assign(state: State, job: Job) -> str:
    """Publish the job's saved assignment, signed, to its host; returns the request id."""
    assert job.host is not None
    host = job.host
    try:
        body = json.loads((state.audit.job_dir(job.job_id) / ASSIGNMENT_FILE).read_bytes())
    except (OSError, ValueError) as exc:
        raise DelegateError(f"job {job.job_id} has no assignment to send: {exc}") from None
    request_id = _send(
        state,
        job,
        "assign",
        lambda rid, issued: hostproto.assignment(
            host=host, request_id=rid, issued_ms=issued, job=body
        ),
    )
    state.audit.append(job.job_id, "assigned", host=host, request_id=request_id)
    return request_id


def cancel_remote(state: State, job: Job) -> None:
    """Ask the job's host to cancel it (the delegator's record is already cancelled)."""
    assert job.host is not None
    host = job.host
    request_id = _send(
        state,
        job,
        "cancel",
        lambda rid, issued: hostproto.cancel_request(
            host=host, request_id=rid, issued_ms=issued, job_id=job.job_id
        ),
    )
    state.audit.append(job.job_id, "cancel_requested", host=host, request_id=request_id)


def send_approval(state: State, job: Job, decision: dict[str, Any]) -> str:
    """Send a decision on one of the job's permission requests to its host, signed with the
    host key like a cancel; returns the request id the host's answer will carry
    (services/jobs/host_approvals waits for it)."""
    assert job.host is not None
    host = job.host
    return _send(
        state,
        job,
        "approve",
        lambda rid, issued: hostproto.approval_request(
            host=host, request_id=rid, issued_ms=issued, job_id=job.job_id, decision=decision
        ),
    )
