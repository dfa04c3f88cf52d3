"""Entry point of the `delegate` console script."""

from __future__ import annotations

import sys

from delegate import version_line
from delegate.config import logsetup
from delegate.core.errors import guarded

TYPE_CHECKING = False  # the fast paths (publish, hook) import nothing they do not use
if TYPE_CHECKING:
    pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv

    def dispatch() -> int:
        if argv in (["--version"], ["-V"]):  # answered without typer
            sys.stdout.write(version_line() + "\n")
            return 0
        if argv[:1] == ["publish"] and not {"-h", "--help"} & set(argv):
            from delegate.entry.publish import main_publish  # each fast path loads its own

            logsetup.configure_lazily()
            return main_publish(argv[1:])
        if argv[:2] == ["cron", "run"] and len(argv) == 3 and not argv[2].startswith("-"):
            from delegate.entry.cron import main_cron_run  # only its own fast path (see publish)

            logsetup.configure_lazily()
            code = main_cron_run(argv[2])
            if code >= 0:
                return code
        fast_lock = argv[1:2] in (["acquire"], ["renew"], ["release"], ["check"])
        if argv[:1] == ["lock"] and fast_lock and not {"-h", "--help"} & set(argv):
            from delegate.entry.coord import main_lock  # only its own fast path (sqlite3, leases)

            logsetup.configure_lazily()
            return main_lock(argv[1:])
        if argv[:1] == ["ps"] and not {"-h", "--help"} & set(argv):
            from delegate.entry.ps import main_ps  # only its own fast path (the registry, tmux)

            logsetup.configure_lazily()
            answered = main_ps(argv[1:])
            if answered is not None:
                return answered
        if argv[:1] == ["hook"] and not {"-h", "--help"} & set(argv):
            from delegate.entry.publish import main_hook  # only its own fast path

            logsetup.configure_lazily()
            return main_hook(argv[1:])
        logsetup.configure()
        from delegate.cli.app import run  # typer, click, rich: only when no fast path answered

        return run(argv)

    return guarded(dispatch)


def console_main() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console_main()
