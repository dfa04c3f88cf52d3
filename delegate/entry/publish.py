"""The fast path of `delegate publish`: parsed without typer, which costs ~40 ms to import.

Agents call publish many times per job, so this path imports only the standard library pieces
it needs. Its options mirror the typer command (a test checks the two stay the same).
"""

from __future__ import annotations

import os
import sys

from delegate.adapters.publish_socket import request, socket_path_text, through_wrapper
from delegate.config.settings import settings, state_home_text
from delegate.config.statefiles import LOGS_DIR
from delegate.core import (
    fastjson as json,  # `json` imports `re`: milliseconds this path cannot spare
)
from delegate.core.errors import DelegateError, UsageError, say
from delegate.core.ids import is_job_id

TYPE_CHECKING = False  # `typing` itself costs milliseconds on this path
if TYPE_CHECKING:  # importing it for real costs the fast path; only the type checker needs it
    from delegate.services.jobs.warm_publish import WarmClient

PUBLISH_OPTIONS = ("--job", "--event", "--detail", "--data")
PERMISSION_WAIT_S = 7 * 24 * 3600.0  # the wrapper's [approvals] timeout ends the wait first


def parse_publish_args(argv: list[str]) -> dict[str, str | None]:
    """Parse `--opt value` and `--opt=value` for the four publish options.

    argparse would do, but it imports shutil and locale to build a help formatter even when no
    help is shown (~7 ms); help comes from the typer command instead.
    """
    values: dict[str, str | None] = {"job": None, "event": None, "detail": "", "data": None}
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, sep, value = arg.partition("=")
        if name not in PUBLISH_OPTIONS:
            raise UsageError(
                f"unexpected argument {arg!r} (publish takes {', '.join(PUBLISH_OPTIONS)})"
            )
        if not sep:
            if not rest:
                raise UsageError(f"option {name} needs a value")
            value = rest.pop(0)
        values[name[2:]] = value
    if values["event"] is None:
        raise UsageError("missing option --event")
    return values


def run_publish(*, job: str | None, event: str, detail: str = "", data: str | None = None) -> int:
    """Publish and print a one-line JSON receipt; errors propagate as DelegateError."""
    # the registry and the bus: not for a publish the pane's wrapper serves (_via_wrapper)
    from delegate.services.jobs.publish import publish_receipt
    from delegate.services.state import State  # as services.jobs.publish

    receipt = publish_receipt(State.open(), job=job, event=event, detail=detail, data=data)
    print_receipt(receipt)
    return 0


def print_receipt(receipt: object) -> None:
    """The receipt as one JSON line for a script or an agent; at a terminal, as a sentence."""
    if isinstance(receipt, dict) and sys.stdout.isatty():
        job, event, seq = receipt.get("job_id"), receipt.get("event"), receipt.get("seq")
        sys.stdout.write(f"job {job}: {event} published (seq {seq})\n")
        return
    json.print_line(receipt)


def _wrapper_socket(job: str | None) -> str | None:
    """Where the wrapper of the job being published for listens, if one does: this pane's
    (DELEGATE_PUBLISH_SOCKET), else, for `--job ID` from anywhere, the socket in that job's log
    folder. The wrapper has the registry and the bus loaded already; this process then only
    starts Python and sends one request (see adapters/publish_socket)."""
    current = settings()
    if current.publish_socket and current.job_id and job in (None, current.job_id):
        return current.publish_socket
    if not is_job_id(job):
        return None  # the direct path says what is wrong with it
    home = state_home_text(current.env)
    if home is None:
        return None
    # where the wrapper serves: its log folder, or a private temp folder for a path too long
    path = socket_path_text(os.path.join(home, LOGS_DIR, job), job, "publish.sock")
    return path if path is not None and os.path.exists(path) else None


def _via_wrapper(args: dict[str, str | None]) -> int | None:
    """Publish through the job's wrapper when one serves it; None to publish otherwise (no
    wrapper, or it is gone: the request never left)."""
    path = _wrapper_socket(args["job"])
    if path is None:
        return None
    return _served(request(path, args))


def _warm_client(job: str | None, event: str | None) -> WarmClient | None:
    """The state dir's warm publisher (services/jobs/warm_publish) for a publish no wrapper
    took, when this publish (of `event`, for `job`) may go through one."""
    current = settings()
    home = state_home_text(current.env)
    if not is_job_id(job) or home is None:
        return None  # the direct path says what is wrong with it
    # warm_publish: only for a publish no wrapper took
    from delegate.services.jobs import warm_publish

    if event not in warm_publish.SERVED_EVENTS:
        return None
    return warm_publish.client(home, current.env)


def _served(answer: dict[str, object] | None) -> int | None:
    """Print a server's answer as the direct path would; None when there was none."""
    if answer is None:
        return None
    if answer.get("ok"):
        print_receipt(answer.get("receipt"))
        return 0
    say(str(answer.get("message", "publish failed")))
    code = answer.get("exit_code")
    return code if isinstance(code, int) else 4


def main_publish(argv: list[str]) -> int:
    try:
        args = parse_publish_args(argv)
        served = _via_wrapper(args)
        if served is not None:
            return served
        job = args["job"] or settings().job_id
        warm = _warm_client(job, args["event"])
        if warm is not None:
            served = _served(warm.publish({**args, "job": job}))
            if served is not None:
                return served
        code = run_publish(
            job=args["job"],
            event=str(args["event"]),
            detail=args["detail"] or "",
            data=args["data"],
        )
        if warm is not None and warm.none_listening:
            warm.start_server()  # for the next publish; this one is out
        return code
    except DelegateError as exc:
        say(exc)
        return exc.exit_code


def _hook_request(request: dict[str, object]) -> None:
    """Through the pane's wrapper, which records it (the hook's usual case, and the fast one);
    only without a wrapper does the hook load the whole publish path to record it itself."""
    if not through_wrapper(request):
        # the registry, the audit log and the bus: only when no wrapper took the request
        from delegate.services.jobs.publish import record_request

        record_request(request)


def _permission(payload: dict[str, object]) -> bool:
    """Hand a permission request to the pane's wrapper and print its decision for the agent
    (none when the wrapper leaves the call to the agent's own settings); False when no wrapper
    can decide (the request is then only reported)."""
    path = settings().publish_socket
    if not path:
        return False
    asked = {
        "op": "permission",
        "hook": payload.get("hook_event_name"),
        "tool_name": payload.get("tool_name"),
        "tool_input": payload.get("tool_input"),
    }
    # One attempt, and no client-side deadline shorter than the wrapper's: it answers when a
    # person, a rule or [approvals] timeout decides; asking twice would ask the person twice.
    answer = request(path, asked, timeout_s=PERMISSION_WAIT_S, attempts=1)
    if answer is not None and answer.get("ok") and answer.get("hook_output") is None:
        return True  # the agent's own settings decide this call
    if answer is None or not answer.get("ok") or not isinstance(answer.get("hook_output"), dict):
        if answer is not None and not answer.get("ok"):
            say(f"hook: {answer.get('message', 'the permission request failed')}")
        return False
    sys.stdout.write(json.dumps(answer["hook_output"]) + "\n")
    sys.stdout.flush()
    return True


def main_hook(argv: list[str]) -> int:
    """`delegate hook`: a Claude Code hook call (its JSON on stdin) turned into this job's
    events, through the pane's wrapper when there is one. It never blocks the agent: whatever
    goes wrong is one line on stderr and exit 0 (Claude Code waits for synchronous hooks, and a
    failing hook must not stop its work)."""
    if argv:
        say("hook takes no arguments; the hook's JSON comes on stdin")
        return 64
    try:
        raw = sys.stdin.buffer.read(1024 * 1024 + 1)
        payload = json.loads(raw) if len(raw) <= 1024 * 1024 else None
        if not isinstance(payload, dict):
            raise UsageError("the hook input is not a JSON object of at most 1 MiB")
        deciding = payload.get("hook_event_name") in ("PreToolUse", "PermissionRequest")
        if deciding and _permission(payload):
            return 0  # decided: the answer is on stdout for the agent
        from delegate.core.channels import hook_events  # the hook's, not publish's

        for item in hook_events(payload):
            if item.conversation_id:
                _hook_request({"op": "conversation", "conversation_id": item.conversation_id})
            else:
                _hook_request(
                    {"event": item.event, "detail": item.detail, "data": json.dumps(item.data)}
                )
    except (DelegateError, ValueError, OSError) as exc:
        say(f"hook: {exc}")
    return 0
