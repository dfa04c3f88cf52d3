"""What agents say about themselves, turned into our events. Pure: lines and payloads in,
`ChannelEvent`s out; the wrapper and `delegate hook` publish them. No screen scraping.

- `claude-stream`: Claude Code's `--output-format stream-json` lines. `system/init` names the
  conversation; each `assistant` message's `usage` is counted (against the job's budget); the
  `result` line ends the job (`completed`, or `error` when `is_error`) with `num_turns`,
  `duration_ms`, `cost_usd` and `usage` in data.
- `codex-json`: `codex exec --json` lines. `thread.started` names the conversation,
  `turn.completed` reports usage as progress, `turn.failed` / `error` end the job in error
  (`rate_limited` when it says `You've hit your usage limit ... try again in 2 hours 5
  minutes`), and the end of the stream completes it unless it failed.
- Claude Code hooks (`delegate hook`): `PermissionRequest` and the permission/elicitation
  `Notification`s become `permission_required`, `Stop` a "turn ended" progress, `SessionStart`
  names the conversation.

A line that is not JSON, or not an object, is counted in `malformed` and otherwise ignored.
"""

from __future__ import annotations

from delegate.core import fastjson as json

TYPE_CHECKING = False  # `delegate hook` runs this in a fresh process: no typing import
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PERMISSION_NOTIFICATIONS = ("permission_prompt", "elicitation_dialog")


class ChannelEvent:
    """An event to publish (`event` set), or a fact to record (`conversation_id` set), and the
    usage it reports (`usage`, `model`: counted against the job's budget)."""

    __slots__ = ("conversation_id", "data", "detail", "event", "model", "usage")

    def __init__(
        self,
        event: str | None = None,
        detail: str = "",
        data: dict[str, Any] | None = None,
        conversation_id: str | None = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> None:
        self.event = event
        self.detail = detail
        self.data = data or {}
        self.conversation_id = conversation_id
        self.usage = usage
        self.model = model

    def __repr__(self) -> str:
        return (
            f"ChannelEvent({self.event!r}, {self.detail!r}, conversation={self.conversation_id!r})"
        )


def _object(line: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


class _LineParser:
    """One JSON object per line; blank lines skipped, others that do not parse counted."""

    def __init__(self) -> None:
        self.malformed = 0
        self.ended = False

    def feed(self, line: bytes) -> list[ChannelEvent]:
        if not line.strip():
            return []
        message = _object(line)
        if message is None:
            self.malformed += 1
            return []
        return self.message(message)

    def message(self, message: dict[str, Any]) -> list[ChannelEvent]:
        raise NotImplementedError

    def finish(self) -> list[ChannelEvent]:
        return []  # by default the wrapper reports from the exit status


class ClaudeStream(_LineParser):
    def message(self, message: dict[str, Any]) -> list[ChannelEvent]:
        kind, subtype = message.get("type"), message.get("subtype")
        if kind == "system" and subtype == "init" and isinstance(message.get("session_id"), str):
            return [ChannelEvent(conversation_id=message["session_id"])]
        if kind == "assistant" and isinstance(message.get("message"), dict):
            said = message["message"]
            usage = said.get("usage")
            if isinstance(usage, dict):  # one message's tokens: a fact, not an event
                model = said.get("model") if isinstance(said.get("model"), str) else None
                return [ChannelEvent(usage=usage, model=model)]
            return []
        if kind == "result":
            self.ended = True
            data: dict[str, Any] = {
                "num_turns": message.get("num_turns"),
                "duration_ms": message.get("duration_ms"),
                "cost_usd": message.get("total_cost_usd", message.get("cost_usd")),
                "usage": message.get("usage") if isinstance(message.get("usage"), dict) else {},
            }
            failed = bool(message.get("is_error")) or str(subtype or "").startswith("error")
            text = message.get("result")
            detail = str(text)[:200] if isinstance(text, str) and text else str(subtype or "")
            limited = usage_limit(text) if failed and isinstance(text, str) else None
            if limited is not None:
                return [ChannelEvent("error", limited, data)]
            return [ChannelEvent("error" if failed else "completed", detail, data)]
        return []


class CodexJson(_LineParser):
    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        """`clock`: the epoch now, to turn Codex's `try again in ...` into a reset time."""
        super().__init__()
        self.failed = False
        self.seen_any = False
        self.clock = clock

    def message(self, message: dict[str, Any]) -> list[ChannelEvent]:
        self.seen_any = True
        kind = message.get("type")
        if kind == "thread.started" and isinstance(message.get("thread_id"), str):
            return [ChannelEvent(conversation_id=message["thread_id"])]
        if kind == "turn.completed":
            usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
            return [ChannelEvent("progress", "turn completed", {"usage": usage}, usage=usage)]
        if kind in ("turn.failed", "error") and not self.failed:
            self.failed = True
            self.ended = True
            error = message.get("error")
            text = str(error.get("message") if isinstance(error, dict) else message.get("message"))
            limited = usage_limit(text, now=self.clock() if self.clock else None)
            return [ChannelEvent("error", limited or str(text or kind)[:200], {})]
        return []

    def finish(self) -> list[ChannelEvent]:
        if self.failed or not self.seen_any:
            return []  # failed already, or it never spoke: the exit status says the rest
        self.ended = True
        return [ChannelEvent("completed", "the codex stream ended", {})]


def usage_limit(text: str, *, now: float | None = None) -> str | None:
    """`rate_limited: resets at ...` when an agent's final word says it hit its usage or rate
    limit, else None. Claude Code says `Claude AI usage limit reached|<epoch of the reset>`;
    Codex `You've hit your usage limit. ... try again in 2 days 3 hours 5 minutes.` (a reset
    `now` + that, when the caller gives `now`)."""
    lowered = text.lower()
    if not any(words in lowered for words in LIMIT_WORDS):
        return None
    _, bar, after = text.partition("|")
    reset_text = after.strip().split()[0] if bar and after.strip() else ""
    reset = float(reset_text) if reset_text.isdigit() else None
    wait = codex_wait_s(lowered)
    if reset is None and wait is not None and now is not None:
        reset = now + wait
    # core.retry (datetime): only for an agent out of its limit
    from delegate.core.retry import rate_limit_reason

    return rate_limit_reason(reset)


LIMIT_WORDS = ("usage limit", "rate limit", "too many requests")
_SECONDS_PER = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}


def codex_wait_s(text: str) -> float | None:
    """The seconds in Codex's `... try again in 5 days 22 hours 11 minutes.`; None when the
    text gives no such wait (it may name a clock time instead: then the caller backs off)."""
    _, found, after = text.lower().partition("try again in ")
    if not found:
        return None
    words = after.replace(",", " ").replace(".", " ").split()
    total, read_any = 0, False
    for number, unit in zip(words[::2], words[1::2], strict=False):
        per = _SECONDS_PER.get(unit.removesuffix("s"))
        if not (number.isascii() and number.isdigit()) or per is None:
            break
        total += int(number) * per
        read_any = True
    return float(total) if read_any else None


def parser_for(
    channel: str | None, clock: Callable[[], float] | None = None
) -> ClaudeStream | CodexJson | None:
    """The parser of a profile's `channel`; `clock` (the epoch now) dates Codex's resets."""
    if channel == "claude-stream":
        return ClaudeStream()
    if channel == "codex-json":
        return CodexJson(clock)
    return None


def hook_events(payload: dict[str, Any]) -> list[ChannelEvent]:
    """The events a Claude Code hook call stands for."""
    name = payload.get("hook_event_name")
    if name == "PermissionRequest":
        tool = str(payload.get("tool_name") or "a tool")
        asked = {"tool_name": tool, "tool_input": payload.get("tool_input") or {}}
        return [ChannelEvent("permission_required", f"permission asked for {tool}", asked)]
    if name == "Notification":
        kind = payload.get("notification_type")
        message = str(payload.get("message") or "")
        if kind in PERMISSION_NOTIFICATIONS or "permission" in message.lower():
            noted: dict[str, Any] = {"notification_type": kind}
            for key in ("tool_name", "tool_input"):
                if key in payload:
                    noted[key] = payload[key]
            return [ChannelEvent("permission_required", message[:200], noted)]
        return []
    if name == "Stop":
        return [ChannelEvent("progress", "turn ended", {})]
    if name == "SessionStart" and isinstance(payload.get("session_id"), str):
        return [ChannelEvent(conversation_id=payload["session_id"])]
    return []
