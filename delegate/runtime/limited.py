"""A limited job's cgroups as its wrapper holds them (adapters/cgroups): made before the agent
starts, joined by the agent between fork and exec, watched for the kernel's out-of-memory kill,
read for the job's figures at its end, emptied and removed.

A job without limits gets a `LimitedGroup` that does nothing: the wrapper's path is the same.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from delegate.adapters.cgroups import JobGroup, Usage
from delegate.config.settings import DEFAULT_CGROUP_ROOT
from delegate.core.errors import PublishRefused
from delegate.core.limits import Limits, memory_exceeded
from delegate.services.state import State

# How the wrapper ends the job (`error` with this detail and data): its own `report`.
EndJob = Callable[[str, dict[str, Any]], None]

OOM_POLL_S = 0.2  # how often the memory counter is read while the agent runs


class LimitedGroup:
    def __init__(
        self, state: State, job_id: str, limits: Limits, group: JobGroup | None, end: EndJob
    ) -> None:
        self.state, self.job_id, self.limits, self.group = state, job_id, limits, group
        self.end = end
        self._done = threading.Event()
        self._ended = threading.Lock()
        self._said_memory = False
        self._watch: threading.Thread | None = None

    @classmethod
    def make(cls, state: State, job_id: str, launch: dict[str, Any], end: EndJob) -> LimitedGroup:
        """The job's groups with the limits its launch spec names; OSError when the kernel
        refuses them. `end(detail, data)` ends the job `error` (the wrapper's report)."""
        limits = Limits.from_dict(launch.get("limits"))
        if not limits:
            return cls(state, job_id, limits, None, end)
        root = Path(str(launch.get("cgroup_root") or DEFAULT_CGROUP_ROOT))
        return cls(state, job_id, limits, JobGroup.make(root, job_id, limits), end)

    def popen(self) -> dict[str, Any]:
        """What the agent's Popen adds: joining the groups before it runs anything."""
        return {"preexec_fn": self.group.join()} if self.group is not None else {}

    def started(self, stop: Callable[[], None]) -> None:
        """The agent runs: watch for the kernel killing inside its memory limit, which ends
        the job `memory_exceeded` and stops what is left of the agent (`stop`)."""
        if self.group is None:
            return
        self.group.joined()
        if self.limits.memory_bytes is None:
            return

        def watch() -> None:
            assert self.group is not None
            while not self._done.wait(OOM_POLL_S):
                if self.group.usage().oom_kills:
                    self._say_memory(self.group.usage())
                    stop()
                    return

        self._watch = threading.Thread(target=watch, name="oom-watch", daemon=True)
        self._watch.start()

    def _say_memory(self, usage: Usage) -> None:
        with self._ended:
            if self._said_memory:
                return
            self._said_memory = True
        assert self.limits.memory_bytes is not None
        # the peak is on record before the ending is: whoever reads the end reads it too
        self.state.registry.update(self.job_id, peak_memory_bytes=usage.peak_memory_bytes)
        with contextlib.suppress(PublishRefused):  # it had ended already (a cancel)
            self.end(
                memory_exceeded(self.limits.memory_bytes, usage.peak_memory_bytes),
                {"peak_memory_bytes": usage.peak_memory_bytes},
            )

    def ended(self) -> None:
        """The agent has exited: its memory ending if the kernel killed inside the limit, a
        line when forks were refused at the pids limit, and the figures in the record."""
        self._done.set()
        if self.group is None:
            return
        if self._watch is not None:
            self._watch.join(timeout=1.0)
        usage = self.group.usage()
        if usage.oom_kills and self.limits.memory_bytes is not None:
            self._say_memory(usage)
        if usage.pids_refused:
            self.state.audit.append(
                self.job_id, "pids_limit_hit", limit=self.limits.pids, refused=usage.pids_refused
            )
        job = self.state.registry.get(self.job_id)
        self.state.registry.update(
            self.job_id,
            stamp=not job.status.terminal,  # an ended job's updated_at stays its end
            peak_memory_bytes=usage.peak_memory_bytes,
            cpu_s=round(usage.cpu_s, 3) if usage.cpu_s is not None else None,
        )
        # its status file too (the report's figures): no state change writes it now, so by
        # hand, under the lock every state change writes it under, from the record as it is
        with self.state.registry.locked():
            self.state.audit.write_status(self.state.registry.get(self.job_id))

    def close(self) -> None:
        """Kill what the agent left in its groups (a fork bomb's children too), remove them."""
        self._done.set()
        if self.group is not None:
            self.group.kill_all()
            self.group.remove()
