"""`delegate dashboard`: parse the options, check the listening address, start the server.

The server (`runtime.dashboard.server`) needs the optional `web` extra; without it the command
says in one line how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from delegate.cli.common import open_state
from delegate.core.errors import ConfigError
from delegate.runtime.dashboard import EXTRA_MODULES, INSTALL_HINT
from delegate.runtime.dashboard.guard import check_bind

# The root-level command this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
def dashboard(
    bind: Annotated[str, typer.Option("--bind", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port (0: any free one).")] = 8765,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only", help="Show jobs only: no actions (Cancel, Send, Approve/Deny, Retry)."
        ),
    ] = False,
    tls_cert: Annotated[
        str | None, typer.Option("--tls-cert", help="PEM certificate, to serve HTTPS.")
    ] = None,
    tls_key: Annotated[
        str | None, typer.Option("--tls-key", help="PEM private key of --tls-cert.")
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option("--insecure", help="Allow a non-loopback --bind without TLS."),
    ] = False,
    report_dir: Annotated[
        Path | None,
        typer.Option(
            "--report-dir", help="Where `report --format html` wrote its page (default: ours)."
        ),
    ] = None,
) -> int:
    """A local web page of the jobs, live: table, detail (with a worktree job's diff), queue,
    hosts, latest report.

    Prints its URL once, with a token (as Jupyter does); Cancel, Send, Approve, Deny and
    Retry need it. Binding
    anything but loopback needs --tls-cert/--tls-key, or --insecure.
    Example: delegate dashboard --port 8765
    """
    if not 0 <= port <= 65535:
        raise typer.BadParameter("--port must be 0-65535")
    check_bind(bind, tls_cert=tls_cert, tls_key=tls_key, insecure=insecure)
    try:
        # starlette, uvicorn and sse-starlette: the optional web extra, only for this command
        from delegate.runtime.dashboard.server import Options, serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in EXTRA_MODULES:
            raise ConfigError(INSTALL_HINT) from None
        raise
    options = Options(
        bind=bind,
        port=port,
        read_only=read_only,
        tls_cert=tls_cert,
        tls_key=tls_key,
        report_dir=report_dir,
    )
    return serve(open_state(), options)
