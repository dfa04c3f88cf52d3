"""The fast path of `delegate lock acquire|renew|release|check`: parsed without typer.

Agents take and drop locks around every file they touch, so these commands start in a few
milliseconds over a bare Python start. Options mirror the typer commands in `cli/coord.py` (a test
checks that they stay the same); `--help` goes to typer.
"""

from __future__ import annotations

import os
import sys

from delegate.config.settings import settings
from delegate.config.statefiles import COORD_DB
from delegate.coord import default_agent, leases
from delegate.coord.store import CoordStore
from delegate.core import fastjson as json
from delegate.core.errors import DelegateError, UsageError, say
from delegate.entry.argv import parse_options

TYPE_CHECKING = False  # this path imports no typing at run time
if TYPE_CHECKING:
    from delegate.coord.leases import Grant

LOCK_TTL_S = 600.0  # `lock acquire|renew --ttl` when not given (the typer commands use it too)

# option -> takes a value; per subcommand
LOCK_OPTIONS: dict[str, dict[str, bool]] = {
    "acquire": {
        "--owner": True,
        "--ttl": True,
        "--wait": True,
        "--break-dead": False,
        "--json": False,
    },
    "renew": {"--owner": True, "--ttl": True, "--json": False},
    "release": {"--owner": True},
    "check": {"--token": True},
}


def parse_lock_args(action: str, argv: list[str]) -> tuple[str, dict[str, str | bool]]:
    """RESOURCE and the options of `lock ACTION`, as `--opt value`, `--opt=value` or flags."""
    positional, values = parse_options(f"lock {action}", LOCK_OPTIONS[action], argv)
    if len(positional) != 1:
        raise UsageError(f"lock {action} takes one RESOURCE")
    return positional[0], values


def _number(values: dict[str, str | bool], name: str, default: float) -> float:
    raw = values.get(name)
    if raw is None:
        return default
    try:
        return float(str(raw))
    except ValueError:
        raise UsageError(f"{name} is a number, not {raw!r}") from None


def _coord_db() -> str:
    """coord.db of $DELEGATE_HOME as a plain string: pathlib costs ~10 ms to import."""
    home = settings().home
    if home:
        return os.path.join(os.path.abspath(os.path.expanduser(home)), COORD_DB)
    # config.layout (pathlib, platformdirs): only without $DELEGATE_HOME
    from delegate.config.layout import Layout, state_home

    return str(Layout(state_home()).coord_db)


def acquire_lease(
    store: CoordStore,
    kind: str,
    name: str,
    owner: str,
    *,
    ttl_s: float,
    wait_s: float = 0.0,
    break_dead: bool = False,
) -> Grant:
    """`lock acquire` and `claim`, on this path and in the typer commands alike: take it
    (breaking a DEAD holder's only when asked, judged by the configured thresholds), then
    announce what happened on the actor's job bus."""
    thresholds = leases.DEFAULT_THRESHOLDS
    if break_dead:
        # services.coord reads delegate.toml and costs ~15 ms to import: only then
        from delegate.services.coord import heartbeat_thresholds

        thresholds = heartbeat_thresholds()
    grant, events = leases.acquire(
        store,
        kind,
        name,
        owner,
        ttl_s=ttl_s,
        wait_s=wait_s,
        break_dead=break_dead,
        thresholds=thresholds,
    )
    announce(events)
    return grant


def announce(events: list[dict[str, object]]) -> None:
    """Publish coordination events on the actor's job bus (`services.coord.announce`), which
    only a process inside a job has: the others do not import it (~15 ms)."""
    if events and settings().job_id:
        # services.coord (and the job's bus behind it): only inside a job (docstring)
        from delegate.services.coord import announce as announce_on_job_bus

        announce_on_job_bus(events)


def main_lock(argv: list[str]) -> int:
    try:
        action = argv[0]
        resource, values = parse_lock_args(action, argv[1:])
        store = CoordStore(_coord_db())
        if action == "check":
            token = values.get("--token")
            if token is None:
                raise UsageError("lock check: --token is needed")
            try:
                number = int(str(token))
            except ValueError:
                raise UsageError(f"--token is a whole number, not {token!r}") from None
            current, why = leases.check(store, "lock", resource, number)
            sys.stdout.write(why + "\n")
            return 0 if current else 1
        given = values.get("--owner")
        owner = default_agent(str(given) if given else None)
        if not owner:
            raise UsageError("--owner is needed (or run inside a job, or set DELEGATE_AGENT_ID)")
        if action == "acquire":
            grant = acquire_lease(
                store,
                "lock",
                resource,
                owner,
                ttl_s=_number(values, "--ttl", LOCK_TTL_S),
                wait_s=_number(values, "--wait", 0.0),
                break_dead=bool(values.get("--break-dead")),
            )
        elif action == "renew":
            grant = leases.renew(
                store, "lock", resource, owner, ttl_s=_number(values, "--ttl", LOCK_TTL_S)
            )
        else:
            announce([leases.release(store, "lock", resource, owner)])
            grant = None
        if grant is not None:
            if values.get("--json"):
                json.print_line(grant.to_dict())
            else:
                sys.stdout.write(f"{grant.token}\n")
        return 0
    except DelegateError as exc:
        say(exc)
        return exc.exit_code
