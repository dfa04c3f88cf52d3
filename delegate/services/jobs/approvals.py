"""Permission requests answered from anywhere (`delegate approve`, `[approvals]` rules).

The agent's permission hook hands its request to the job's wrapper, which calls `ask`: a rule
may decide at once; otherwise the request is published as `permission_required` (the notifier
hears it, with the command that answers it), written to `logs/<job>/approvals/<id>.request.json`
and waited for, bounded by `[approvals] timeout`. `decide` (what `delegate approve` runs, on any
machine sharing the state dir) writes a decision signed with the job's token next to it; the
wrapper checks the signature, refuses a forged one on the record, and answers the hook. Every
decision is audited with who or which rule made it (`permission_decided`).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.fsio import atomic_write, ensure_private_dir
from delegate.config.approvals import approval_settings
from delegate.config.profiles import read_config
from delegate.core.approvals import (
    ALLOW,
    DENY,
    NOT_TAKEN,
    NOT_WAITING,
    TAKEN,
    ApprovalSettings,
    Decision,
    call_text,
    decide_by_rule,
    parse_decision,
    sign_decision,
    summarize,
    timeout_decision,
    verify_decision,
)
from delegate.core.errors import DelegateError, UsageError
from delegate.core.timefmt import record_timestamp
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State

FOLDER = "approvals"
REQUEST = ".request.json"
ANSWER = ".decision.json"
DECIDED = "permission_decided"
POLL_FIRST_S = 0.003  # how often a waiting request looks for its decision, at first...
POLL_MAX_S = 0.01  # ...and after a while (a stat each time: nothing to save by waiting longer)
TAKEN_WAIT_S = 5.0  # how long `approve` waits to see its decision taken
HOOKED_CHANNEL = "claude-stream"  # the profiles whose permission hook waits for a decision


class WaitingRequest(NamedTuple):
    job_id: str
    request_id: str
    tool: str
    summary: str
    asked_at: str
    deadline: float  # epoch seconds
    host: str | None = None  # the agent host where it waits, for a job on one
    call: str = ""  # the whole call, never cut (`summary` is its short line)


def settings_of(state: State) -> ApprovalSettings:
    config = read_config(state.layout.home, state.env)
    return approval_settings(config.tables, config.path)


def _folder(state: State, job_id: str) -> Path:
    return state.audit.job_dir(job_id, create=True) / FOLDER


def _audit_decision(
    state: State, job_id: str, request_id: str, tool: str, summary: str, decision: Decision
) -> None:
    state.audit.append(
        job_id,
        DECIDED,
        request_id=request_id,
        tool=tool,
        summary=summary,
        behavior=decision.behavior,
        reason=decision.reason,
        maker=decision.maker,
    )


def ask(
    state: State,
    job_id: str,
    tool: str,
    tool_input: object,
    *,
    remembered: Sequence[str] = (),
    settings: ApprovalSettings | None = None,
    unless: Callable[[], bool] | None = None,
) -> Decision | None:
    """Decide one permission request of job `job_id`: by a rule, else by a person (or the
    timeout). Blocks until decided. When no rule decides and `unless()` is true (the agent's
    own settings settle the call), no person is asked: None."""
    settings = settings or settings_of(state)
    summary = summarize(tool_input)
    request_id = os.urandom(6).hex()
    ruled = decide_by_rule(settings, tool, tool_input, remembered)
    if ruled is not None:
        _audit_decision(state, job_id, request_id, tool, summary, ruled)
        return ruled
    if unless is not None and unless():
        return None
    folder = ensure_private_dir(_folder(state, job_id))
    request_path = folder / f"{request_id}{REQUEST}"
    deadline = time.time() + settings.timeout_s
    request = {
        "job_id": job_id,
        "request_id": request_id,
        "tool": tool,
        "summary": summary,
        "call": call_text(tool_input),
        "asked_at": record_timestamp(),
        "deadline": deadline,
    }
    atomic_write(request_path, json.dumps(request).encode(), durable=False)  # lives with us
    try:
        publish_event(
            state,
            job_id,
            "permission_required",
            detail=f"{tool}: {summary}"[:200],
            data={
                "request_id": request_id,
                "tool_name": tool,
                "tool_input": tool_input if isinstance(tool_input, dict) else {},
                "answer": f"delegate approve {job_id}  (or --deny --reason TEXT)",
                # for the delegator of a job on an agent host, which sees only this event
                "asked_at": request["asked_at"],
                "deadline": deadline,
            },
        )
        decision = _wait(state, job_id, request_id, folder, deadline) or timeout_decision(settings)
    finally:
        request_path.unlink(missing_ok=True)
    _audit_decision(state, job_id, request_id, tool, summary, decision)
    return decision


def _wait(
    state: State, job_id: str, request_id: str, folder: Path, deadline: float
) -> Decision | None:
    """The first properly signed decision for `request_id` before `deadline`, or None."""
    answer = folder / f"{request_id}{ANSWER}"
    token = state.registry.get(job_id).auth_token
    pause = POLL_FIRST_S
    while time.time() < deadline:
        try:
            raw = answer.read_bytes()
        except FileNotFoundError:
            time.sleep(min(pause, max(0.0, deadline - time.time())))
            pause = min(pause * 1.2, POLL_MAX_S)
            continue
        answer.unlink(missing_ok=True)
        decision = _checked(state, job_id, request_id, raw, token)
        if decision is not None:
            return decision
    return None


def _checked(state: State, job_id: str, request_id: str, raw: bytes, token: str) -> Decision | None:
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    decision = parse_decision(data, request_id)
    if decision is None or not isinstance(data, dict) or not verify_decision(data, token):
        reason = "bad_signature" if decision is not None else "malformed"
        state.audit.append(job_id, "approval_refused", request_id=request_id, reason=reason)
        return None
    return decision


def waiting_requests(state: State, job_ids: Sequence[str] | None = None) -> list[WaitingRequest]:
    """The requests waiting for a person, oldest first (of `job_ids`, else of every open job)."""
    if job_ids is None:
        job_ids = [j.job_id for j in state.registry.open_jobs()]
    found = []
    for job_id in job_ids:
        folder = state.audit.job_dir(job_id) / FOLDER
        for path in sorted(folder.glob(f"*{REQUEST}")) if folder.is_dir() else ():
            try:
                data = json.loads(path.read_bytes())
                found.append(
                    WaitingRequest(
                        job_id,
                        str(data["request_id"]),
                        str(data["tool"]),
                        str(data["summary"]),
                        str(data["asked_at"]),
                        float(data["deadline"]),
                        call=str(data.get("call") or data["summary"]),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue  # taken meanwhile, or half-written by a dying wrapper
    return sorted(found, key=lambda r: (r.asked_at, r.job_id))


def operator() -> str:
    """Who decides from this shell: `user@host`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def decide(
    state: State,
    job_id: str,
    *,
    deny: bool = False,
    reason: str | None = None,
    remember: bool = False,
    request_id: str | None = None,
) -> WaitingRequest:
    """Answer the oldest waiting request of job `job_id` (or `request_id`); return it once the
    job's wrapper has taken the answer. UsageError when none is waiting (any more)."""
    state.registry.get(job_id)  # JobNotFound in one line
    chosen = chosen_request(waiting_requests(state, [job_id]), job_id, request_id, deny, remember)
    body = decision_body(chosen, deny=deny, reason=reason, remember=remember)
    outcome = deliver(state, job_id, body)
    if outcome == NOT_WAITING:
        raise UsageError(f"request {chosen.request_id} of job {job_id} is no longer waiting")
    if outcome == NOT_TAKEN:
        raise DelegateError(
            f"job {job_id}'s wrapper did not take the decision in {TAKEN_WAIT_S:g} s;"
            " it may have ended"
        )
    return chosen


def chosen_request(
    waiting: Sequence[WaitingRequest],
    job_id: str,
    request_id: str | None,
    deny: bool,
    remember: bool,
) -> WaitingRequest:
    """The request `approve` answers: `request_id`, else the job's oldest waiting one."""
    matching = [r for r in waiting if request_id in (None, r.request_id)]
    if not matching:
        what = f"request {request_id}" if request_id else "permission request"
        raise UsageError(f"job {job_id} has no {what} waiting for a decision")
    if remember and deny:
        raise UsageError("--remember keeps an allow; it does not go with --deny")
    return matching[0]


def decision_body(
    chosen: WaitingRequest, *, deny: bool, reason: str | None, remember: bool
) -> dict[str, Any]:
    """The decision on `chosen` made from this shell, unsigned."""
    maker = operator()
    return {
        "job_id": chosen.job_id,
        "request_id": chosen.request_id,
        "behavior": DENY if deny else ALLOW,
        "reason": reason or (f"denied by {maker}" if deny else f"allowed by {maker}"),
        "maker": maker,
        "remember": remember,
    }


def deliver(state: State, job_id: str, body: dict[str, Any]) -> str:
    """Hand decision `body` to job `job_id`'s waiting wrapper here, signed with the job's
    token; returns what became of it (TAKEN, NOT_WAITING or NOT_TAKEN). On an agent host this
    is what a decision relayed from the delegator comes to (services/jobs/host_approvals)."""
    token = state.registry.get(job_id).auth_token
    folder = _folder(state, job_id)
    request_id = str(body["request_id"])
    if not (folder / f"{request_id}{REQUEST}").exists():
        return NOT_WAITING
    answer = folder / f"{request_id}{ANSWER}"
    # not durable: the waiting wrapper reads it within milliseconds, and a crash ends the wait
    atomic_write(answer, _dump(sign_decision(body, token)), durable=False)
    state.audit.append(
        job_id,
        "approval_sent",
        request_id=request_id,
        behavior=body["behavior"],
        maker=body["maker"],
    )
    return TAKEN if _taken(answer) else NOT_TAKEN


def _taken(answer: Path) -> bool:
    """Whether the waiting side took the answer (it removes it when it reads it)."""
    deadline = time.monotonic() + TAKEN_WAIT_S
    while time.monotonic() < deadline:
        if not answer.exists():
            return True
        time.sleep(0.005)
    answer.unlink(missing_ok=True)  # never taken: leave nothing a later request could misread
    return False


def _dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True).encode()


class Unanswerable(NamedTuple):
    """An open job asking for permission whose agent cannot wait for a decision here (its
    profile has no permission hook): someone has to answer in its pane."""

    job_id: str
    detail: str


def unanswerable(state: State) -> list[Unanswerable]:
    """Open jobs whose last event asks for permission and whose profile cannot wait."""
    # services.ps reads the tail of each audit log; only `approvals` needs it here
    from delegate.services.ps import last_event_detail

    found = []
    for job in state.registry.open_jobs():
        if job.launch.get("channel") == HOOKED_CHANNEL or job.host:
            continue
        event, detail = last_event_detail(state, job.job_id)
        if event.endswith(" permission_required"):
            found.append(Unanswerable(job.job_id, detail))
    return found
