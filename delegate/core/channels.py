"""What agents say about themselves, turned into our events. Pure: lines and payloads in,
`ChannelEvent`s out; the wrapper and `delegate hook` publish them. No screen scraping.

Everything in these lines is the agent's to set, so it is checked where it enters: ids by
`conversation_id`, numbers bounded, words cut short and made printable, lists bounded. Nothing
an agent prints makes a parser raise.

- `claude-stream`: Claude Code's `--output-format stream-json` lines. `system/init` names the
  conversation; each `assistant` message's `usage` is counted (against the job's budget);
  `system/api_retry` says the CLI waits to retry its API (`progress`, with `agent_retry` in
  data), except a refused key (`authentication_failed`), which no wait heals: an `error` with
  `stop_agent`. The `result` line ends the job (`completed`, or `error` when `is_error`) with
  `num_turns`, `duration_ms`, `cost_usd`, `usage` and the tools it denied (`denied_tools`) in
  data; a failed result after the CLI's own retries of a 429 ends `rate_limited`.
- `codex-json`: `codex exec --json` lines. `thread.started` names the conversation,
  `turn.completed` reports usage as progress (Codex gives the thread's running totals: each turn
  is counted as its difference from the totals before, `baseline` for the first), `error` lines
  saying it reconnects are progress, and other `error` / `turn.failed` lines end the job in
  error (`rate_limited` when it says `You've hit your usage limit ... try again at 2:28 AM` or
  `... in 2 hours 5 minutes`); the end of the stream completes it unless it failed.
- Claude Code hooks (`delegate hook`): `PermissionRequest` and the permission/elicitation
  `Notification`s become `permission_required`, `Stop` a "turn ended" progress, `SessionStart`
  names the conversation; `PreToolUse` is answered by the permission flow, not here.

A line that is not JSON, or not an object, is counted in `malformed` and otherwise ignored.
"""

from __future__ import annotations

from delegate.core import fastjson as json

TYPE_CHECKING = False  # `delegate hook` runs this in a fresh process: no typing import
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from datetime import tzinfo
    from typing import Any

PERMISSION_NOTIFICATIONS = ("permission_prompt", "elicitation_dialog")
SESSION_SOURCES = ("startup", "resume", "clear", "compact")
DETAIL_MAX = 200
TOOL_NAME_MAX = 64
DENIED_TOOLS_MAX = 100
MAX_TOKENS = 10**12  # per figure, far above any real thread: a larger one is cut to it
MAX_COST_USD = 10.0**9  # an agent's cost figure past this is not a cost but a lie
_MAX_ATTEMPTS = 10_000
_MAX_RETRY_DELAY_MS = 7 * 86_400_000
_TOKEN_MAX = 40
_ID_MAX = 128
_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")
_TOKEN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")
RATE_LIMIT = "rate_limit"
AUTHENTICATION_FAILED = "authentication_failed"
RECONNECTING = "reconnecting"


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


def conversation_id(value: object) -> str | None:
    """`value` when it may be recorded as a conversation id, else None. The id goes back into
    the agent's argv on a resume (`--resume ID`), so: 1-128 of `[A-Za-z0-9._:-]`, and not
    starting with `-`, where it would read as a flag."""
    if not isinstance(value, str) or not 0 < len(value) <= _ID_MAX or value[0] == "-":
        return None
    return value if _ID_CHARS.issuperset(value) else None


def printable(text: str, limit: int) -> str:
    """`text` on one line of at most `limit` characters, with control and formatting characters
    (terminal escapes, bidi overrides) as spaces: it is shown in `ps` and logs as it is."""
    cut = "".join(char if char.isprintable() else " " for char in text[:limit])
    return " ".join(cut.split())


def _token(value: object) -> str | None:
    """A short `[a-z_]` word (an error's kind), else None."""
    if isinstance(value, str) and 0 < len(value) <= _TOKEN_MAX and _TOKEN_CHARS.issuperset(value):
        return value
    return None


def _bounded(value: object, high: int) -> int | None:
    """A count in [0, high] (larger ones cut to `high`; a fraction dropped), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if value != value or value < 0:  # NaN, or below zero
        return None
    return high if value >= high else int(value)


def reported_cost(value: object) -> float | None:
    """An agent's own cost figure: a finite number of dollars from 0 to MAX_COST_USD, else None
    (a negative or NaN figure would lower what its budget counts)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if not 0 <= value <= MAX_COST_USD:  # NaN fails both
        return None
    return float(value)


def _http_status(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _object(line: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # deep nesting: RecursionError
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
    def __init__(self) -> None:
        super().__init__()
        self.last_retry_error: str | None = None  # what the latest `api_retry` retried
        # A subscription's limit refused (`rate_limit_event`, status rejected): its reset.
        self.limit_resets_at: float | None = None
        # What the message lines counted so far, and which messages they were, so the final
        # `result` (the run's totals) adds only the rest.
        self.counted = dict.fromkeys(CLAUDE_USAGE, 0)
        self.messages: set[str] = set()
        self.model: str | None = None

    def message(self, message: dict[str, Any]) -> list[ChannelEvent]:
        kind, subtype = message.get("type"), message.get("subtype")
        if kind == "system" and subtype == "init":
            conversation = conversation_id(message.get("session_id"))
            return [ChannelEvent(conversation_id=conversation)] if conversation else []
        if kind == "system" and subtype == "api_retry":
            return self.api_retry(message)
        if kind == "rate_limit_event":
            self.limit_resets_at = rejected_until(message.get("rate_limit_info"))
            return []
        if kind == "assistant" and isinstance(message.get("message"), dict):
            self.last_retry_error = None  # the API answered: the retries before it worked
            return self.assistant(message["message"])
        if kind == "result":
            final = self.result(message, subtype)
            rest = claude_usage(final.data.get("usage"))
            if rest is None:
                return [final]
            # the run's own totals: what the message lines did not say (their output counts)
            missing = {key: max(0, rest[key] - self.counted[key]) for key in CLAUDE_USAGE}
            if not any(missing.values()):
                return [final]
            return [ChannelEvent(usage=missing, model=self.model), final]
        return []

    def assistant(self, said: dict[str, Any]) -> list[ChannelEvent]:
        """One message's tokens, once: Claude prints a line per content block of a message,
        each with the same id and the usage its stream started with (its output still ~1)."""
        usage = claude_usage(said.get("usage"))
        if usage is None:
            return []
        message_id = said.get("id")
        if isinstance(message_id, str):
            if message_id in self.messages:
                return []
            if len(self.messages) >= _MESSAGES_KEPT:
                self.messages.clear()  # bounded: only a message's own lines come together
            self.messages.add(message_id)
        if isinstance(said.get("model"), str):
            self.model = said["model"][:TOOL_NAME_MAX]
        for key in CLAUDE_USAGE:
            self.counted[key] += usage[key]
        return [ChannelEvent(usage=usage, model=self.model)]

    def api_retry(self, message: dict[str, Any]) -> list[ChannelEvent]:
        """The CLI waits before retrying its API: progress a person reads in `ps`. A refused
        key is retried too (unless the server says not to), but no wait heals it: the job
        ends in error at once, and the wrapper stops the agent (`stop_agent`)."""
        if self.ended:
            return []  # after a refused key: the job has ended, the CLI is being stopped
        retry: dict[str, Any] = {
            "attempt": _bounded(message.get("attempt"), _MAX_ATTEMPTS) or 0,
            "max_retries": _bounded(message.get("max_retries"), _MAX_ATTEMPTS) or 0,
            "retry_delay_ms": _bounded(message.get("retry_delay_ms"), _MAX_RETRY_DELAY_MS) or 0,
            "error_status": _http_status(message.get("error_status")),
            "error": _token(message.get("error")) or "unknown",
        }
        self.last_retry_error = retry["error"]
        if retry["error"] == AUTHENTICATION_FAILED:
            self.ended = True
            said = message.get("message")
            words = printable(said, DETAIL_MAX) if isinstance(said, str) else ""
            status = retry["error_status"] or 401
            detail = words or f"authentication failed (HTTP {status}): the API key was refused"
            return [ChannelEvent("error", detail, {"agent_retry": retry, "stop_agent": True})]
        return [ChannelEvent("progress", retry_detail(retry), {"agent_retry": retry})]

    def result(self, message: dict[str, Any], subtype: object) -> ChannelEvent:
        self.ended = True
        data: dict[str, Any] = {
            "num_turns": message.get("num_turns"),
            "duration_ms": message.get("duration_ms"),
            "cost_usd": reported_cost(message.get("total_cost_usd", message.get("cost_usd"))),
            "usage": message.get("usage") if isinstance(message.get("usage"), dict) else {},
        }
        denied = denied_tools(message.get("permission_denials"))
        if denied:
            data["denied_tools"] = denied
        said = subtype if isinstance(subtype, str) else ""
        failed = bool(message.get("is_error")) or said.startswith("error")
        text = message.get("result")
        detail = text[:DETAIL_MAX] if isinstance(text, str) and text else said[:DETAIL_MAX]
        if failed:
            limited = usage_limit(text) if isinstance(text, str) else None
            if self.limit_resets_at is not None:  # its own figure beats the words it shows
                # core.retry (datetime): only for an agent out of its limit
                from delegate.core.retry import rate_limit_reason

                limited = rate_limit_reason(self.limit_resets_at)
            if limited is None and self.gave_up_on_429(text):
                # core.retry (datetime): only for an agent out of its limit
                from delegate.core.retry import rate_limit_reason

                limited = rate_limit_reason(None)  # no reset known: back off
            if limited is not None:
                return ChannelEvent("error", limited, data)
        return ChannelEvent("error" if failed else "completed", detail, data)

    def gave_up_on_429(self, text: object) -> bool:
        """Whether a failed result is the CLI giving up on a 429: its last retry was of a rate
        limit, or it says so (`API Error: 429 ...`, `Request rejected (429)`) without having
        retried a refused key."""
        if self.last_retry_error == AUTHENTICATION_FAILED:
            return False
        if self.last_retry_error == RATE_LIMIT:
            return True
        lowered = text.lower() if isinstance(text, str) else ""
        return lowered.startswith("api error: 429") or "request rejected (429)" in lowered


CLAUDE_USAGE = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
)
_MESSAGES_KEPT = 1000


def claude_usage(usage: object) -> dict[str, int] | None:
    """Claude's usage figures, validated (each an int from 0 to MAX_TOKENS; a missing or
    malformed one is 0), or None when `usage` is not an object."""
    if not isinstance(usage, dict):
        return None
    return {key: _bounded(usage.get(key), MAX_TOKENS) or 0 for key in CLAUDE_USAGE}


def rejected_until(info: object) -> float | None:
    """The reset (epoch seconds) of Claude's `rate_limit_event` when it refused the request
    (`{"status": "rejected", "resetsAt": 1795842447, ...}`: a subscription's session or
    weekly limit, shown as `You've hit your session limit · resets 5:07am`), else None."""
    if not isinstance(info, dict) or info.get("status") != "rejected":
        return None
    reset = _bounded(info.get("resetsAt"), LAST_EPOCH)
    return float(reset) if reset else None


def retry_detail(retry: Mapping[str, Any]) -> str:
    """`rate limited, retry 4/10 in 4s`, `API error 500, retry 2/10 in 1s`."""
    status = retry.get("error_status")
    if retry.get("error") == RATE_LIMIT or status == 429:
        what = "rate limited"
    else:
        what = f"API error {status}" if status else f"API error ({retry.get('error')})"
    attempt, most = retry.get("attempt") or 0, retry.get("max_retries") or 0
    count = f"{attempt}/{most}" if most else str(attempt)
    return f"{what}, retry {count} in {wait_words(retry.get('retry_delay_ms') or 0)}"


def wait_words(ms: int) -> str:
    """`250ms`, `4s`, `3m`, `2h`: a wait, short."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds}s"
    return f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def denied_tools(denials: object) -> list[str]:
    """The tool names of a result's `permission_denials` (one per denied call, in order):
    objects only, at most DENIED_TOOLS_MAX, each name printable and cut to TOOL_NAME_MAX."""
    if not isinstance(denials, list):
        return []
    names = []
    for denial in denials:
        if not isinstance(denial, dict):
            continue
        name = denial.get("tool_name")
        cleaned = printable(name, TOOL_NAME_MAX) if isinstance(name, str) else ""
        names.append(cleaned or "unknown")  # a call without a name was still denied: it counts
        if len(names) == DENIED_TOOLS_MAX:
            break
    return names


CODEX_TOTALS = ("input_tokens", "cached_input_tokens", "output_tokens")


def codex_totals(usage: object) -> dict[str, int] | None:
    """A Codex thread's running totals (`turn.completed`'s `usage`, or a stored baseline),
    checked: `input_tokens` and `output_tokens` counts, `cached_input_tokens` (0 when absent)
    no more than the input it is part of, `reasoning_output_tokens` kept when given. None when
    the figures are not counts."""
    if not isinstance(usage, dict):
        return None
    totals = {key: _bounded(usage.get(key), MAX_TOKENS) for key in CODEX_TOTALS}
    tokens_in, tokens_out = totals["input_tokens"], totals["output_tokens"]
    if tokens_in is None or tokens_out is None:
        return None
    checked = {
        "input_tokens": tokens_in,
        "cached_input_tokens": min(totals["cached_input_tokens"] or 0, tokens_in),
        "output_tokens": tokens_out,
    }
    reasoning = _bounded(usage.get("reasoning_output_tokens"), MAX_TOKENS)
    if reasoning is not None:
        checked["reasoning_output_tokens"] = reasoning
    return checked


def codex_turn_usage(totals: Mapping[str, int], before: Mapping[str, int] | None) -> dict[str, int]:
    """One turn's usage, from the thread's running totals after it and `before` it, shaped so
    that `budget.add_usage` counts each token once: Codex's `input_tokens` include the cached
    ones, ours do not. A total below the one before means another thread: its own figures."""
    if before is None or any(totals[key] < before.get(key, 0) for key in CODEX_TOTALS):
        before = {}
    tokens_in = totals["input_tokens"] - before.get("input_tokens", 0)
    cached = totals["cached_input_tokens"] - before.get("cached_input_tokens", 0)
    cached = min(cached, tokens_in)
    return {
        "input_tokens": tokens_in - cached,
        "cached_input_tokens": cached,
        "output_tokens": totals["output_tokens"] - before.get("output_tokens", 0),
    }


class CodexJson(_LineParser):
    def __init__(
        self,
        clock: Callable[[], float] | None = None,
        baseline: Mapping[str, Any] | None = None,
        *,
        tz: tzinfo | None = None,
        thread: str | None = None,
    ) -> None:
        """`clock`: the epoch now, to turn Codex's `try again in/at ...` into a reset time,
        read in `tz` (None: the local zone, which is the agent's). `baseline`: the thread's
        running totals before this process (the `thread_usage` of its last turn), so a resumed
        thread's turns are counted from there; `thread`: the thread they belong to, when
        known (another thread starting drops them)."""
        super().__init__()
        self.failed = False
        self.seen_any = False
        self.clock = clock
        self.tz = tz
        self.totals = codex_totals(baseline)
        self.baseline_thread = thread

    def message(self, message: dict[str, Any]) -> list[ChannelEvent]:
        self.seen_any = True
        kind = message.get("type")
        if kind == "thread.started":
            thread = conversation_id(message.get("thread_id"))
            if thread is None:
                return []
            if self.baseline_thread is not None and thread != self.baseline_thread:
                self.totals = None  # a new thread, not the one the baseline counted
            return [ChannelEvent(conversation_id=thread)]
        if kind == "turn.completed":
            return [self.turn_completed(message.get("usage"))]
        said = message.get("message")
        if kind == "error" and isinstance(said, str) and not self.failed:
            retry = reconnecting(said)
            if retry is not None:
                detail = f"{RECONNECTING}: {printable(said, 160)}"
                return [ChannelEvent("progress", detail, {"agent_retry": retry})]
        if kind in ("turn.failed", "error") and not self.failed:
            self.failed = True
            self.ended = True
            error = message.get("error")
            text = error.get("message") if isinstance(error, dict) else said
            if not isinstance(text, str) or not text:
                return [ChannelEvent("error", str(kind), {})]
            now = self.clock() if self.clock else None
            limited = usage_limit(text, now=now, tz=self.tz)
            return [ChannelEvent("error", limited or text[:DETAIL_MAX], {})]
        return []

    def turn_completed(self, usage: object) -> ChannelEvent:
        totals = codex_totals(usage)
        if totals is None:
            return ChannelEvent("progress", "turn completed", {})
        turn = codex_turn_usage(totals, self.totals)
        self.totals = totals
        data = {"usage": turn, "thread_usage": totals}
        return ChannelEvent("progress", "turn completed", data, usage=turn)

    def finish(self) -> list[ChannelEvent]:
        if self.failed or not self.seen_any:
            return []  # failed already, or it never spoke: the exit status says the rest
        self.ended = True
        return [ChannelEvent("completed", "the codex stream ended", {})]


def reconnecting(text: str) -> dict[str, Any] | None:
    """`agent_retry` data for Codex's `Reconnecting... 2/5 (stream disconnected ...)` (or a
    line saying it waits for the network): it retries by itself. None for other errors."""
    lowered = text.lower().lstrip()
    if not lowered.startswith("reconnecting...") and "waiting for network" not in lowered:
        return None
    retry: dict[str, Any] = {}
    words = lowered.removeprefix("reconnecting...").split(maxsplit=1)
    attempt, slash, most = (words[0] if words else "").partition("/")
    if slash and _digits(attempt) and _digits(most):
        retry["attempt"] = min(int(attempt), _MAX_ATTEMPTS)
        retry["max_retries"] = min(int(most), _MAX_ATTEMPTS)
    retry["error"] = RECONNECTING
    return retry


def _digits(text: str) -> bool:
    return 0 < len(text) <= 9 and text.isascii() and text.isdigit()


def usage_limit(text: str, *, now: float | None = None, tz: tzinfo | None = None) -> str | None:
    """`rate_limited: resets at ...` when an agent's final word says it hit its usage or rate
    limit, else None. Claude Code says `Claude AI usage limit reached|<epoch of the reset>`;
    Codex `You've hit your usage limit. ... try again at 2:28 AM.` (a local clock time, read
    in `tz`, None for the local zone; a date past the day) or, in its older versions, `... try
    again in 2 days 3 hours 5 minutes.` Both need `now` to give a reset; without one (or past
    the calendar), a backoff."""
    lowered = text.lower()
    if not any(words in lowered for words in LIMIT_WORDS):
        return None
    _, bar, after = text.partition("|")
    reset_text = after.strip().split()[0] if bar and after.strip() else ""
    epoch_given = reset_text.isascii() and reset_text.isdigit() and len(reset_text) <= 12
    reset = float(reset_text) if epoch_given else None
    if reset is None and now is not None:
        wait = codex_wait_s(lowered)
        reset = now + wait if wait is not None else codex_reset_at(text, now, tz)
    if reset is not None and not 0 <= reset <= LAST_EPOCH:
        reset = None  # no calendar date to write: as if none were given, a backoff
    # core.retry (datetime): only for an agent out of its limit
    from delegate.core.retry import rate_limit_reason

    return rate_limit_reason(reset)


LIMIT_WORDS = ("usage limit", "rate limit", "too many requests")
MINUTE_S = 60.0
LAST_EPOCH = 253402300799  # 9999-12-31T23:59:59Z: the last reset an ISO stamp can name
_SECONDS_PER = {"day": 86400, "hour": 3600, "minute": 60, "second": 1}


def codex_wait_s(text: str) -> float | None:
    """The seconds in Codex's `... try again in 5 days 22 hours 11 minutes.` (`less than a
    minute`: one); None when the text gives no such wait (it may name a clock time instead)."""
    _, found, after = text.lower().partition("try again in ")
    if not found:
        return None
    if after.startswith("less than a minute"):
        return 60.0
    words = after.replace(",", " ").replace(".", " ").split()
    total, read_any = 0, False
    for number, unit in zip(words[::2], words[1::2], strict=False):
        per = _SECONDS_PER.get(unit.removesuffix("s"))
        if not _digits(number) or per is None:
            break
        total += int(number) * per
        read_any = True
    return float(total) if read_any else None


MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
# Codex prints its clock time truncated to the minute, read a moment later: a time this far
# past is the reset that just came, not the same time tomorrow.
CLOCK_GRACE_S = 300.0


def codex_reset_at(text: str, now: float, tz: tzinfo | None = None) -> float | None:
    """The epoch of the reset in Codex's `... try again at 2:28 AM.` (chrono `%-I:%M %p`, the
    same day) or `... try again at Nov 29th, 2026 2:41 AM.` (`%b %-d{st|nd|rd|th}, %Y %-I:%M
    %p`, a later day), its local time read in `tz` (None: the local zone). Also `Nov 29th
    2:41 AM` (the next such date) and 24-hour `14:05`. A time without a date is the next one
    after `now` (less CLOCK_GRACE_S). Codex prints the reset cut to its minute: the end of
    that minute is the first time the limit has surely reset (its start is up to 59 s early,
    and an attempt then would hit the limit again). None when the text names no such time."""
    _, found, after = text.lower().partition("try again at ")
    if not found:
        return None
    clock = _clock_words([word.strip(".") for word in after.replace(",", " ").split()[:6]])
    if clock is None:
        return None
    month, day, year, hour, minute = clock
    # datetime: only for an agent out of its limit, never on the hook's path
    from datetime import datetime, timedelta

    def epoch(y: int, m: int, d: int) -> float | None:
        try:  # naive in the local zone: timestamp() asks the C library, DST and all
            return datetime(y, m, d, hour, minute, tzinfo=tz).timestamp()
        except (ValueError, OverflowError, OSError):
            return None

    if month is not None and day is not None and year is not None:
        named = epoch(year, month, day)
        return None if named is None else named + MINUTE_S
    try:  # the days around now, in the zone the time was printed in
        today = datetime.fromtimestamp(now, tz)
        if month is not None and day is not None:
            dates = [(today.year + step, month, day) for step in (-1, 0, 1)]
        else:
            days = [today + timedelta(days=step) for step in (-1, 0, 1)]
            dates = [(when.year, when.month, when.day) for when in days]
    except (ValueError, OverflowError, OSError):  # a clock at the ends of the calendar
        return None
    times = [stamp for stamp in (epoch(*date) for date in dates) if stamp is not None]
    named = next((stamp for stamp in times if stamp >= now - CLOCK_GRACE_S), None)
    return None if named is None else named + MINUTE_S


def _clock_words(
    words: list[str],
) -> tuple[int | None, int | None, int | None, int, int] | None:
    """(month, day, year, hour, minute) from `nov 29th 2026 2:41 am` (the date optional, the
    year too, 12- or 24-hour), lowercased and without commas or dots; None otherwise."""
    month = day = year = None
    if words and words[0].isalpha():
        date = _date_words(words[0], words[1] if len(words) > 1 else "")
        if date is None:
            return None
        (month, day), words = date, words[2:]
        if words and len(words[0]) == 4 and _digits(words[0]):
            year, words = int(words[0]), words[1:]
    clock = _time_words(words[0], words[1] if len(words) > 1 else "") if words else None
    return None if clock is None else (month, day, year, *clock)


def _date_words(month_word: str, day_word: str) -> tuple[int, int] | None:
    """(month, day) from `nov` (or `november`) and `29th`; None otherwise."""
    if len(month_word) < 3:
        return None
    month = next((n for n, name in enumerate(MONTHS, 1) if name.startswith(month_word)), None)
    number = day_word
    for suffix in ("st", "nd", "rd", "th"):
        number = number.removesuffix(suffix)
    if month is None or not _digits(number) or not 1 <= int(number) <= 31:
        return None
    return month, int(number)


def _time_words(time_word: str, next_word: str) -> tuple[int, int] | None:
    """(hour, minute) from `2:41` and `am`/`pm` (or `2:41pm`, or 24-hour `14:05`)."""
    meridiem = next_word.replace(".", "")
    for suffix in ("am", "pm"):
        if time_word.endswith(suffix):
            time_word, meridiem = time_word.removesuffix(suffix), suffix
    hours, colon, minutes = time_word.partition(":")
    if not colon or not _digits(hours) or len(minutes) != 2 or not _digits(minutes):
        return None
    hour, minute = int(hours), int(minutes)
    if meridiem in ("am", "pm"):
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if meridiem == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    return hour, minute


def parser_for(
    channel: str | None,
    clock: Callable[[], float] | None = None,
    *,
    baseline: Mapping[str, Any] | None = None,
    thread: str | None = None,
    tz: tzinfo | None = None,
) -> ClaudeStream | CodexJson | None:
    """The parser of a profile's `channel`; `clock` (the epoch now) dates Codex's resets,
    `baseline` and `thread` are a resumed Codex thread's running totals (see CodexJson), `tz`
    the agent's time zone, which its clock times are read in (None: this process's)."""
    if channel == "claude-stream":
        return ClaudeStream()
    if channel == "codex-json":
        return CodexJson(clock, baseline, thread=thread, tz=tz)
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
    if name == "SessionStart" and payload.get("source") in SESSION_SOURCES:
        # each start (a resume, /clear, a compaction) may name a new one: the latest wins
        conversation = conversation_id(payload.get("session_id"))
        return [ChannelEvent(conversation_id=conversation)] if conversation else []
    if name == "PreToolUse":
        return []  # the PreToolUse permission flow answers these calls, not this one
    return []
