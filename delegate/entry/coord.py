"""The fast path of `delegate lock acquire|renew|release|check`: parsed without typer.

Agents take and drop locks around every file they touch, so these commands start in a few
milliseconds over a bare Python start. Options mirror the typer commands in `cli/coord.py` (a test
checks that they stay the same); `--help` goes to typer.
"""

from __future__ import annotations

import os
import sys

from delegate.core import fastjson as json
from delegate.core.errors import DelegateError, UsageError, say
from delegate.entry.argv import parse_options

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
    """coord.db of $DELEGATE_HOME as a plain string: pathlib costs ~6 ms to import."""
    home = os.environ.get("DELEGATE_HOME")
    if home:
        return os.path.join(os.path.abspath(os.path.expanduser(home)), "coord.db")
    from delegate.config.layout import state_home

    return str(state_home() / "coord.db")


def main_lock(argv: list[str]) -> int:
    try:
        action = argv[0]
        resource, values = parse_lock_args(action, argv[1:])
        from delegate.coord import leases
        from delegate.coord.store import CoordStore

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
        from delegate.coord import default_agent

        given = values.get("--owner")
        owner = default_agent(str(given) if given else None)
        if not owner:
            raise UsageError("--owner is needed (or run inside a job, or set DELEGATE_AGENT_ID)")
        events: list[dict[str, object]] = []
        if action == "acquire":
            # services.coord.acquire_lease does this too; its imports would cost this path ~8 ms
            thresholds = leases.DEFAULT_THRESHOLDS
            if values.get("--break-dead"):
                from delegate.services.coord import heartbeat_thresholds

                thresholds = heartbeat_thresholds()
            grant, events = leases.acquire(
                store,
                "lock",
                resource,
                owner,
                ttl_s=_number(values, "--ttl", LOCK_TTL_S),
                wait_s=_number(values, "--wait", 0.0),
                break_dead=bool(values.get("--break-dead")),
                thresholds=thresholds,
            )
        elif action == "renew":
            grant = leases.renew(
                store, "lock", resource, owner, ttl_s=_number(values, "--ttl", LOCK_TTL_S)
            )
        else:
            events = [leases.release(store, "lock", resource, owner)]
            grant = None
        if events and os.environ.get("DELEGATE_JOB_ID"):
            from delegate.services.coord import announce

            announce(events)
        if grant is not None:
            out = json.dumps(grant.to_dict()) if values.get("--json") else str(grant.token)
            sys.stdout.write(out + "\n")
        return 0
    except DelegateError as exc:
        say(exc)
        return exc.exit_code
