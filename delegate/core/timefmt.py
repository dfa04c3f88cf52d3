"""Times and durations as people read them: `4m 12s`, `1h 02m`, local `14:02:07`. Pure.

Records and logs keep ISO-8601 UTC (`2026-11-25T14:02:07.123456Z`); what a person reads is
local time and humanized durations. Everything here is a pure function of its arguments.
"""

from __future__ import annotations

from datetime import UTC, datetime

from delegate.core.errors import UsageError


def human_duration(seconds: float | None) -> str:
    """`0s`, `42s`, `4m 12s`, `1h 02m`, `3d 04h`; `-` for None (not known)."""
    if seconds is None:
        return "-"
    total = max(0, round(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def parse_iso(text: object) -> datetime | None:
    """An ISO-8601 timestamp (`Z` or an offset; naive means UTC) as an aware datetime, or
    None when it is missing or not a timestamp."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def seconds_between(start: object, end: object) -> float | None:
    """Seconds from one ISO timestamp to another; None when either is missing."""
    first, last = parse_iso(start), parse_iso(end)
    if first is None or last is None:
        return None
    return max(0.0, (last - first).total_seconds())


def local_time(text: object, *, now: datetime | None = None, tz: object = None) -> str:
    """An ISO timestamp in local time: `14:02:07` today, `Nov 24 14:02` another day of this
    year, `2025-11-24 14:02` before; `-` when missing. `tz` (a tzinfo) defaults to the
    machine's local zone, `now` to the present (both for tests)."""
    return _local(text, now, tz, "%H:%M:%S")


def local_minute(text: object, *, now: datetime | None = None, tz: object = None) -> str:
    """As `local_time`, to the minute (`14:05` today): for a time a person waits for."""
    return _local(text, now, tz, "%H:%M")


def _local(text: object, now: datetime | None, tz: object, clock: str) -> str:
    moment = parse_iso(text)
    if moment is None:
        return "-"
    try:
        local = moment.astimezone(tz) if tz is not None else moment.astimezone()  # type: ignore[arg-type]
    except OverflowError:  # a damaged record's year 1 or 9999, moved past the calendar's end
        return str(text)
    today = (now or datetime.now(UTC)).astimezone(local.tzinfo)
    if local.date() == today.date():
        return local.strftime(clock)
    if local.year == today.year:
        return local.strftime("%b %d %H:%M")
    return local.strftime("%Y-%m-%d %H:%M")


def human_timeout(seconds: float | None) -> str:
    """A budget in words: `10m`, `1h`, `1h 30m`, `none` for 0 or None."""
    if not seconds:
        return "none"
    text = human_duration(seconds)
    # `10m 00s` reads better as `10m`, `1h 00m` as `1h`
    for zero in (" 00s", " 00m", " 00h"):
        if text.endswith(zero):
            return text[: -len(zero)]
    return text


__all__ = [
    "human_duration",
    "human_timeout",
    "local_minute",
    "local_time",
    "parse_iso",
    "seconds_between",
]


RECORD_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def record_timestamp(now: datetime | None = None) -> str:
    """Record times: ISO-8601 UTC with microseconds, so records sort by creation."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime(RECORD_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """The inverse of `record_timestamp` (an aware UTC datetime)."""
    # not strptime: its first call imports _strptime, calendar and locale (~4 ms of `ps --json`)
    parsed = datetime.fromisoformat(text)
    if len(text) != 27 or text[-1] != "Z":  # exactly what record_timestamp writes
        raise ValueError(f"time data {text!r} does not match format {RECORD_FORMAT!r}")
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


_SPAN_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_span(text: str, what: str = "duration") -> float:
    """`90`, `30s`, `10m`, `12h`, `7d`, `2w` as seconds; UsageError naming `what` otherwise."""
    value = text.strip().lower()
    unit = _SPAN_UNITS.get(value[-1:])
    number = value[:-1] if unit is not None else value
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a duration like 90s, 10m, 12h or 7d") from None
    if seconds < 0 or seconds != seconds:
        raise UsageError(f"{what} {text!r} must be zero or more")
    return seconds
