"""Where state lives and which bus to use, resolved in one place.

Precedence: explicit argument > `DELEGATE_*` environment > default. The environment is passed in
(`env=`) rather than read from globals, so tests and services can give their own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from delegate.config.settings import BUS_ENV, settings, state_home_text
from delegate.config.statefiles import (
    BUS_DB,
    COORD_DB,
    CRON_BOOK,
    GROUPS_BOOK,
    JOBS_DIR,
    LOGS_DIR,
    REPORTS_DIR,
    SESSIONS_DB,
    WORKTREES_DIR,
)
from delegate.core.errors import ConfigError


def state_home(env: Mapping[str, str] | None = None) -> Path:
    """`$DELEGATE_HOME`, else the platform's user state dir for `delegate`."""
    text = state_home_text(settings().env if env is None else env)
    if text is not None:
        return Path(text)
    from platformdirs import user_state_dir  # platformdirs (~15 ms): macOS and others only

    return Path(user_state_dir("delegate")).absolute()


class Layout:
    """The state directory layout of DESIGN section 3."""

    __slots__ = ("home",)

    def __init__(self, home: Path) -> None:
        self.home = home

    @property
    def jobs(self) -> Path:
        return self.home / JOBS_DIR

    @property
    def logs(self) -> Path:
        return self.home / LOGS_DIR

    @property
    def reports(self) -> Path:
        return self.home / REPORTS_DIR

    @property
    def bus_db(self) -> Path:
        return self.home / BUS_DB

    @property
    def sessions_db(self) -> Path:
        return self.home / SESSIONS_DB

    @property
    def coord_db(self) -> Path:
        return self.home / COORD_DB

    @property
    def cron_book(self) -> Path:
        return self.home / CRON_BOOK

    @property
    def groups_book(self) -> Path:
        return self.home / GROUPS_BOOK

    @property
    def worktrees(self) -> Path:
        return self.home / WORKTREES_DIR

    def worktree_for(self, repo: Path, job_id: str) -> Path:
        """Where job `job_id`'s worktree of the checkout `repo` goes (never inside it)."""
        return self.worktrees / (repo.name or "repo") / job_id

    def default_bus_url(self) -> str:
        return f"sqlite://{self.bus_db}"


def bus_url(
    layout: Layout, env: Mapping[str, str] | None = None, explicit: str | None = None
) -> str:
    env = settings().env if env is None else env
    url = explicit or env.get(BUS_ENV) or layout.default_bus_url()
    if "://" not in url:
        raise ConfigError(f"bus URL {url!r} has no scheme; use sqlite:///path or mqtt://host:port")
    return url
