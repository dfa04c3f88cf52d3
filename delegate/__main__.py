"""Entry point of the `delegate` console script."""

from __future__ import annotations

import os
import sys

from . import _logging

TYPE_CHECKING = False  # the fast paths (publish, hook) import nothing they do not use
if TYPE_CHECKING:
    from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv

    def dispatch() -> int:
        if argv in (["--version"], ["-V"]):  # answered without typer
            from . import version_line

            sys.stdout.write(version_line() + "\n")
            return 0
        if argv[:1] == ["publish"] and not {"-h", "--help"} & set(argv):
            from .fastcli import main_publish

            _logging.configure_lazily()
            return main_publish(argv[1:])
        if argv[:2] == ["cron", "run"] and len(argv) == 3 and not argv[2].startswith("-"):
            from .fastcron import main_cron_run

            _logging.configure_lazily()
            code = main_cron_run(argv[2])
            if code >= 0:
                return code
        fast_lock = argv[1:2] in (["acquire"], ["renew"], ["release"], ["check"])
        if argv[:1] == ["lock"] and fast_lock and not {"-h", "--help"} & set(argv):
            from .fastcoord import main_lock

            _logging.configure_lazily()
            return main_lock(argv[1:])
        if argv[:1] == ["hook"] and not {"-h", "--help"} & set(argv):
            from .fastcli import main_hook

            _logging.configure_lazily()
            return main_hook(argv[1:])
        _logging.configure()
        from .cli import run

        return run(argv)

    return guarded(dispatch)


def guarded(call: Callable[[], int]) -> int:
    """Run an entry point: whatever goes wrong becomes one line on stderr and a documented exit
    status (README, "Exit status"), never a traceback. The CLI, the wrapper, the supervisor and
    the monitor all go through here."""
    from .errors import DelegateError, say

    try:
        return call()
    except DelegateError as exc:
        say(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141  # the reader went away (`delegate jobs | head`): stop quietly
        say(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": "))
        return 74
    except Exception as exc:  # a bug: one line for the user, the traceback at debug level
        import logging

        logging.getLogger("delegate").debug("internal error", exc_info=True)
        say(
            f"internal error: {type(exc).__name__}: {exc}"
            " (run with DELEGATE_LOG_LEVEL=DEBUG for the traceback)"
        )
        return 70


def console_main() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console_main()
