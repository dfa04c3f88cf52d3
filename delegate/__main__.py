"""Entry point of the `delegate` console script."""

from __future__ import annotations

import os
import sys

from delegate import version_line
from delegate.config import logsetup
from delegate.core.errors import guarded

LOCK_FAST = (["acquire"], ["renew"], ["release"], ["check"])
# Fast paths whose process may end without the interpreter's teardown (see _exit_at_once): they
# write only through file descriptors (atomic_write, append_line) and committed SQLite
# transactions (publish's bus is closed before it returns), so no buffer of theirs is left for
# the teardown to flush or close.
EXIT_AT_ONCE = (["ps"], ["submit"], ["publish"], ["hook"])
# Loaded, these mean exit may have work to do: `atexit` (every exit handler registers through
# it: logging's flush, weakref.finalize, ...), or a typer command that answered instead.
EXIT_HAS_WORK = ("atexit", "delegate.cli.app")


def _fast_path(argv: list[str]) -> int | None:
    """The exit status of a command a typer-free path answers, or None for typer. Each path
    imports only its own modules, inside this function, so no path loads another's."""
    if {"-h", "--help"} & set(argv):
        return None  # help comes from the typer commands
    command = argv[:1]
    if command == ["publish"]:
        from delegate.entry.publish import main_publish  # each fast path loads its own

        return main_publish(argv[1:])
    if argv[:2] == ["cron", "run"] and len(argv) == 3 and not argv[2].startswith("-"):
        from delegate.entry.cron import main_cron_run  # only its own fast path (see publish)

        code = main_cron_run(argv[2])
        return code if code >= 0 else None
    if command == ["lock"] and argv[1:2] in LOCK_FAST:
        from delegate.entry.coord import main_lock  # only its own fast path (sqlite3, leases)

        return main_lock(argv[1:])
    if command == ["ps"]:
        from delegate.entry.ps import main_ps  # only its own fast path (the registry, tmux)

        return main_ps(argv[1:])
    if command == ["submit"]:
        from delegate.entry.submit import main_submit  # only its own fast path (the launcher)

        return main_submit(argv[1:])
    if command == ["hook"]:
        from delegate.entry.publish import main_hook  # only its own fast path

        return main_hook(argv[1:])
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv

    def dispatch() -> int:
        if argv in (["--version"], ["-V"]):  # answered without typer
            sys.stdout.write(version_line() + "\n")
            return 0
        logsetup.configure_lazily()
        answered = _fast_path(argv)
        if answered is not None:
            return answered
        logsetup.configure()
        from delegate.cli.app import run  # typer, click, rich: only when no fast path answered

        return run(argv)

    return guarded(dispatch)


def _exit_at_once(argv: list[str], code: int) -> None:
    """End the process now when a fast path that leaves nothing to flush answered: the
    interpreter's teardown (freeing every module and object one by one) costs `ps --json`,
    `submit --no-wait` and a direct `publish` 10-20% of their run, for nothing a process that
    ends needs. Returns (for
    a normal exit) when exit has work to do: handlers to run, another thread to join."""
    if argv[:1] not in EXIT_AT_ONCE or any(name in sys.modules for name in EXIT_HAS_WORK):
        return
    threading = sys.modules.get("threading")
    main = threading.main_thread() if threading is not None else None
    if threading is not None and any(t is not main and not t.daemon for t in threading.enumerate()):
        return  # a thread to join (a daemon one, as a helper's reaper, is not waited for)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # (AttributeError: no sys.stdout)
        return  # the normal exit reports it as it always did
    os._exit(code)


def console_main() -> None:
    argv = sys.argv[1:]
    code = main(argv)
    _exit_at_once(argv, code)
    sys.exit(code)


if __name__ == "__main__":
    console_main()
