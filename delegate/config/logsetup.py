"""Loggers that import `logging` only when something is logged.

`logging` costs several milliseconds to import, and the publish path has a 60 ms budget for the
whole process; most runs never log anything. Library modules write `log = get_logger(__name__)`
exactly as they would with `logging.getLogger`; handlers are still configured only by the entry
point (`configure`), either at once or, on the fast path, at the first message.
"""

from __future__ import annotations

import sys

from delegate.config.settings import DEFAULT_LOG_LEVEL, settings

TYPE_CHECKING = False  # typing (and the re it imports) costs ~10 ms on the publish path
if TYPE_CHECKING:
    from typing import Any

_configure_on_first_use = False
DEFAULT_LEVEL = DEFAULT_LOG_LEVEL  # without DELEGATE_LOG_LEVEL


def configure() -> None:
    import logging  # logging: several ms, paid only by a run that configures or logs

    level = settings().log_level.upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.WARNING),
        stream=sys.stderr,
        format="delegate: %(levelname)s: %(message)s",
    )


def configure_lazily() -> None:
    """Entry points on a fast path call this instead of `configure`."""
    global _configure_on_first_use
    _configure_on_first_use = True


class LazyLogger:
    __slots__ = ("_logger", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._logger: Any = None

    def _get(self) -> Any:
        if self._logger is None:
            import logging  # logging: at the first message, not at import (module doc)

            global _configure_on_first_use
            if _configure_on_first_use:
                _configure_on_first_use = False
                configure()
            self._logger = logging.getLogger(self.name)
        return self._logger

    def debug(self, msg: str, *args: Any) -> None:
        self._get().debug(msg, *args)

    def info(self, msg: str, *args: Any) -> None:
        self._get().info(msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self._get().warning(msg, *args)

    def error(self, msg: str, *args: Any) -> None:
        self._get().error(msg, *args)


def get_logger(name: str) -> LazyLogger:
    return LazyLogger(name)
