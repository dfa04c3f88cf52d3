"""`delegate host add|list|serve`: agent hosts reached through the broker (DESIGN 13)."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from delegate.adapters.terminal import print_listing
from delegate.cli.common import JsonOpt
from delegate.core import hostproto
from delegate.core.errors import UsageError
from delegate.core.timefmt import human_timeout, local_time
from delegate.services.remote import HostBook, host_rows
from delegate.services.state import State

host_app = typer.Typer(
    help="Agent hosts: add, remove, list, serve.\n\n"
    "Example: delegate host add build-1\n"
    "Example: delegate host list --json",
    no_args_is_help=True,
)


@host_app.command("add")
def host_add(
    name: Annotated[str, typer.Argument(help="The host's name (letters, digits, - and _).")],
    lost_after: Annotated[
        float,
        typer.Option("--lost-after", help="Seconds of silence before its jobs fail host_lost."),
    ] = 60.0,
) -> int:
    """Make a host key, keep it here (0600) and print it once: copy it to the host's key file.

    Example: delegate host add build-1 --lost-after 60
    """
    key = HostBook(State.open()).add(name, lost_after_s=lost_after)
    print(key)
    print(
        f"delegate: copy this key into a 0600 file on {name} and run"
        f" `delegate host serve --name {name} --key-file FILE` there",
        file=sys.stderr,
    )
    return 0


@host_app.command("remove")
def host_remove(
    name: Annotated[str, typer.Argument(help="The host to forget.")],
) -> int:
    """Forget a host and its key (refused while it has open jobs); add it again for a new key.

    Example: delegate host remove build-1
    """
    state = State.open()
    HostBook(state).remove(name, state)
    return 0


@host_app.command("list")
def host_list(
    as_json: JsonOpt = False,
) -> int:
    """Each host: last seen, online, running jobs (never its key).

    Example: delegate host list --json
    """
    print_listing(
        host_rows(State.open()),
        ["HOST", "STATE", "LAST SEEN", "RUNNING", "LOST AFTER"],
        lambda r: [
            r["name"],
            "online" if r["online"] else "offline",
            local_time(r["last_seen"]) if r["last_seen"] else "never",
            str(r["running_jobs"]),
            human_timeout(r["lost_after_s"]),
        ],
        as_json=as_json,
        empty="no agent hosts (add one with `delegate host add NAME`)",
    )
    return 0


@host_app.command("serve")
def host_serve(
    name: Annotated[str, typer.Option("--name", help="This host's name, as added.")],
    key_file: Annotated[Path, typer.Option("--key-file", help="The host key (a 0600 file).")],
    workdir: Annotated[
        Path | None, typer.Option("--workdir", help="Where jobs without a folder run.")
    ] = None,
    presence_every: Annotated[
        float,
        typer.Option("--presence-every", help="Seconds between presence messages (< lost-after)."),
    ] = 10.0,
) -> int:
    """Run jobs assigned to this host over the broker (DELEGATE_BUS), until stopped.

    Example: delegate host serve --name build-1 --key-file ~/.config/delegate/host.key
    """
    # runtime.host_server (submit, the launcher, the reconciler): only `host serve` runs it
    from delegate.runtime.host_server import HostServer

    try:
        mode = key_file.stat().st_mode & 0o077
        text = key_file.read_text()
    except OSError as exc:
        raise UsageError(f"cannot read the key file {key_file}: {exc.strerror}") from None
    if mode:
        raise UsageError(f"{key_file} is readable by others; chmod 600 it")
    folder = (workdir or Path.cwd()).expanduser().absolute()
    if not folder.is_dir():
        raise UsageError(f"--workdir {folder} is not a folder")
    if presence_every <= 0:
        raise UsageError("--presence-every is a number of seconds above 0")
    server = HostServer(
        State.open(),
        name,
        hostproto.parse_key(text),
        workdir=folder,
        presence_every_s=presence_every,
    )
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: server.stop())
    os.umask(0o077)
    server.serve()
    return 0


# The root-level group this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()
commands.add_typer(host_app, name="host")
