"""`delegate doctor`: check the state directory, the registry and the bus, and say what is wrong."""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from delegate.adapters.bus import open_bus
from delegate.adapters.cgroups import support
from delegate.adapters.tmux import Tmux, TmuxError, round_trip, socket_folder_problem, version
from delegate.config.profiles import max_running_caps, profiles, read_config
from delegate.config.settings import TMUX_SOCKET_ENV, cgroup_root
from delegate.core.errors import DelegateError
from delegate.core.model import JobState
from delegate.services.state import State, strip_credentials
from delegate.services.supervisor import holder_mode, running_supervisor
from delegate.services.worktrees import over_limits

OK = "ok"
WARN = "warn"
FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mode(path: Any) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_checks(state: State) -> list[Check]:
    checks: list[Check] = []
    home = state.layout.home
    mode = _mode(home)
    if mode & 0o077:
        detail = f"{home} (mode {mode:o}) is readable by others: chmod 700 it"
        checks.append(Check("state_dir", WARN, detail))
    else:
        checks.append(Check("state_dir", OK, f"{home} (mode {mode:o})"))

    quarantined = state.registry.quarantined()
    if quarantined:
        names = ", ".join(p.name for p in quarantined[:5])
        more = f" and {len(quarantined) - 5} more" if len(quarantined) > 5 else ""
        checks.append(
            Check(
                "quarantine",
                WARN,
                f"{len(quarantined)} corrupt record(s) kept aside: {names}{more}",
            )
        )
    else:
        checks.append(Check("quarantine", OK, "no corrupt job records"))

    jobs = state.registry.list()  # quarantines any newly found corrupt record
    newly = len(state.registry.quarantined()) - len(quarantined)
    if newly:
        checks.append(
            Check("registry", WARN, f"{newly} corrupt record(s) found and quarantined now")
        )
    counts = {s.value: 0 for s in JobState}
    loose_modes = []
    for job in jobs:
        counts[job.status.value] += 1
        if _mode(state.registry.path_for(job.job_id)) != 0o600:
            loose_modes.append(job.job_id)
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no jobs"
    checks.append(Check("registry", OK, f"{len(jobs)} job(s): {summary}"))
    if loose_modes:
        checks.append(
            Check("permissions", WARN, f"records not mode 0600: {', '.join(loose_modes[:5])}")
        )
    stale = state.registry.stale_temp_files()
    if stale:
        checks.append(
            Check("temp_files", WARN, f"{len(stale)} leftover temp file(s) from interrupted writes")
        )

    checks.append(config_check(state))
    checks.append(worktree_check(state))
    checks.append(cgroup_check(state))
    checks.append(sandbox_check(state))
    checks.append(supervisor_check(state, open_count=sum(not j.status.terminal for j in jobs)))
    checks.extend(tmux_checks(state))
    checks.extend(bus_checks(state))
    return checks


def supervisor_check(state: State, *, open_count: int) -> Check:
    """Whether the state dir's supervisor runs, and how it was started (said, never a warning:
    the next command that needs one starts it, and `delegate monitor` does now)."""
    pid = running_supervisor(state)
    if pid is not None:
        how = "a person's `delegate monitor`" if holder_mode(state) == "foreground" else "a command"
        return Check("supervisor", OK, f"running (pid {pid}, started by {how})")
    return Check(
        "supervisor",
        OK,
        f"not running ({open_count} open job(s)): the next submit or watch starts it,"
        " `delegate monitor` runs one now",
    )


def cgroup_check(state: State) -> Check:
    """Which of --max-memory, --max-cpus, --max-pids this machine enforces (adapters/cgroups):
    said, a warning only when none can be (a job asking for one is refused)."""
    root = cgroup_root(state.env)
    found = support(Path(root))
    if found.layout is None:
        return Check(
            "limits", WARN, f"{found.reason}: jobs with --max-memory/cpus/pids are refused"
        )
    flags = {"memory": "--max-memory", "cpu": "--max-cpus", "pids": "--max-pids"}
    have = [flags[c] for c in sorted(found.controllers)]
    lacking = [f for c, f in flags.items() if c not in found.controllers]
    detail = f"cgroup {found.layout} at {root}: {', '.join(have)} enforced"
    if lacking:
        detail += f"; {', '.join(lacking)} refused (no writable controller)"
    return Check("limits", OK, detail)


def sandbox_check(state: State) -> Check:
    """Whether `--sandbox` can be made here: bubblewrap on PATH (its version), and for a user
    other than root, user namespaces (which bubblewrap then needs)."""
    import shutil  # shutil, subprocess: only doctor asks bubblewrap its version
    import subprocess  # as shutil

    bwrap = shutil.which("bwrap", path=state.env.get("PATH"))
    if bwrap is None:
        return Check(
            "sandbox",
            WARN,
            "no bubblewrap (bwrap) on PATH: sandboxed jobs are refused; apt-get install bubblewrap",
        )
    try:
        said = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=5)
        found = said.stdout.strip() or bwrap
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("sandbox", FAIL, f"{bwrap} does not run: {exc}")
    if os.geteuid() != 0:
        try:
            limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
        except (OSError, ValueError):
            limit = 1
        if limit <= 0:
            return Check("sandbox", WARN, f"{found}, but user namespaces are off: sandboxes fail")
    return Check("sandbox", OK, f"{found} at {bwrap}: --sandbox and network allowlists work")


def config_check(state: State) -> Check:
    """The config file (DELEGATE_CONFIG, else delegate.toml in the state dir) reads and its
    profiles parse; a missing default file is an empty config."""
    try:
        source, config = read_config(state.layout.home, state.env)
        known = profiles(config, source)
        max_running_caps(config)
    except DelegateError as exc:
        return Check("config", FAIL, str(exc))
    if not source.exists():
        return Check("config", OK, f"{source} does not exist: built-in profiles only")
    return Check("config", OK, f"{source}: profiles {', '.join(sorted(known))}")


def worktree_check(state: State) -> Check:
    """Job worktrees over `[worktree] keep_max_gb` / `keep_days`: reported, never removed."""
    try:
        found = over_limits(state, read_config(state.layout.home, state.env))
    except DelegateError as exc:
        return Check("worktrees", FAIL, str(exc))
    if found:
        tail = "; `delegate worktree clean` removes those that hold no work"
        return Check("worktrees", WARN, "; ".join(found) + tail)
    return Check("worktrees", OK, "job worktrees within the [worktree] limits (if any)")


def tmux_checks(state: State) -> list[Check]:
    """tmux's version, the folder its socket lives in, and a round trip on a private socket
    (start a server, create and kill a session): what every launch needs."""
    try:
        found = version()
    except TmuxError as exc:
        return [Check("tmux", FAIL, str(exc))]
    checks = [Check("tmux", OK, found)]
    socket = Tmux.from_env(state.env).socket_path
    folder = os.path.dirname(socket)
    named_path = "/" in (state.env.get(TMUX_SOCKET_ENV) or "")
    if os.path.isdir(folder):
        problem = None if named_path else socket_folder_problem(folder)
        if problem:
            checks.append(Check("tmux_socket", FAIL, f"{folder} {problem}"))
        else:
            checks.append(Check("tmux_socket", OK, socket))
    else:
        base = os.path.dirname(folder)
        if os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK):
            checks.append(Check("tmux_socket", OK, f"{folder} is made (mode 700) on first use"))
        else:
            checks.append(Check("tmux_socket", FAIL, f"{base} is missing or not writable"))
    try:
        round_trip()
    except TmuxError as exc:
        checks.append(Check("tmux_round_trip", FAIL, str(exc)))
    else:
        checks.append(Check("tmux_round_trip", OK, "started a server, made and killed a session"))
    return checks


def bus_checks(state: State) -> list[Check]:
    """Can the bus be reached? For a broker: is it up, does TLS verify, are we let in."""
    url = strip_credentials(state.default_bus_url())
    mqtt = url.startswith(("mqtt://", "mqtts://"))
    try:
        bus = open_bus(state.default_bus_url(), env=state.env)
        try:
            bus.probe()
        finally:
            bus.close()
    except DelegateError as exc:
        kind = getattr(exc, "kind", None)
        if not mqtt or kind is None:
            return [Check("bus", FAIL, str(exc))]
        order = ["unreachable", "tls", "credentials"]
        names = {"unreachable": "broker", "tls": "tls", "credentials": "credentials"}
        failed = order.index(kind)
        out = [Check(names[k], OK, "passed") for k in order[:failed]]
        out.append(Check(names[kind], FAIL, str(exc)))
        out += [Check(names[k], WARN, "not checked") for k in order[failed + 1 :]]
        return out
    if not mqtt:
        return [Check("bus", OK, f"{url} is reachable")]
    tls = url.startswith("mqtts://")
    return [
        Check("broker", OK, f"{url} is reachable"),
        Check("tls", OK if tls else WARN, "certificate verified" if tls else "not encrypted"),
        Check("credentials", OK, "the broker accepted the connection"),
    ]


def healthy(checks: list[Check]) -> bool:
    return all(c.status == OK for c in checks)
