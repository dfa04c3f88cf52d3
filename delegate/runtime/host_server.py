"""`delegate host serve`: the service on a machine that hosts agents (DESIGN 13).

It receives this host's signed assignments and cancels over one persistent MQTT session,
keeps a retained presence with a last will, launches each assigned job exactly as a local
submit would (its own registry, profiles, environment policy, wrapper, tmux and audit), relays
the jobs' events to the broker, and reconciles its own jobs. The delegator's side of hosts
(the host book, remote submit and cancel, presence) is `delegate.services.remote`.
"""

from __future__ import annotations

import base64
import functools
import json
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from delegate.adapters.bus.mqtt import DURABLE_SESSION_S, Connection
from delegate.adapters.bus.mqtt_wire import SyncPublisher, topic_for
from delegate.adapters.bus.sqlite import SqliteBus
from delegate.adapters.fsio import append_line, atomic_write, ensure_private_dir
from delegate.config.logsetup import get_logger
from delegate.core import hostproto
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import JobState, validate_job_id
from delegate.core.protocol import build_envelope, encode, redact, sign
from delegate.core.timefmt import parse_timestamp, record_timestamp
from delegate.services.jobs.host_approvals import answer_payload, carry_out
from delegate.services.jobs.submit import SubmitRequest, cancel, submit
from delegate.services.reconciler import Reconciler
from delegate.services.remote import mqtt_settings
from delegate.services.state import State

log = get_logger(__name__)


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
    return int(parse_timestamp(timestamp).timestamp() * 1000)


# What the delegator sends a host, each on `hosts/<name>/<kind>`.
REQUEST_KINDS = ("assign", "cancel", "approve")

# A job's id stays in `host-NAME.jobs` this long after it ended: its last events may still wait
# on the local bus for the relay (a link down, a restart), and only listed jobs are relayed.
ENDED_JOB_KEPT_S = 7 * 86400


def _ends_job(payload: bytes) -> bool:
    """Whether an event's payload is a job's last word (completed or error)."""
    try:
        event = json.loads(payload).get("event")
    except (ValueError, AttributeError):
        event = None
    return event in ("completed", "error")


class _Uplink:
    """The relay's publisher to the broker: connected when first needed, dropped after a
    failure and connected again, with a wait doubling from 0.5 s to 8 s between attempts."""

    def __init__(self, connect: Callable[[], Any], stopping: threading.Event) -> None:
        self._connect = connect
        self._stopping = stopping
        self._publisher: Any = None

    def send(self, topic: str, payload: bytes, *, retain: bool, then: Callable[[], None]) -> None:
        """Publish until the broker took it (or the service stops), then run `then` (the local
        ack); a failure of `then` is retried with the publish, so nothing is acked unsent."""
        delay = 0.5
        while not self._stopping.is_set():
            try:
                if self._publisher is None:
                    self._publisher = self._connect()
                self._publisher.publish(topic, payload, retain=retain)
                then()
                return
            except DelegateError as exc:
                log.warning("relay to the broker failed, retrying: %s", exc)
                self.close()
                self._stopping.wait(delay)
                delay = min(delay * 2, 8.0)

    def close(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None


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
        line = json.dumps({"ts": record_timestamp(), "kind": kind, "host": self.name, **fields})
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
        prefix = self.settings.prefix
        wanted = [hostproto.topic(prefix, self.name, w) for w in REQUEST_KINDS]

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
        self.connection = Connection(
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
        elif kind == "approve":
            self._approve(message)
        else:
            self._cancel(message)
        self.remember(str(message["request_id"]), int(message["issued_ms"]))

    def _launch(self, message: dict[str, Any]) -> None:
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
                worktree=job.get("worktree") if isinstance(job.get("worktree"), bool) else None,
                branch=job.get("branch") if isinstance(job.get("branch"), str) else None,
                base=job.get("base") if isinstance(job.get("base"), str) else None,
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
        try:
            seq = self.state.registry.get(job_id).last_seq + 1
        except DelegateError:
            seq = 1  # refused before it was registered here
        token = hostproto.job_token(self.key, job_id)
        detail = redact(f"host {self.name} could not launch it: {exc}"[:500], secrets=(token,))
        envelope = sign(build_envelope(job_id=job_id, seq=seq, event="error", detail=detail), token)
        try:
            bus = SqliteBus(self.state.layout.bus_db)  # the relay forwards it to the broker
            try:
                bus.publish(job_id, encode(envelope), retain=True)
            finally:
                bus.close()
        except DelegateError as exc2:
            log.warning("could not tell the delegator that job %s failed: %s", job_id, exc2)

    def _cancel(self, message: dict[str, Any]) -> None:
        job_id = str(message.get("job_id", ""))
        try:
            cancel(self.state, job_id)
        except DelegateError as exc:
            self.audit(
                "cancel_failed", job_id=job_id, request_id=message["request_id"], detail=str(exc)
            )
            return
        self.audit("cancelled", job_id=job_id, request_id=message["request_id"])

    def _approve(self, message: dict[str, Any]) -> None:
        """A decision on a permission request of a job here, made on the delegator: handed to
        the job's waiting wrapper as a local `approve` would, audited with its maker, and
        answered on `hosts/<name>/answers` (signed with the host key) with what became of it."""
        outcome, detail = carry_out(self.state, message, self.assigned_jobs())
        given = message.get("decision")
        decision: dict[str, Any] = given if isinstance(given, dict) else {}
        self.audit(
            "approval",
            job_id=message.get("job_id"),
            request_id=message["request_id"],
            permission_request=decision.get("request_id"),
            behavior=decision.get("behavior"),
            maker=decision.get("maker"),
            outcome=outcome,
            detail=detail,
        )
        self.connection.client.publish(
            hostproto.topic(self.settings.prefix, self.name, "answers"),
            answer_payload(self.key, self.name, message, outcome, detail),
            qos=1,
        )

    # the loop

    def relay(self) -> None:
        """Forward the events of jobs assigned here from the local bus to the broker, in order,
        each acknowledged locally once the broker acknowledged it; retried while it is away."""
        bus = SqliteBus(self.state.layout.bus_db)
        subscription = bus.subscribe(None, consumer=f"host-relay-{self.name}")
        uplink = _Uplink(
            lambda: SyncPublisher(self.settings, f"delegate-relay-{self.name}"), self.stopping
        )
        assigned = self.assigned_jobs()
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
                uplink.send(
                    topic_for(self.settings.prefix, message.job_id),
                    message.payload,
                    retain=_ends_job(message.payload),  # retained, as the wrapper would
                    then=functools.partial(subscription.ack, message),
                )
        finally:
            uplink.close()
            subscription.close()
            bus.close()

    def serve(self) -> None:
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
