"""A job's box, decided at submit: its sandbox (bubblewrap, core/sandbox; `--sandbox`, a
profile's `sandbox`, `[sandbox]`) and its resource limits (cgroups, core/limits;
`--max-memory/--max-cpus/--max-pids`, `[limits]`). Each is refused in one line where this
machine cannot make it: a job never runs unboxed or unlimited in silence."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from delegate.config.limits import limits_for
from delegate.config.profiles import ConfigFile, Profile
from delegate.config.sandbox import sandbox_settings
from delegate.config.settings import cgroup_root
from delegate.core.errors import DelegateError, UsageError
from delegate.core.ids import is_job_id
from delegate.core.limits import Limits
from delegate.core.sandbox import Box
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs import agent_env
from delegate.services.state import State


def sandbox_for(
    state: State, asked: bool | None, profile: Profile, config: ConfigFile
) -> Box | None:
    """The job's sandbox when it gets one (`asked`: its flag, else its profile, else
    `[sandbox] default`); UsageError when bubblewrap is not there to make it: never run
    unboxed in silence."""
    settings = sandbox_settings(config.tables, config.path, state.env)
    wanted = asked if asked is not None else profile.sandbox
    if not (wanted if wanted is not None else settings.default):
        return None
    network = profile.network or settings.network
    if profile.run_as and network == "allowlist":
        # the egress relay inside the box is this toolkit's Python, which the agent's user
        # may not be able to run: refused, never run half-boxed
        raise UsageError(
            f"profile {profile.name!r} runs as {profile.run_as!r}: its sandbox's egress"
            ' allowlist together with run_as is not supported yet; set network = "none" or'
            ' "host" for it, or drop run_as'
        )
    bwrap = shutil.which("bwrap", path=agent_env.agent_path(profile, state.env))
    if bwrap is None:
        raise UsageError(
            "--sandbox needs bubblewrap (`bwrap`), which is not on the agent's PATH: install it"
            " (apt-get install bubblewrap; `make demo` does) or submit with --no-sandbox"
        )
    home = state.env.get("HOME") or os.path.expanduser("~")
    hide = tuple(dict.fromkeys([home, str(state.layout.home)]))
    hosts = (*settings.allow_hosts, *API_HOSTS.get(profile.name, ()))
    own = tuple(os.path.join(home, name) for name in AGENT_HOME_FILES.get(profile.name, ()))
    write = (*own, *settings.write)
    return Box(bwrap, hide, settings.read, write, network, hosts)


# The hosts a sandboxed built-in agent needs for its model (`network = "allowlist"`).
API_HOSTS = {"claude": ("api.anthropic.com",), "codex": ("api.openai.com", "chatgpt.com")}
# What of the hidden home a built-in agent keeps its login, settings and sessions in: bound
# back writable (those that exist), so a sandboxed agent is still logged in.
AGENT_HOME_FILES = {"claude": (".claude", ".claude.json"), "codex": (".codex",)}


def inside_our_box(profile: Profile) -> Profile:
    """A sandboxed profile as it must run inside our box: codex cannot make its own sandbox
    there (its every command would fail), and ours holds its work to the workdir already."""
    if profile.channel == "codex-json" and profile.agent_sandbox in (None, "workspace-write"):
        return profile._replace(agent_sandbox="danger-full-access")
    return profile


def limits_for_job(
    state: State, asked: Limits, profile: Profile, config: ConfigFile, group: str | None = None
) -> Limits:
    """The job's limits (`asked`: its flags, over `[limits]` for its group and profile),
    refused in one line naming the cause when this machine cannot enforce them: a job is
    never run unlimited in silence."""
    limits = asked.over(limits_for(config.tables, config.path, profile.name, group))
    if not limits:
        return limits
    from delegate.adapters.cgroups import support  # only a limited job looks at cgroups

    found = support(Path(cgroup_root(state.env)))
    missing = found.missing(limits)
    if missing:
        flags = {"memory": "--max-memory", "cpu": "--max-cpus", "pids": "--max-pids"}
        named = ", ".join(flags[c] for c in missing)
        why = found.reason or f"the {', '.join(missing)} cgroup controller(s) cannot be written"
        raise UsageError(
            f"{named} cannot be enforced here: {why}; run the delegator as root on a machine"
            " with cgroups (see `delegate doctor`), or drop the limit"
        )
    return limits


def clear_left_groups(state: State, min_age_s: float) -> list[str]:
    """Empty and remove the cgroups that ended jobs of this state dir left (their wrapper,
    which clears them when its agent exits, was killed first: what the agent started may
    still run in them). Only a job ended `min_age_s` ago or more: a wrapper may still be
    reading its figures. Groups of jobs not in this registry (another state dir's) are left
    alone. Each cleared group is an audit line (`cgroup_cleared`, the processes it killed)."""
    from delegate.adapters.cgroups import existing_groups  # only a supervisor sweeping

    cleared = []
    now = datetime.now(UTC)
    for job_id, group in existing_groups(Path(cgroup_root(state.env))).items():
        if not is_job_id(job_id):  # a folder anyone with the rights made: not a job's
            continue
        try:
            job = state.registry.get(job_id)
        except DelegateError:
            continue  # not a job of ours
        ended = parse_timestamp(job.updated_at) if job.status.terminal else None
        if ended is None or (now - ended).total_seconds() < min_age_s:
            continue
        left = sorted(group.pids())
        group.kill_all()
        group.remove()
        state.audit.append(job_id, "cgroup_cleared", killed=len(left))
        cleared.append(job_id)
    return cleared
