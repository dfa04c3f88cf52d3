"""Agent hosts over the broker (DESIGN 13): the delegator's host book, remote submit and cancel,
presence, and `delegate host serve`, which runs on the machine that hosts the agents.

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
import queue
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import hostproto
from .._logging import get_logger
from ..audit import _now_iso
from ..errors import DelegateError, UsageError
from ..fsio import append_line, atomic_write, ensure_private_dir
from ..model import Job, JobState, validate_job_id
from .state import State

log = get_logger(__name__)


class HostError(DelegateError):
    exit_code = 69


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
        settings = {"name": name, "lost_after_s": lost_after_s, "added_at": _now_iso()}
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
    from ..bus.mqtt_wire import settings_from

    url = state.default_bus_url(bus_url)
    if not url.startswith(("mqtt://", "mqtts://")):
        raise UsageError(f"agent hosts are reached through an MQTT broker; this bus is {url}")
    return settings_from(url, state.env)


def _publish(settings: Any, topic: str, payload: bytes, *, retain: bool = False) -> None:
    from ..bus.mqtt_wire import SyncPublisher

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
        from ..bus.mqtt import DURABLE_SESSION_S, _Connection

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

        self.connection = _Connection(
            settings,
            f"delegate-presence-{uuid.uuid4().hex[:12]}",
            clean_start=True,
            expiry_s=min(DURABLE_SESSION_S, 60),
            on_connected=on_connected,
            on_message=on_message,
        )

    def close(self) -> None:
        self.connection.close()


def refresh_presence(state: State, *, listen_s: float = 1.0) -> None:
    """Read every host's retained presence into the host book once, then stop listening. A
    broker that cannot be reached leaves the book as it was (and says so in the log)."""
    try:
        watch = PresenceWatch(state, mqtt_settings(state))
    except DelegateError as exc:
        log.warning("hosts' presence not refreshed: %s", exc)
        return
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
                "last_seen": _iso_ms(last) if last else None,
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


def _iso_ms(ms: int) -> str:
    from ..coord.leases import iso_ms

    return iso_ms(ms)


def host_ages(state: State, jobs: list[Job], now_ms: int) -> dict[str, tuple[float, float]]:
    """For each host of `jobs`: seconds since it was last heard (since the oldest of its jobs
    was registered, if never) and its `lost_after`, for the reconcile policy."""
    from ..registry import parse_timestamp

    book = HostBook(state)
    ages: dict[str, tuple[float, float]] = {}
    for job in jobs:
        if not job.host or job.status.terminal:
            continue
        seen = (book.presence(job.host) or {}).get("last_seen_ms")
        since = seen or int(parse_timestamp(job.created_at).timestamp() * 1000)
        age = max(0.0, (now_ms - since) / 1000)
        lost_after = float(book.settings(job.host)["lost_after_s"])
        previous = ages.get(job.host)
        ages[job.host] = (age if previous is None else min(age, previous[0]), lost_after)
    return ages


# --- remote submit and cancel -------------------------------------------------------------


ASSIGNMENT_FILE = "assignment.json"


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


# --- the agent host -----------------------------------------------------------------------


def _lines(path: Path) -> list[list[str]]:
    """The words of each line of a file this service appends to (none when it is new)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [words for line in text.splitlines() if (words := line.split())]


def _words(path: Path) -> set[str]:
    """The first word (an id) of each line."""
    return {words[0] for words in _lines(path)}


def _positive_int(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"max_running {value!r} is not a positive whole number")
    return value


def _ms(timestamp: str) -> int:
    from ..registry import parse_timestamp

    return int(parse_timestamp(timestamp).timestamp() * 1000)


# A job's id stays in `host-NAME.jobs` this long after it ended: its last events may still wait
# on the local bus for the relay (a link down, a restart), and only listed jobs are relayed.
ENDED_JOB_KEPT_S = 7 * 86400


class HostServer:
    """`delegate host serve`: one persistent MQTT session receiving this host's assignments
    and cancels, a retained presence with a last will, and a reconcile pass for its own jobs.

    Assigned jobs run on this host's own SQLite bus, exactly as a local submit; a relay thread
    forwards their events to the broker, each acknowledged locally only once the broker took
    it. So a link that drops mid-job loses nothing: the wrapper keeps publishing locally and the
    relay catches up when the broker is back (the delegator drops nothing twice: seqs). It also
    means the host needs no right to read job events on the broker, only to write them.
    """

    def __init__(
        self,
        state: State,
        name: str,
        key: bytes,
        *,
        workdir: Path,
        presence_every_s: float = hostproto.PRESENCE_EVERY_S,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.state = state
        self.name = hostproto.check_host_name(name)
        self.key = key
        self.workdir = workdir
        self.presence_every_s = presence_every_s
        self.now_ms = now_ms
        self.settings = mqtt_settings(state)
        self.audit_path = state.layout.logs / f"host-{name}.ndjson"
        self.seen_path = state.layout.home / f"host-{name}.requests"
        self.jobs_path = state.layout.home / f"host-{name}.jobs"  # jobs assigned here
        # (kind, payload, ack): a request is acknowledged to the broker only once handled, so
        # one this service did not get to (it died) is delivered again to its next start
        self.inbox: queue.Queue[tuple[str, bytes, Callable[[], None]]] = queue.Queue()
        self.stopping = threading.Event()
        self.connection: Any = None

    # audit and replay memory

    def audit(self, kind: str, **fields: Any) -> None:
        ensure_private_dir(self.audit_path.parent)
        line = json.dumps({"ts": _now_iso(), "kind": kind, "host": self.name, **fields})
        append_line(self.audit_path, line.encode() + b"\n")

    def seen_requests(self) -> set[str]:
        return _words(self.seen_path)

    def remember(self, request_id: str, issued_ms: int) -> None:
        append_line(self.seen_path, f"{request_id} {issued_ms}\n".encode())

    def compact_memory(self) -> None:
        """Forget what can no longer matter, so the files stay small and each request is
        checked against a short list: request ids issued outside twice the time window (a
        replay of one is refused as stale anyway), and jobs that ended long ago."""
        now = self.now_ms()
        recent = [
            f"{words[0]} {issued}"
            for words in _lines(self.seen_path)
            # a line of an older version has no time: kept one more round, dated now
            if (issued := int(words[1]) if len(words) > 1 and words[1].isdigit() else now)
            >= now - 2 * hostproto.WINDOW_MS
        ]
        if self.seen_path.exists():
            atomic_write(self.seen_path, "".join(f"{line}\n" for line in recent).encode())
        kept = []
        for job_id in dict.fromkeys(words[0] for words in _lines(self.jobs_path)):
            try:
                job = self.state.registry.get(job_id)
            except DelegateError:
                continue  # never registered here (refused at launch): nothing to relay
            ended_s = (now - _ms(job.updated_at)) / 1000
            if not job.status.terminal or ended_s < ENDED_JOB_KEPT_S:
                kept.append(job_id)
        if self.jobs_path.exists():
            atomic_write(self.jobs_path, "".join(f"{j}\n" for j in kept).encode())

    def assigned_jobs(self) -> set[str]:
        return _words(self.jobs_path)

    # the broker side

    def connect(self) -> None:
        from ..bus.mqtt import DURABLE_SESSION_S, _Connection

        prefix = self.settings.prefix
        wanted = [hostproto.topic(prefix, self.name, w) for w in ("assign", "cancel")]

        def on_connected(client: Any) -> None:
            for topic in wanted:
                client.subscribe(topic, qos=1)
            self._publish_presence(client, online=True)

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            mid, qos = message.mid, message.qos
            self.inbox.put(
                (
                    message.topic.rsplit("/", 1)[-1],
                    bytes(message.payload),
                    lambda: client.ack(mid, qos),
                )
            )

        will = json.dumps({"online": False, "host": self.name}).encode()
        self.connection = _Connection(
            self.settings,
            f"delegate-host-{self.name}",
            clean_start=False,  # assignments sent while this host was away wait for it
            expiry_s=DURABLE_SESSION_S,
            on_connected=on_connected,
            on_message=on_message,
            will=(hostproto.topic(prefix, self.name, "presence"), will),
        )

    def _publish_presence(self, client: Any, *, online: bool) -> None:
        """Online or not, and the open jobs assigned here with their states: the answer to
        `delegate ps --host NAME` on the delegator's side."""
        body: dict[str, Any] = {"online": online, "host": self.name, "ts_ms": self.now_ms()}
        if online:
            assigned = self.assigned_jobs()
            jobs = [j for j in self.state.registry.open_jobs() if j.job_id in assigned]
            body["running_jobs"] = sum(1 for j in jobs if j.status is JobState.RUNNING)
            body["jobs"] = [
                {
                    "job_id": j.job_id,
                    "status": j.status.value,
                    "session": j.session,
                    "agent": j.agent,
                }
                for j in jobs[:200]
            ]
        client.publish(
            hostproto.topic(self.settings.prefix, self.name, "presence"),
            json.dumps(body).encode(),
            qos=1,
            retain=True,
        )

    # handling requests

    def handle(self, kind: str, payload: bytes) -> None:
        try:
            message = hostproto.verify(
                self.key,
                payload,
                host=self.name,
                kind=kind,
                now_ms=self.now_ms(),
                seen=self.seen_requests(),
            )
        except hostproto.Refused as refusal:
            self.audit(
                "refused",
                request=kind,
                reason=refusal.reason,
                detail=refusal.detail,
                size=len(payload),
            )
            log.warning("host %s refused a %s request: %s", self.name, kind, refusal.detail)
            return
        # remembered once carried out: a request redelivered after a crash in between is done
        # again, and a job id is launched only once anyway
        if kind == "assign":
            self._launch(message)
        else:
            self._cancel(message)
        self.remember(str(message["request_id"]), int(message["issued_ms"]))

    def _launch(self, message: dict[str, Any]) -> None:
        from .submit import SubmitRequest, submit

        job = message.get("job") or {}
        job_id = str(job.get("job_id", ""))
        told = False
        try:
            if self.state.registry.exists(job_id):
                raise UsageError(f"job {job_id} was already assigned here")
            validate_job_id(job_id)
            append_line(self.jobs_path, job_id.encode() + b"\n")  # before it can say anything
            told = True  # from here on, a failure is the job's: its delegator is told
            prompt = base64.b64decode(str(job.get("prompt_b64", "")), validate=True)
            workdir = Path(job["workdir"]) if job.get("workdir") else self.workdir
            request = SubmitRequest(
                bus_url=self.state.layout.default_bus_url(),  # this host's own bus; relayed
                prompt=prompt,
                agent=job.get("agent"),
                cmd=job.get("cmd"),
                workdir=workdir,
                session=job.get("session"),
                wall_timeout_s=job.get("wall_timeout_s"),
                idle_timeout_s=job.get("idle_timeout_s"),
                max_running=_positive_int(job.get("max_running")),
                job_id=job_id,
                token_for=lambda jid: hostproto.job_token(self.key, jid),
            )
            submit(self.state, request, wait=False)
        except (DelegateError, ValueError, KeyError, TypeError) as exc:
            self.audit(
                "refused",
                request="assign",
                reason="launch_failed",
                job_id=job_id,
                request_id=message["request_id"],
                detail=str(exc),
            )
            log.warning("host %s could not launch job %s: %s", self.name, job_id, exc)
            if told:
                self._tell_launch_failed(job_id, exc)
            return
        self.audit("assigned", job_id=job_id, request_id=message["request_id"])

    def _tell_launch_failed(self, job_id: str, exc: BaseException) -> None:
        """A job this host could not launch (an agent it has no profile for, a folder it lacks)
        ends `error` at once on the delegator, with the reason, instead of waiting there for a
        `started` that never comes: a signed `error` event, relayed like the job's own would be.
        Signed here, not through `publish`: the local record is already ended, and a job that
        failed this early has said nothing, so the event is its first."""
        from ..protocol import build_envelope, encode, redact, sign

        try:
            seq = self.state.registry.get(job_id).last_seq + 1
        except DelegateError:
            seq = 1  # refused before it was registered here
        token = hostproto.job_token(self.key, job_id)
        detail = redact(f"host {self.name} could not launch it: {exc}"[:500], secrets=(token,))
        envelope = sign(build_envelope(job_id=job_id, seq=seq, event="error", detail=detail), token)
        try:
            from ..bus.sqlite import SqliteBus

            bus = SqliteBus(self.state.layout.bus_db)  # the relay forwards it to the broker
            try:
                bus.publish(job_id, encode(envelope), retain=True)
            finally:
                bus.close()
        except DelegateError as exc2:
            log.warning("could not tell the delegator that job %s failed: %s", job_id, exc2)

    def _cancel(self, message: dict[str, Any]) -> None:
        from .submit import cancel

        job_id = str(message.get("job_id", ""))
        try:
            cancel(self.state, job_id)
        except DelegateError as exc:
            self.audit(
                "cancel_failed", job_id=job_id, request_id=message["request_id"], detail=str(exc)
            )
            return
        self.audit("cancelled", job_id=job_id, request_id=message["request_id"])

    # the loop

    def relay(self) -> None:
        """Forward the events of jobs assigned here from the local bus to the broker, in order,
        each acknowledged locally once the broker acknowledged it; retried while it is away."""
        from ..bus.mqtt_wire import SyncPublisher, topic_for
        from ..bus.sqlite import SqliteBus

        bus = SqliteBus(self.state.layout.bus_db)
        subscription = bus.subscribe(None, consumer=f"host-relay-{self.name}")
        publisher: Any = None
        assigned = self.assigned_jobs()
        delay = 0.5
        try:
            while not self.stopping.is_set():
                message = subscription.get(timeout=0.2)
                if message is None:
                    continue
                if message.job_id not in assigned:
                    assigned = self.assigned_jobs()  # assigned since the last look?
                if message.job_id not in assigned or message.problem:
                    subscription.ack(message)  # not ours to forward (a job of this host's own)
                    continue
                try:
                    event = json.loads(message.payload).get("event")
                except (ValueError, AttributeError):
                    event = None
                terminal = event in ("completed", "error")  # retained, as the wrapper would
                while not self.stopping.is_set():
                    try:
                        if publisher is None:
                            publisher = SyncPublisher(self.settings, f"delegate-relay-{self.name}")
                        publisher.publish(
                            topic_for(self.settings.prefix, message.job_id),
                            message.payload,
                            retain=terminal,
                        )
                        subscription.ack(message)
                        delay = 0.5
                        break
                    except DelegateError as exc:
                        log.warning("relay to the broker failed, retrying: %s", exc)
                        if publisher is not None:
                            publisher.close()
                            publisher = None
                        self.stopping.wait(delay)
                        delay = min(delay * 2, 8.0)
        finally:
            if publisher is not None:
                publisher.close()
            subscription.close()
            bus.close()

    def serve(self) -> None:
        from .reconciler import Reconciler

        self.compact_memory()
        self.connect()
        relay = threading.Thread(target=self._relay_logged, name="relay", daemon=True)
        relay.start()
        self.audit("serving", workdir=str(self.workdir))
        reconciler = Reconciler(self.state, actor=f"host:{self.name}")
        next_beat = time.monotonic() + self.presence_every_s
        try:
            while not self.stopping.is_set():
                try:
                    kind, payload, ack = self.inbox.get(timeout=0.5)
                except queue.Empty:
                    pass
                else:
                    self.handle(kind, payload)
                    ack()
                    continue
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.presence_every_s
                    self._publish_presence(self.connection.client, online=True)
                    try:
                        reconciler.run_pass()  # this host's own monitor
                    except DelegateError as exc:
                        log.warning("reconcile pass failed: %s", exc)
        finally:
            self.stopping.set()
            relay.join(timeout=10)
            self._publish_presence(self.connection.client, online=False)
            self.connection.close()

    def _relay_logged(self) -> None:
        try:
            self.relay()
        except Exception as exc:  # the service goes on; events wait on the local bus
            log.error("the event relay stopped: %s", exc)

    def stop(self) -> None:
        self.stopping.set()
