"""A job's resource limits (`--max-memory 4G --max-cpus 1.5 --max-pids 512`, a profile's, a
group's, `[limits]` of delegate.toml): read from words, merged, said back in words.

Pure: the cgroups that enforce them are adapters/cgroups; what their counters say at the end
becomes the job's figures and, past the memory limit, its ending (`memory_exceeded`).
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from delegate.core.errors import UsageError
from delegate.core.model import MEMORY_EXCEEDED

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)?", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MIN_MEMORY = 4 << 20  # below this no agent starts at all: a typo, not a limit
MAX_PIDS = 4_194_304  # the kernel's own ceiling (pid_max)


class Limits(NamedTuple):
    """What a job may use; None: no limit of that kind."""

    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in self)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self._asdict().items() if v is not None}

    @classmethod
    def from_dict(cls, data: Any) -> Limits:
        """A record's `launch.limits` (written by us, read back: checked all the same)."""
        if not isinstance(data, dict):
            return cls()
        return limits_from(data.get("memory_bytes"), data.get("cpus"), data.get("pids"), "record")

    def over(self, below: Limits) -> Limits:
        """These limits, each unset one taken from `below` (a profile's over `[limits]`)."""
        return Limits(
            self.memory_bytes if self.memory_bytes is not None else below.memory_bytes,
            self.cpus if self.cpus is not None else below.cpus,
            self.pids if self.pids is not None else below.pids,
        )


def parse_size(text: str | int | float, where: str = "--max-memory") -> int:
    """`4G`, `200M`, `512MiB`, `1.5G`, or a number of bytes: bytes (units of 1024)."""
    if isinstance(text, bool):
        raise UsageError(f"{where} must be a size such as 512M or 4G")
    if isinstance(text, int | float):
        value = float(text)
    else:
        match = _SIZE.fullmatch(text.strip())
        if match is None:
            raise UsageError(f"{where} {text!r} is not a size such as 512M or 4G")
        value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not math.isfinite(value) or value < MIN_MEMORY:
        raise UsageError(f"{where} must be at least {human_bytes(MIN_MEMORY)}")
    if value > 1 << 50:
        raise UsageError(f"{where} {text!r} is more memory than any machine has")
    return int(value)


def parse_cpus(value: Any, where: str = "--max-cpus") -> float:
    """A share of cores, 0.01 or more: `0.5` is half a core, `2` two cores."""
    try:
        cpus = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where} must be a number of cores such as 0.5 or 2") from None
    if isinstance(value, bool) or not math.isfinite(cpus) or not 0.01 <= cpus <= 4096:
        raise UsageError(f"{where} must be between 0.01 and 4096 cores")
    return cpus


def parse_pids(value: Any, where: str = "--max-pids") -> int:
    """How many processes (and threads) the job may have at once: 8 or more."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise UsageError(f"{where} must be a whole number of processes")
    try:
        pids = int(value)
    except ValueError:
        raise UsageError(f"{where} must be a whole number of processes") from None
    if not 8 <= pids <= MAX_PIDS:
        raise UsageError(f"{where} must be between 8 and {MAX_PIDS}")
    return pids


def limits_from(memory: Any, cpus: Any, pids: Any, where: str) -> Limits:
    """Limits from their words (flags, a table of delegate.toml); `where` names the source in
    an error (`--` for flags)."""
    name = "--max-{}" if where == "--" else f"{where}: max_{{}}"
    return Limits(
        parse_size(memory, name.format("memory")) if memory is not None else None,
        parse_cpus(cpus, name.format("cpus")) if cpus is not None else None,
        parse_pids(pids, name.format("pids")) if pids is not None else None,
    )


def human_bytes(count: float) -> str:
    """1536 -> `1.5 KiB`; 209715200 -> `200 MiB`."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(count) < 1024 or unit == "TiB":
            text = f"{count:.1f}".rstrip("0").rstrip(".")
            return f"{text} {unit}"
        count /= 1024
    return f"{count} TiB"


def memory_exceeded(limit: int, peak: int | None) -> str:
    """The ending of a job the kernel stopped at its memory limit."""
    at = f" (peak {human_bytes(peak)})" if peak else ""
    return f"{MEMORY_EXCEEDED}: the agent reached its memory limit of {human_bytes(limit)}{at}"


def describe(limits: Limits) -> str:
    """`memory 4 GiB, 1.5 cpus, 512 processes` (what `show` and doctor say)."""
    parts = []
    if limits.memory_bytes is not None:
        parts.append(f"memory {human_bytes(limits.memory_bytes)}")
    if limits.cpus is not None:
        parts.append(f"{limits.cpus:g} cpus")
    if limits.pids is not None:
        parts.append(f"{limits.pids} processes")
    return ", ".join(parts) or "none"
