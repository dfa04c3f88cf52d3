"""`delegate cron`: scheduled submissions that never create a job twice (DESIGN 14).

Entries (name, schedule, job file, catch-up policy, when added) live in `cron.json` in the state
dir, changed under `cron.lock`. The crontab line an entry owns ends with the marker
`# delegate:NAME`; adding and removing rewrite only that line, so the rest of the crontab stays
byte for byte. (python-crontab was tried and rejected for the writing: it re-renders every line
it parsed, changing spacing and order.) Schedules are validated and walked with croniter, and put
in words with cron-descriptor.

`cron run NAME` (what the crontab line calls) takes the window the run belongs to, the latest
fire time at or before now, and submits the job file with the idempotency key
`NAME-<window>`: overlapping runs, retries and machines sharing a state dir make one job per
window, and a run that finds its window's job registered but never launched launches it.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters.fsio import FileLock, atomic_write
from delegate.adapters.tmux import socket_path_for
from delegate.config.profiles import config_path
from delegate.config.settings import CONFIG_ENV, HOME_ENV, TMUX_SOCKET_ENV, TMUX_TMPDIR_ENV
from delegate.core.errors import DelegateError, UsageError
from delegate.core.model import JobState
from delegate.core.policy import LaunchJob
from delegate.services.jobs.jobfile import merge_job_file
from delegate.services.jobs.launch import launcher_alive
from delegate.services.jobs.submit import SubmitRequest, read_prompt, submit, submit_remote
from delegate.services.reconciler import Reconciler
from delegate.services.remote import ASSIGNMENT_FILE, save_assignment
from delegate.services.state import State
from delegate.services.supervisor import ensure_supervisor

MARKER = "# delegate:"
CATCH_UP = ("skip", "once")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# cron fires at second 0, and the run starts a moment later; a run that starts a little early
# (clock skew) still belongs to the window that is about to open.
EARLY_TOLERANCE_S = 1.0


class CronError(DelegateError):
    exit_code = 64


SYSTEM_CRONTABS = (Path("/etc/cron.d"), Path("/etc/crontab"))


class Crontab(NamedTuple):
    """Where the lines live: the user's crontab (through `crontab`), another user's (`-u`), or
    a crontab file.

    A file in /etc/cron.d (or /etc/crontab), or any file given with a user, is a system crontab:
    each line names the user it runs as after the schedule.
    """

    user: str | None = None
    file: Path | None = None

    @property
    def run_as(self) -> str | None:
        """The user column of a system crontab line; None for a user's own crontab."""
        if self.file is None:
            return None
        if self.user is not None:
            return self.user
        path = self.file.absolute()
        if path == SYSTEM_CRONTABS[1] or path.parent == SYSTEM_CRONTABS[0]:
            return pwd.getpwuid(os.geteuid()).pw_name
        return None

    def check(self) -> None:
        in_cron_d = self.file is not None and self.file.absolute().parent == SYSTEM_CRONTABS[0]
        if in_cron_d and self.file is not None and _NAME.fullmatch(self.file.name) is None:
            raise UsageError(
                f"cron ignores {self.file}: a file in /etc/cron.d is named with letters,"
                " digits, '-' and '_' only"
            )
        if self.user is not None:
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                raise UsageError(f"no such user: {self.user}") from None

    def read(self) -> str:
        if self.file is not None:
            try:
                return self.file.read_text()
            except FileNotFoundError:
                return ""
        args = ["crontab", *(["-u", self.user] if self.user else []), "-l"]
        try:
            result = subprocess.run(args, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            raise _no_crontab() from None
        if result.returncode != 0:
            if "no crontab" in result.stderr.lower():
                return ""
            raise DelegateError(f"crontab -l failed: {result.stderr.strip()}")
        return result.stdout

    def write(self, text: str) -> None:
        if self.file is not None:
            try:  # keep the file's mode; cron refuses a system crontab others may write
                mode = self.file.stat().st_mode & 0o7777
            except FileNotFoundError:
                mode = 0o644
            atomic_write(self.file, text.encode(), mode=mode)
            return
        args = ["crontab", *(["-u", self.user] if self.user else []), "-"]
        try:
            result = subprocess.run(args, input=text, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            raise _no_crontab() from None
        if result.returncode != 0:
            raise DelegateError(f"crontab could not be written: {result.stderr.strip()}")


def _no_crontab() -> DelegateError:
    """No `crontab` program: Debian's cron package brings it and the daemon (`make demo`
    installs neither)."""
    return DelegateError(
        "crontab is not installed: apt-get install cron (`make demo` does not install it)"
    )


class _Field(NamedTuple):
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] stands for low + i


FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field(
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    _Field("day-of-week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def _field_problem(field: _Field, text: str) -> str | None:
    """What is wrong with one field of a schedule, in words; None when cron takes it.

    The grammar is cron's own (Debian's cron reads the line): `*`, numbers, names for months
    and weekdays, `a-b` ranges, `/step` and comma lists; croniter's extensions (L, W, #, ?)
    would be taken here and refused by cron, so they are refused here.
    """
    where = f"{field.name} field {text!r}"
    for item in text.split(","):
        problem = _item_problem(field, item, text, where)
        if problem is not None:
            return problem
    return None


def _item_problem(field: _Field, item: str, text: str, where: str) -> str | None:
    """What is wrong with one comma-separated item (`*/5`, `1-5`, `mon`) of the field `text`."""
    if not item:
        return f"{where}: an empty item in the list"
    base, slash, step = item.partition("/")
    widest = field.high - field.low + 1
    if slash and (not step.isdigit() or not 1 <= int(step) <= widest):
        return f"{where}: step {step!r} must be a number from 1 to {widest}"
    if base == "*":
        return None
    first, dash, last = base.partition("-")
    if slash and not dash:
        return f"{where}: a step needs * or a range before it (*/{step}, 0-30/{step})"
    start = _field_value(field, first, text, where)
    if isinstance(start, str):
        return start
    if not dash:
        return None
    end = _field_value(field, last, text, where)
    if isinstance(end, str):
        return end
    if end < start:
        return f"{where}: the range {base!r} goes backwards (cron needs low-high)"
    return None


def _field_value(field: _Field, word: str, text: str, where: str) -> int | str:
    """The number a word of the field `text` stands for, or what is wrong with it."""
    span = f"{field.low}-{field.high}"
    if word.isdigit():
        number = int(word)
        if not field.low <= number <= field.high:
            if word == text:
                return f"{where} is out of range ({span})"
            return f"{where}: {word} is out of range ({span})"
        return number
    if word.lower() in field.names:
        return field.low + field.names.index(word.lower())
    named = f" or a name ({field.names[0]}-{field.names[-1]})" if field.names else ""
    return f"{where}: {word!r} is not a number ({span}){named}"


def _validate_schedule(schedule: str) -> str:
    """The schedule with its spacing normalised, or UsageError naming what is wrong: the field,
    its value and the range it allows."""
    from croniter import CroniterBadDateError, croniter  # croniter: ~60 ms, only to read a schedule

    words = schedule.split()
    normal = " ".join(words)
    said = f"cron schedule {schedule.strip()!r}"
    if len(words) != len(FIELDS):
        names = " ".join(f.name for f in FIELDS)
        raise UsageError(f"{said}: expected 5 fields ({names}), got {len(words)}")
    for field, text in zip(FIELDS, words, strict=True):
        problem = _field_problem(field, text)
        if problem is not None:
            raise UsageError(f"{said}: {problem}")
    if not croniter.is_valid(normal):
        raise UsageError(f"{said}: croniter cannot read it")
    try:
        croniter(normal, datetime(2000, 1, 1, tzinfo=UTC)).get_next(datetime)
    except CroniterBadDateError:
        raise UsageError(f"{said}: it never fires (no such day in those months)") from None
    return normal


def describe(schedule: str) -> str:
    # cron_descriptor: ~60 ms, only when a schedule is put in words (`cron list`, `cron add`)
    from cron_descriptor import get_description  # type: ignore[import-untyped]

    try:
        return str(get_description(schedule))
    except Exception:  # a schedule croniter takes but the describer does not: say it as is
        return schedule


def window_of(schedule: str, now: datetime) -> datetime:
    """The latest fire time at or before `now` (UTC)."""
    from croniter import croniter  # croniter: as in _validate_schedule

    probe = now + timedelta(seconds=EARLY_TOLERANCE_S)
    fired: datetime = croniter(schedule, probe).get_prev(datetime)
    return fired.astimezone(UTC)


def next_run(schedule: str, now: datetime) -> datetime:
    from croniter import croniter  # croniter: as in _validate_schedule

    fire: datetime = croniter(schedule, now).get_next(datetime)
    return fire.astimezone(UTC)


def windows_between(schedule: str, after: datetime, before: datetime) -> list[datetime]:
    """Fire times strictly after `after` and strictly before `before`."""
    from croniter import croniter  # croniter: as in _validate_schedule

    found: list[datetime] = []
    walker = croniter(schedule, after)
    while True:
        fire = walker.get_next(datetime).astimezone(UTC)
        if fire >= before:
            return found
        found.append(fire)
        if len(found) > 10_000:
            return found  # a long-off machine: enough to decide on


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%MZ")


class CronBook:
    """The entries of this state dir (`cron.json`, changed under `cron.lock`)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.path = state.layout.cron_book
        self.lock = FileLock(state.layout.home / "cron.lock")

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except ValueError:
            raise DelegateError(f"{self.path} is not valid JSON; fix or remove it") from None
        return data if isinstance(data, dict) else {}

    def save(self, entries: dict[str, dict[str, Any]]) -> None:
        atomic_write(self.path, json.dumps(entries, indent=2, sort_keys=True).encode())


CRON_ENV = (HOME_ENV, CONFIG_ENV, TMUX_SOCKET_ENV, TMUX_TMPDIR_ENV)


def cron_quote(value: str) -> str:
    """`value` as one shell word on a crontab line: single-quoted where needed, and `%`
    escaped (cron turns a bare `%` into a newline and feeds the rest to stdin; it drops the
    backslash of `\\%`). A line break cannot be on a crontab line at all: refused."""
    if "\n" in value or "\r" in value:
        raise UsageError(f"{value!r} holds a line break; it cannot go on a crontab line")
    return shlex.quote(value).replace("%", "\\%")


def cron_settings(state: State) -> list[tuple[str, str]]:
    """The variables a cron line sets, as the adding shell has them: where the state lives
    (DELEGATE_HOME, always), the config file (DELEGATE_CONFIG), and where tmux lives
    (DELEGATE_TMUX_SOCKET as the socket's path, TMUX_TMPDIR), so the jobs cron starts land in the
    state dir and on the tmux server the person who added the line looks at."""
    env = state.env
    found = [(HOME_ENV, str(state.layout.home))]
    if env.get(CONFIG_ENV):
        found.append((CONFIG_ENV, os.path.abspath(os.path.expanduser(env[CONFIG_ENV]))))
    if env.get(TMUX_SOCKET_ENV):  # the tmux server jobs go to, as when the line was added
        found.append((TMUX_SOCKET_ENV, socket_path_for(env[TMUX_SOCKET_ENV], env)))
    if env.get(TMUX_TMPDIR_ENV):
        found.append((TMUX_TMPDIR_ENV, os.path.abspath(env[TMUX_TMPDIR_ENV])))
    return found


def cron_line(state: State, name: str, schedule: str, *, run_as: str | None = None) -> str:
    """The crontab line of an entry: absolute paths, quoted for the shell cron runs it with.

    `run_as`: the user column a system crontab (an /etc/cron.d file) has after the schedule.
    """
    exe = Path(sys.executable).parent / "delegate"
    settings = " ".join(f"{key}={cron_quote(value)}" for key, value in cron_settings(state))
    when = f"{schedule} {run_as}" if run_as else schedule
    return f"{when} {settings} {cron_quote(str(exe))} cron run {name} {MARKER}{name}"


def _without(text: str, name: str) -> str:
    kept = [line for line in text.splitlines(keepends=True) if not _is_ours(line, name)]
    return "".join(kept)


def _is_ours(line: str, name: str) -> bool:
    return line.rstrip("\n").endswith(f"{MARKER}{name}")


def add(
    state: State,
    schedule: str,
    job_file: Path,
    *,
    name: str | None = None,
    catch_up: str = "skip",
    crontab: Crontab | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    schedule = _validate_schedule(schedule)
    job_file = job_file.expanduser().absolute()
    _job_settings(job_file)  # refuse a job file that would fail at 3 a.m.
    config_path(state.layout.home, state.env)  # and a DELEGATE_CONFIG naming no file
    name = name or job_file.stem
    if _NAME.fullmatch(name) is None:
        raise UsageError(f"invalid cron entry name {name!r}: use letters, digits, '-' or '_'")
    if catch_up not in CATCH_UP:
        raise UsageError(f"--catch-up must be one of {', '.join(CATCH_UP)}")
    now = now or datetime.now(UTC)
    crontab = crontab or Crontab()
    crontab.check()
    book = CronBook(state)
    with book.lock:
        entries = book.load()
        entry: dict[str, Any] = {
            "name": name,
            "schedule": schedule,
            "job_file": str(job_file),
            "catch_up": catch_up,
            "added_at": now.isoformat(),
            "crontab": {"user": crontab.user, "file": str(crontab.file) if crontab.file else None},
            "last_window": None,
            "last_job_id": None,
            "skipped": [],
        }
        text = _without(crontab.read(), name)
        if text and not text.endswith("\n"):
            text += "\n"
        line = cron_line(state, name, schedule, run_as=crontab.run_as)
        crontab.write(text + line + "\n")
        entries[name] = entry
        book.save(entries)
    return entry


def remove(state: State, name: str, *, crontab: Crontab | None = None) -> dict[str, Any]:
    book = CronBook(state)
    with book.lock:
        entries = book.load()
        entry = entries.pop(name, None)
        if entry is None:
            raise CronError(f"no cron entry {name!r}")
        where = crontab or Crontab(
            entry["crontab"].get("user"),
            Path(entry["crontab"]["file"]) if entry["crontab"].get("file") else None,
        )
        before = where.read()
        after = _without(before, name)
        if after != before:
            where.write(after)
        book.save(entries)
    return entry


def listing(state: State, now: datetime | None = None) -> list[dict[str, Any]]:
    now = now or datetime.now(UTC)
    rows = []
    for entry in CronBook(state).load().values():
        last_state = None
        if entry.get("last_job_id"):
            try:
                last_state = state.registry.get(entry["last_job_id"]).status.value
            except DelegateError:
                last_state = "unknown"
        rows.append(
            {
                "name": entry["name"],
                "schedule": entry["schedule"],
                "description": describe(entry["schedule"]),
                "job_file": entry["job_file"],
                "catch_up": entry["catch_up"],
                "next_run": next_run(entry["schedule"], now).isoformat(),
                "last_job_id": entry.get("last_job_id"),
                "last_state": last_state,
                "skipped": len(entry.get("skipped") or []),
            }
        )
    return sorted(rows, key=lambda r: r["name"])


class RunResult(NamedTuple):
    job_id: str
    state: str
    window: str
    created: bool
    launched: bool  # a job registered for the window but never launched was launched now
    caught_up: str | None = None  # the missed window a `--catch-up once` job was submitted for

    def line(self) -> str:
        what = "submitted" if self.created else "already submitted"
        if self.launched:
            what = "launched (it was registered, never launched)"
        extra = f"; caught up {self.caught_up}" if self.caught_up else ""
        return f"{self.job_id} {self.state} ({what} for window {self.window}{extra})"


def run(state: State, name: str, *, now: datetime | None = None) -> RunResult:
    """Submit the entry's job for the current window (once), as the crontab line asks."""
    now = now or datetime.now(UTC)
    book = CronBook(state)
    entry = book.load().get(name)
    if entry is None:
        raise CronError(f"no cron entry {name!r} (see delegate cron list)")
    window = window_of(entry["schedule"], now)
    caught_up = None
    if entry["catch_up"] == "once" or entry.get("last_window") is not None:
        caught_up = _catch_up(state, book, name, entry, window, now)
    job_id, created, launched = _submit_window(state, entry, window)
    following = next_run(entry["schedule"], window + timedelta(seconds=1))
    with book.lock:
        entries = book.load()
        current = entries.get(name)
        if current is not None:
            if current.get("last_window") is None or current["last_window"] < _stamp(window):
                current["last_window"] = _stamp(window)
                current["last_job_id"] = job_id
            # for the fast path of the next run in this window (delegate/entry/cron.py)
            current["window_hint"] = {
                "window": _stamp(window),
                "from_ts": window.timestamp(),
                "until_ts": following.timestamp(),
            }
            book.save(entries)
    job = state.registry.get(job_id)
    return RunResult(job_id, job.status.value, _stamp(window), created, launched, caught_up)


def _catch_up(
    state: State,
    book: CronBook,
    name: str,
    entry: dict[str, Any],
    window: datetime,
    now: datetime,
) -> str | None:
    """Windows missed since the last job (never before the entry was added): with `once`, one
    job for the latest of them; the others are recorded as skipped."""
    added = datetime.fromisoformat(entry["added_at"])
    last = entry.get("last_window")
    since = (
        max(added, datetime.strptime(last, "%Y%m%dT%H%MZ").replace(tzinfo=UTC)) if last else added
    )
    missed = windows_between(entry["schedule"], since, window)
    if not missed:
        return None
    caught = None
    if entry["catch_up"] == "once":
        latest = missed[-1]
        _submit_window(state, entry, latest)
        caught = _stamp(latest)
        missed = missed[:-1]
    with book.lock:
        entries = book.load()
        current = entries.get(name)
        if current is not None:
            skipped = set(current.get("skipped") or [])
            skipped.update(_stamp(w) for w in missed)
            current["skipped"] = sorted(skipped)
            book.save(entries)
    return caught


JOB_FIELDS = (
    "agent",
    "cmd",
    "prompt",
    "prompt_file",
    "workdir",
    "session",
    "wall_timeout",
    "idle_timeout",
    "bus",
    "wait",
    "idempotency_key",
    "max_running",
    "on_event",
    "host",
)


def _job_settings(path: Path) -> dict[str, Any]:
    try:
        return merge_job_file(path, **dict.fromkeys(JOB_FIELDS))
    except FileNotFoundError:
        raise UsageError(f"job file {path} does not exist") from None


def _submit_window(state: State, entry: dict[str, Any], window: datetime) -> tuple[str, bool, bool]:
    """Submit for `window` with the key NAME-<window>; launch a job of that key that was
    registered but never launched. Returns (job id, created, launched now)."""
    settings = {
        **_job_settings(Path(entry["job_file"])),
        "idempotency_key": f"{entry['name']}-{_stamp(window)}",
    }
    prompt = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=None)
    request = SubmitRequest.from_settings(settings, prompt)
    if settings.get("host"):  # an agent host's job: assigned over the broker
        result = submit_remote(state, request, settings["host"], wait=False)
        job = result.job
        saved = state.audit.job_dir(job.job_id) / ASSIGNMENT_FILE
        if not result.created and job.status is JobState.PENDING and not saved.exists():
            # the run that registered it died before even saving what to send: this run
            # knows, from the same job file
            save_assignment(state, job, prompt, request)
    else:
        result = submit(state, request, wait=False)
    job = result.job
    launched = False
    if not result.created and job.status is JobState.PENDING and not launcher_alive(job.launcher):
        launched = _launch_abandoned(state, job.job_id)
    return job.job_id, result.created, launched


def _launch_abandoned(state: State, job_id: str) -> bool:
    """A job of this window registered but never launched (its launcher died): launch it once,
    through the same policy the monitor uses (a claim only one process can make)."""
    reconciler = Reconciler(state, actor=f"cron:{os.getpid()}")
    done = reconciler.run_pass(
        only_job=job_id, keep=lambda a: isinstance(a, LaunchJob) and a.job_id == job_id
    )
    if not done:
        return False
    ensure_supervisor(state)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and state.registry.get(job_id).status.value == "pending":
        time.sleep(0.02)
    return True
