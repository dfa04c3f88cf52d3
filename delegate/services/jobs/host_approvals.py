"""Approvals for jobs on agent hosts: a decision relayed over the broker (DESIGN 13).

A job on a host asks for permission in the host's own state dir, where its wrapper waits
(services/jobs/approvals). Its `permission_required` event comes back over the broker into the
delegator's audit like all its events, so the delegator lists the request from there. `approve`
on the delegator sends the decision, unsigned by the job's token but signed with the host key
like a cancel, on `hosts/<host>/approve`; the host server checks it (`hostproto.verify`) and
hands it to the waiting wrapper exactly as a local `approve` would (`carry_out`), then answers
on `hosts/<host>/answers`, signed with the same key, whether the wrapper took it. No secret
travels: the host signs the decision file with the job's token, which it derives itself.

Both sides audit it with its maker: here `approval_sent` and `approval_answered` in the job's
audit; there `approval_sent` and the wrapper's `permission_decided` in the job's audit, and an
`approval` line in the host's own audit.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from delegate.adapters.bus.mqtt import Connection
from delegate.adapters.procfs import ancestor_environ
from delegate.config.settings import JOB_ENV
from delegate.core import hostproto
from delegate.core.approvals import (
    NOT_TAKEN,
    NOT_WAITING,
    REFUSED,
    TAKEN,
    parse_decision,
)
from delegate.core.errors import BusError, DelegateError, UsageError
from delegate.core.model import Job
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs.approvals import (
    TAKEN_WAIT_S,
    WaitingRequest,
    chosen_request,
    decide,
    decision_body,
    deliver,
    settings_of,
    waiting_requests,
)
from delegate.services.remote import HostBook, mqtt_settings, send_approval
from delegate.services.state import State

# How long `approve` waits for the host's answer: the host itself waits up to TAKEN_WAIT_S for
# the wrapper to take the decision, and the answer has the broker to cross twice.
ANSWER_WAIT_S = TAKEN_WAIT_S + 3.0
SUBSCRIBE_WAIT_S = 5.0
SENT = "approval_sent"
ANSWERED = "approval_answered"
# A request the delegator has seen answered: no longer listed, and never answered again.
_SETTLED = (TAKEN, NOT_WAITING)


# --- the delegator's side -----------------------------------------------------------------


def inside_a_job(state: State) -> str | None:
    """The job whose process tree or environment this process runs in, else None."""
    own = state.env.get(JOB_ENV)
    if own:
        return own
    found = ancestor_environ(JOB_ENV)
    return found[1] if found is not None else None


def approve(
    state: State,
    job_id: str,
    *,
    deny: bool = False,
    reason: str | None = None,
    remember: bool = False,
    request_id: str | None = None,
) -> WaitingRequest:
    """`delegate approve`: answer a waiting request of job `job_id`, here or on its host.
    Returns the request once the wrapper took the answer (its `host` set for a job on one).
    Refused, and audited, from inside any job (its pane, its sub-jobs, what its agent runs):
    a decision comes from a person or a rule, never from an agent."""
    job = state.registry.get(job_id)
    inside = inside_a_job(state)
    if inside is not None:
        state.audit.append(
            job_id, "approval_refused", request_id=request_id, reason="inside_a_job", inside=inside
        )
        raise UsageError(
            f"approve refuses to run inside job {inside}: an agent cannot answer a permission"
            " request; a person answers from a shell of their own"
        )
    if not job.host:
        return decide(
            state, job_id, deny=deny, reason=reason, remember=remember, request_id=request_id
        )
    waiting = waiting_on_hosts(state, [job])
    chosen = chosen_request(waiting, job_id, request_id, deny, remember)
    body = decision_body(chosen, deny=deny, reason=reason, remember=remember)
    outcome, detail = _relay(state, job, body)
    if outcome == TAKEN:
        return chosen
    if outcome == NOT_WAITING:
        raise UsageError(
            f"request {chosen.request_id} of job {job_id} is no longer waiting on host {job.host}"
        )
    if outcome is None:
        raise DelegateError(
            f"the decision for job {job_id} was sent to host {job.host} but not confirmed"
            f" within {ANSWER_WAIT_S:g} s; `delegate approvals` shows whether it still waits"
        )
    raise DelegateError(
        f"host {job.host} did not carry out the decision for job {job_id}: {detail}"
    )


def waiting_everywhere(state: State) -> list[WaitingRequest]:
    """`delegate approvals`: the requests waiting here and on agent hosts, oldest first."""
    local = waiting_requests(state, [j.job_id for j in state.registry.open_jobs() if not j.host])
    remote = waiting_on_hosts(state, [j for j in state.registry.open_jobs() if j.host])
    return sorted(local + remote, key=lambda r: (r.asked_at, r.job_id))


def waiting_on_hosts(state: State, jobs: Sequence[Job]) -> list[WaitingRequest]:
    """The requests of open jobs on hosts still waiting as far as this side knows: asked (their
    `permission_required` came back), not yet past their deadline, and not seen answered."""
    now = time.time()
    default_wait = settings_of(state).timeout_s
    found: list[WaitingRequest] = []
    for job in jobs:
        if not job.host or job.status.terminal:
            continue
        asked: dict[str, WaitingRequest] = {}
        settled = set()
        for entry in state.audit.iter_events(job.job_id):
            if entry.get("kind") == ANSWERED and entry.get("outcome") in _SETTLED:
                settled.add(entry.get("request_id"))
            elif entry.get("kind") == "received" and entry.get("event") == "permission_required":
                request = _asked(job, entry, default_wait)
                if request is not None:
                    asked[request.request_id] = request
        found.extend(r for r in asked.values() if r.request_id not in settled and r.deadline > now)
    return sorted(found, key=lambda r: (r.asked_at, r.job_id))


def _asked(job: Job, entry: dict[str, Any], default_wait: float) -> WaitingRequest | None:
    """The request a received `permission_required` event carries, or None when it has none."""
    envelope = entry.get("envelope") or {}
    data = envelope.get("data") or {}
    request_id = data.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        return None
    asked_at = str(data.get("asked_at") or entry.get("ts") or "")
    deadline = data.get("deadline")
    if not isinstance(deadline, (int, float)):  # a host of an older version says no deadline
        try:
            deadline = parse_timestamp(asked_at).timestamp() + default_wait
        except ValueError:
            deadline = time.time() + default_wait
    tool = str(data.get("tool_name") or "a tool")
    summary = str(envelope.get("detail") or "").removeprefix(f"{tool}: ")
    return WaitingRequest(job.job_id, request_id, tool, summary, asked_at, deadline, job.host)


def _relay(state: State, job: Job, body: dict[str, Any]) -> tuple[str | None, str]:
    """Send decision `body` to the job's host and wait for its answer: (outcome, detail), the
    outcome None when none came in time. Audited here before it is sent and once answered."""
    assert job.host is not None
    key = HostBook(state).key(job.host)
    watch = _AnswerWatch(state, job, key)
    try:
        wire_id = send_approval(state, job, body)
        state.audit.append(
            job.job_id,
            SENT,
            request_id=body["request_id"],
            behavior=body["behavior"],
            maker=body["maker"],
            host=job.host,
            wire_id=wire_id,
        )
        outcome, detail = watch.answer_to(wire_id, ANSWER_WAIT_S)
    finally:
        watch.close()
    state.audit.append(
        job.job_id,
        ANSWERED,
        request_id=body["request_id"],
        outcome=outcome or "unconfirmed",
        detail=detail,
        maker=body["maker"],
        host=job.host,
        wire_id=wire_id,
    )
    return outcome, detail


class _AnswerWatch:
    """Subscribed to a host's answers before the decision is sent (the broker keeps nothing
    for a subscriber that is not there yet); keeps the ones signed with the host key."""

    def __init__(self, state: State, job: Job, key: bytes) -> None:
        assert job.host is not None
        self.host, self.key = job.host, key
        self.answers: dict[str, dict[str, Any]] = {}
        self.arrived = threading.Condition()
        subscribed = threading.Event()
        settings = mqtt_settings(state, job.bus.get("url"))
        wanted = hostproto.topic(settings.prefix, job.host, "answers")

        def on_message(client: Any, userdata: Any, message: Any) -> None:
            try:
                self._take(bytes(message.payload))
            finally:
                client.ack(message.mid, message.qos)

        self.connection = Connection(
            settings,
            f"delegate-approve-{uuid.uuid4().hex[:12]}",
            clean_start=True,
            expiry_s=0,
            on_connected=lambda client: client.subscribe(wanted, qos=1),
            on_message=on_message,
            on_subscribe=lambda *args: subscribed.set(),
        )
        if not subscribed.wait(SUBSCRIBE_WAIT_S):
            self.close()
            raise BusError(f"could not subscribe to host {job.host}'s answers in time")

    def _take(self, payload: bytes) -> None:
        try:
            answer = hostproto.verify(
                self.key,
                payload,
                host=self.host,
                kind="approval_answer",
                now_ms=int(time.time() * 1000),
                seen=frozenset(),
            )
        except hostproto.Refused:
            return  # not from our host (or not an answer): nothing it says counts
        with self.arrived:
            self.answers[str(answer["request_id"])] = answer
            self.arrived.notify_all()

    def answer_to(self, wire_id: str, timeout: float) -> tuple[str | None, str]:
        with self.arrived:
            self.arrived.wait_for(lambda: wire_id in self.answers, timeout)
        answer = self.answers.get(wire_id)
        if answer is None:
            return None, f"no answer from host {self.host} within {timeout:g} s"
        return str(answer.get("outcome")), str(answer.get("detail") or "")

    def close(self) -> None:
        self.connection.close()


# --- the host's side ----------------------------------------------------------------------


def carry_out(state: State, message: dict[str, Any], assigned: set[str]) -> tuple[str, str]:
    """Hand a verified decision from the delegator (`hostproto.approval_request`) to the job's
    waiting wrapper in this host's state dir, as a local `approve` does; returns (outcome,
    detail) for the answer. `assigned`: the jobs assigned to this host."""
    job_id = str(message.get("job_id", ""))
    body = message.get("decision")
    if job_id not in assigned:
        return REFUSED, f"job {job_id} was not assigned to this host"
    if not isinstance(body, dict) or body.get("job_id") != job_id:
        return REFUSED, "the decision is malformed"
    decision = parse_decision(body, str(body.get("request_id", "")))
    if decision is None:
        return REFUSED, "the decision is malformed"
    try:
        outcome = deliver(state, job_id, dict(body))
    except DelegateError as exc:
        return NOT_WAITING, str(exc)
    said = {
        TAKEN: f"{decision.behavior} taken by the job's wrapper",
        NOT_WAITING: f"request {body['request_id']} is no longer waiting",
        NOT_TAKEN: f"the job's wrapper did not take it in {TAKEN_WAIT_S:g} s; it may have ended",
    }
    return outcome, said[outcome]


def answer_payload(
    key: bytes, host: str, message: dict[str, Any], outcome: str, detail: str
) -> bytes:
    """The host's signed answer to approval request `message`."""
    return hostproto.sign(
        key,
        hostproto.approval_answer(
            host=host,
            request_id=str(message["request_id"]),
            issued_ms=int(time.time() * 1000),
            job_id=str(message.get("job_id", "")),
            outcome=outcome,
            detail=detail,
        ),
    )
