"""The one exception hierarchy of the toolkit.

Every error a user can cause or meet is a `DelegateError` subclass that keeps its facts as
attributes and builds its own message. The CLI maps `exit_code` to the process exit status in one
place; nothing below the CLI prints or exits.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # `typing` costs the fast paths milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable


def say(message: object) -> None:
    """Print `delegate: MESSAGE` to stderr as exactly one line: line breaks and other control
    characters a user's input may have carried into the message are shown escaped."""
    text = "".join(
        ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii")
        for ch in str(message)
    )
    print(f"delegate: {text}", file=sys.stderr)


class DelegateError(Exception):
    """Base of every error the toolkit raises on purpose."""

    exit_code = 4

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(DelegateError):
    """The command line or an input value is not acceptable."""

    exit_code = 64


class InvalidJobId(UsageError):
    def __init__(self, job_id: object) -> None:
        self.job_id = job_id
        super().__init__(f"invalid job id {job_id!r}: expected 8 lowercase hex characters")


class JobNotFound(DelegateError):
    exit_code = 66

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"no job {job_id}")


class CorruptRecord(DelegateError):
    """A job record did not parse; it was moved to quarantine, never overwritten."""

    exit_code = 65

    def __init__(self, job_id: str, quarantined_to: str, reason: str) -> None:
        self.job_id = job_id
        self.quarantined_to = quarantined_to
        self.reason = reason
        super().__init__(f"job record {job_id} is corrupt ({reason}); moved to {quarantined_to}")


class IllegalTransition(DelegateError):
    exit_code = 67

    def __init__(self, job_id: str, current: str, target: str) -> None:
        self.job_id = job_id
        self.current = current
        self.target = target
        super().__init__(f"job {job_id} cannot go from {current} to {target}")


class PublishRefused(DelegateError):
    """The publisher will not send this event (for example the job already ended)."""

    exit_code = 67

    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"cannot publish for job {job_id}: {reason}")


class LockTimeout(DelegateError):
    exit_code = 75

    def __init__(self, path: str, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        super().__init__(f"could not lock {path} within {timeout_s:g} s; another process holds it")


class BusError(DelegateError):
    """The bus could not be opened, or did not acknowledge a message."""

    exit_code = 69


class ConfigError(UsageError):
    pass


class GitError(DelegateError):
    """git refused or failed (adapters/git), or a worktree cannot be made, shown or removed;
    the message is one line saying what and why."""

    exit_code = 67


class GitLockHeld(GitError):
    """Another git process held an index.lock for longer than we wait."""

    exit_code = 75


class StartFailed(DelegateError):
    """A job could not be started (launched here, or assigned to its host); it has ended
    with `reason` (`launch_failed`, `assign_failed`) and the cause's message."""

    def __init__(self, job_id: str, reason: str, cause: DelegateError) -> None:
        self.job_id = job_id
        self.reason = reason
        self.cause = cause
        self.exit_code = cause.exit_code
        super().__init__(f"job {job_id} ended {reason}: {cause}")


class WaitInterrupted(DelegateError):
    """The person stopped waiting (Ctrl-C); the job itself goes on."""

    exit_code = 130

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(
            f"job {job_id} keeps running; 'delegate watch {job_id}' follows it,"
            f" 'delegate cancel {job_id}' stops it"
        )


def guarded(call: Callable[[], int]) -> int:
    """Run an entry point: whatever goes wrong becomes one line on stderr and a documented exit
    status (docs/reference/commands.md), never a traceback. The CLI, the wrapper, the supervisor and
    the monitor all go through here."""
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
        import logging  # logging: only for a bug's traceback; the fast paths never load it

        logging.getLogger("delegate").debug("internal error", exc_info=True)
        say(
            f"internal error: {type(exc).__name__}: {exc}"
            " (run with DELEGATE_LOG_LEVEL=DEBUG for the traceback)"
        )
        return 70
