"""Publishing one event for a job: allocate the seq, sign, send, audit, apply its transition.

This is the hot path of every agent report, so it imports nothing heavy: no typer, no paho
(unless the job lives on MQTT), no platformdirs when DELEGATE_HOME is set.
"""

from __future__ import annotations

from delegate.adapters import audit
from delegate.adapters.publish_socket import through_wrapper
from delegate.config.logsetup import get_logger
from delegate.config.settings import JOB_ENV, settings
from delegate.core import channels, fastjson
from delegate.core.errors import BusError, DelegateError, PublishRefused, UsageError
from delegate.core.model import (
    EVENT_TARGET_STATE,
    WRAPPER_REASONS,
    EventType,
    Job,
    validate_job_id,
)
from delegate.core.protocol import (
    MAX_MESSAGE_BYTES,
    build_envelope,
    encode,
    redact,
    redact_data,
    sign,
)
from delegate.services.state import State

TYPE_CHECKING = False  # typing costs a fresh publish ~3 ms
if TYPE_CHECKING:
    from typing import Any

    from delegate.adapters.bus.base import Bus

log = get_logger(__name__)


def parse_event(name: str) -> EventType:
    try:
        return EventType(name)
    except ValueError:
        names = ", ".join(e.value for e in EventType)
        raise UsageError(f"unknown event {name!r}; expected one of {names}") from None


def parse_data(text: str | None) -> dict[str, Any]:
    if text is None or text == "":
        return {}
    try:
        data = fastjson.loads(text)
    except ValueError as exc:  # json.JSONDecodeError, from the fallback to `json`
        where = f"{getattr(exc, 'msg', exc)} at position {getattr(exc, 'pos', 0)}"
        raise UsageError(f"--data is not valid JSON: {where}") from None
    if not isinstance(data, dict):
        raise UsageError("--data must be a JSON object")
    return data


def resolve_job_id(job_id: str | None, env: dict[str, str] | Any) -> str:
    job_id = job_id or env.get(JOB_ENV)
    if not job_id:
        raise UsageError("no job given: pass --job ID or set DELEGATE_JOB_ID")
    return validate_job_id(job_id)


def _check_buildable(job: Job, event: EventType, detail: str, data: dict[str, Any] | None) -> None:
    """UsageError when the event cannot be encoded or would not fit in a message: checked on
    a trial envelope with the next seq, before a seq is spent."""
    try:
        probe = encode(
            sign(
                build_envelope(
                    job_id=job.job_id,
                    seq=job.last_seq + 1,
                    event=event.value,
                    detail=detail,
                    data=data,
                ),
                job.auth_token,
            )
        )
    except (ValueError, TypeError) as exc:
        raise UsageError(f"cannot build the event: {exc}") from None
    if len(probe) + 16 > MAX_MESSAGE_BYTES:  # 16: room for a longer seq
        raise UsageError(f"the event is {len(probe)} bytes; the limit is {MAX_MESSAGE_BYTES}")


def publish_event(
    state: State,
    job_id: str,
    event_name: str,
    *,
    detail: str = "",
    data: dict[str, Any] | None = None,
    kept: dict[str, Bus] | None = None,
) -> dict[str, Any]:
    """Publish one signed event; return the envelope that went on the bus.

    `kept`: the SQLite buses a long-lived publisher keeps open, by URL (see `_send`).

    Raises UsageError for bad input (checked before a seq is spent), PublishRefused when the
    job may not take the event, BusError when the bus did not acknowledge it.
    """
    validate_job_id(job_id)
    event = parse_event(event_name)
    job = state.registry.get(job_id)
    safe_detail = redact(detail or "", secrets=(job.auth_token,))
    data = redact_data(data, secrets=(job.auth_token,)) if data else data
    _check_buildable(job, event, safe_detail, data)
    try:
        job, seq = state.registry.next_seq(job_id, event)
    except PublishRefused as exc:
        # a report from an agent whose job ended (cancelled, stopped, failed by a pass):
        # refused, and on record with what it said, so a late word is never lost
        late = {"late": True, "detail": safe_detail, "data": data or {}}
        state.audit.append(
            job_id,
            "publish_refused",
            event=event.value,
            reason=exc.reason,
            **(late if job.status.terminal else {}),
        )
        raise
    envelope = sign(
        build_envelope(job_id=job_id, seq=seq, event=event.value, detail=safe_detail, data=data),
        job.auth_token,
    )
    try:
        _send(state, job, encode(envelope), retain=event.terminal, kept=kept)
    except DelegateError as exc:
        state.audit.append(job_id, "publish_failed", seq=seq, event=event.value, reason=str(exc))
        if isinstance(exc, BusError):
            raise
        raise BusError(str(exc)) from None
    state.audit.append(job_id, audit.PUBLISHED, seq=seq, event=event.value, envelope=envelope)
    if event.terminal:  # beside the agent: no envelope, its subscribers notify
        # finish (caps, retry, pwd): ~4 ms of every fresh publish, needed only for its last
        from delegate.services.jobs.finish import end_by_event

        end_by_event(state, job_id, event, detail=safe_detail, actor="publish")
    elif event in EVENT_TARGET_STATE:
        state.registry.apply_event(job_id, event, detail=safe_detail)
    return envelope


def _send(
    state: State, job: Job, payload: bytes, *, retain: bool, kept: dict[str, Bus] | None
) -> None:
    """Put `payload` on the job's bus, opened for it and closed after, or kept open in `kept`
    for the next publish. Only a SQLite bus with no per-job settings is kept: its last
    connection closing checkpoints and removes the WAL, a third of a publish's time."""
    url = state.bus_url_for(job)
    if kept is None or not url.startswith("sqlite:") or job.bus.keys() - {"url"}:
        bus = state.open_bus_for(job)
        try:
            bus.publish(job.job_id, payload, retain=retain)
        finally:
            bus.close()
        return
    bus = _kept_bus(state, job, url, kept)
    try:
        bus.publish(job.job_id, payload, retain=retain)
    except DelegateError:
        # opened again for the next publish; not closed here, as another thread may be
        # publishing on it: it closes when the last of them lets go of it
        if kept.get(url) is bus:
            kept.pop(url, None)
        raise


def _kept_bus(state: State, job: Job, url: str, kept: dict[str, Bus]) -> Bus:
    found = kept.get(url)
    if found is not None:
        return found
    opened = state.open_bus_for(job)
    found = kept.setdefault(url, opened)  # another thread may have opened it meanwhile
    if found is not opened:
        opened.close()
    return found


WRAPPER_PREFIXES = tuple(f"{reason}:" for reason in WRAPPER_REASONS)


def publish_receipt(
    state: State,
    *,
    job: str | None,
    event: str,
    detail: str = "",
    data: str | None = None,
    kept: dict[str, Bus] | None = None,
) -> dict[str, object]:
    """The one publish step every path shares: resolve the job, parse --data, publish.

    An ending only the wrapper reports (`rate_limited: ...`, `budget_exceeded: ...`,
    `tmux_gone: ...`, read from what it saw) is refused here: an agent that could declare one
    would grant itself a fresh attempt, with a fresh budget, whenever it liked."""
    if event == EventType.ERROR.value and detail.startswith(WRAPPER_PREFIXES):
        reason = detail.split(":", 1)[0]
        raise UsageError(
            f"an `error` saying `{reason}: ...` is the wrapper's to report, from what it saw;"
            " report a plain error"
        )
    job_id = resolve_job_id(job, settings().env)
    envelope = publish_event(state, job_id, event, detail=detail, data=parse_data(data), kept=kept)
    return {"job_id": job_id, "seq": envelope["seq"], "event": envelope["event"]}


def answer_publish(
    state: State, job_id: str, request: dict[str, Any], kept: dict[str, Bus] | None = None
) -> dict[str, Any]:
    """A served `delegate publish` request for `job_id` (publish_socket's request), published:
    the answer for its client, never an exception (a bug must not end the server)."""
    try:
        receipt = publish_receipt(
            state,
            job=job_id,
            event=str(request.get("event")),
            detail=str(request.get("detail") or ""),
            data=request.get("data"),
            kept=kept,
        )
    except DelegateError as exc:
        return {"ok": False, "message": str(exc), "exit_code": exc.exit_code}
    except Exception as exc:
        log.error("publish request failed: %s", exc)
        return {"ok": False, "message": f"internal error: {exc}", "exit_code": 70}
    return {"ok": True, "receipt": receipt}


def record_conversation(state: State, job_id: str, conversation_id: str) -> None:
    """Record the conversation an agent names, when it is a plain id: it becomes a word of
    the job's resume command, so nothing that reads as an option (or worse) is kept."""
    if channels.conversation_id(conversation_id) is None:
        state.audit.append(job_id, "conversation_refused", given=conversation_id[:80])
        return
    job = state.registry.get(job_id)
    if job.conversation_id != conversation_id:
        state.registry.update(job_id, conversation_id=conversation_id)
        state.audit.append(job_id, "conversation", conversation_id=conversation_id)


def publish_own(event: str, detail: str, data: str) -> None:
    """Publish an event of this process's own job (DELEGATE_JOB_ID), through the pane's wrapper
    when there is one; coordination uses it to put its events on the job's bus."""
    hook_request({"event": event, "detail": detail, "data": data})


def hook_request(request: dict[str, object]) -> None:
    """A hook's or coordination's request: through the pane's wrapper when one listens, else
    recorded here."""
    if not through_wrapper(request):
        record_request(request)


def record_request(request: dict[str, object]) -> None:
    """What `hook_request` does when no wrapper took it: open the state and publish."""
    state = State.open()
    if request.get("op") == "conversation":
        job_id = settings().job_id or ""
        record_conversation(state, job_id, str(request["conversation_id"]))
        return
    publish_receipt(
        state,
        job=None,
        event=str(request["event"]),
        detail=str(request.get("detail") or ""),
        data=str(request.get("data") or ""),
    )
