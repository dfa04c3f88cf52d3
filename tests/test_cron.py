"""`delegate cron`: crontab lines that are ours alone, one job per scheduled window whatever
runs at once, a window's never-launched job launched once, and catching up missed windows."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from delegate.core.errors import UsageError
from delegate.core.model import JobState
from delegate.services import cron
from delegate.services.state import State

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli
from .tmux_fixtures import socket_path

OTHERS = (
    "# my own crontab, keep it as it is\n"
    "MAILTO=me@example.com\n"
    "\n"
    "0  3 * * *   /usr/bin/backup   --all   # nightly backup\n"
    '*/5 * * * * echo "hi there"  >/dev/null 2>&1\n'
    "\n"
    "# trailing comment without newline at the end"
)


def job_file(tmp_path: Path, script: str = "echo ran >> ran.txt") -> Path:
    (tmp_path / "task.sh").write_text(script + "\n")
    path = tmp_path / "nightly.toml"
    path.write_text(
        textwrap.dedent("""
        agent = "shell"
        prompt_file = "task.sh"
        workdir = "."
        idle_timeout = 60
    """)
    )
    return path


def test_add_list_remove_touch_only_our_line(home: Path, tmp_path: Path):
    tab = tmp_path / "crontab"
    tab.write_text(OTHERS)
    added = run_cli(home, "cron", "add", "0 2 * * *", str(job_file(tmp_path)), "--file", str(tab))
    assert added.returncode == 0, added.stderr
    text = tab.read_text()
    assert text.startswith(OTHERS + "\n")  # untouched, then our line
    ours = text[len(OTHERS) + 1 :]
    assert ours.endswith("# delegate:nightly\n") and " cron run nightly " in ours
    assert f"DELEGATE_HOME={home}" in ours and "DELEGATE_TMUX_SOCKET" not in ours
    assert ("TMUX_TMPDIR=" in ours) == bool(os.environ.get("TMUX_TMPDIR"))
    socketed = cron.cron_line(
        State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_TMUX_SOCKET": "night"}),
        "n",
        "0 2 * * *",
    )
    assert f"DELEGATE_TMUX_SOCKET=/tmp/tmux-{os.getuid()}/night " in socketed
    rows = json_lines(run_cli(home, "cron", "list", "--json").stdout)
    assert [(r["name"], r["schedule"], r["description"]) for r in rows] == [
        ("nightly", "0 2 * * *", "At 02:00 AM")
    ]
    assert rows[0]["next_run"] and rows[0]["last_job_id"] is None
    again = run_cli(
        home, "cron", "add", "30 4 * * 1", str(tmp_path / "nightly.toml"), "--file", str(tab)
    )
    assert again.returncode == 0, again.stderr
    assert tab.read_text().count("# delegate:nightly") == 1  # replaced, not doubled
    removed = run_cli(home, "cron", "remove", "nightly")
    assert removed.returncode == 0, removed.stderr
    assert tab.read_bytes() == (OTHERS + "\n").encode()  # byte for byte, ours gone
    for args in (
        ["add", "61 * * * *", str(tmp_path / "nightly.toml")],
        ["add", "0 2 * * *", str(tmp_path / "missing.toml")],
        ["remove", "nope"],
        ["run", "nope"],
        ["add", "0 2 * * *", str(tmp_path / "nightly.toml"), "--user", "no-such-user-x"],
    ):
        assert_one_line_error(
            run_cli(home, "cron", *args, "--file", str(tab))
            if args[0] == "add"
            else run_cli(home, "cron", *args)
        )
    # cron skips a file in /etc/cron.d whose name has a dot: refused before anything is written
    dotted = Path("/etc/cron.d") / f"delegate-test.{uuid.uuid4().hex[:8]}"
    refused = run_cli(
        home, "cron", "add", "0 2 * * *", str(tmp_path / "nightly.toml"), "--file", str(dotted)
    )
    assert_one_line_error(refused)
    assert "cron ignores" in refused.stderr and not dotted.exists()
    assert tab.read_bytes() == (OTHERS + "\n").encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's crontab needs root")
def test_a_users_real_crontab_round_trip(home: Path, tmp_path: Path):
    user = f"dlgc{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
        check=True,
        capture_output=True,
    )
    try:
        subprocess.run(["crontab", "-u", user, "-"], input=OTHERS + "\n", text=True, check=True)
        added = run_cli(home, "cron", "add", "0 2 * * *", str(job_file(tmp_path)), "--user", user)
        assert added.returncode == 0, added.stderr
        listed = subprocess.run(["crontab", "-u", user, "-l"], capture_output=True, text=True)
        assert OTHERS in listed.stdout and "# delegate:nightly" in listed.stdout
        removed = run_cli(home, "cron", "remove", "nightly")
        assert removed.returncode == 0, removed.stderr
        after = subprocess.run(["crontab", "-u", user, "-l"], capture_output=True, text=True)
        assert "delegate" not in after.stdout and OTHERS in after.stdout
    finally:
        subprocess.run(["crontab", "-u", user, "-r"], capture_output=True)
        subprocess.run(["userdel", user], capture_output=True)


def test_ten_runs_at_once_make_one_job(home: Path, tmux_env, tmp_path: Path):
    tab = tmp_path / "crontab"
    assert (
        run_cli(
            home, "cron", "add", "* * * * *", str(job_file(tmp_path)), "--file", str(tab)
        ).returncode
        == 0
    )
    env = {  # what cron gives a job
        "HOME": tmux_env["HOME"],
        "PATH": "/usr/bin:/bin",
        "DELEGATE_HOME": str(home),
        "DELEGATE_TMUX_SOCKET": tmux_env["DELEGATE_TMUX_SOCKET"],
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "delegate", "cron", "run", "nightly"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(10)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert all(len(out.strip().splitlines()) == 1 for out in outputs), outputs
    state = State.open(env={"DELEGATE_HOME": str(home)})
    jobs = state.registry.list()
    windows = {j.idempotency_key for j in jobs}
    assert len(jobs) == len(windows) and len(jobs) in (1, 2)  # two only if a minute turned
    retry_until(
        lambda: all(state.registry.get(j.job_id).status is JobState.COMPLETED for j in jobs),
        timeout=60,
    )
    assert (tmp_path / "ran.txt").read_text().count("ran") == len(jobs)
    # one more run in the window: the fast path answers from the hint, key and record
    again = subprocess.run(
        [sys.executable, "-m", "delegate", "cron", "run", "nightly"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and again.stderr == "", again
    job_id, status, rest = again.stdout.split(" ", 2)
    if state.registry.get(job_id).idempotency_key not in windows:
        return  # the minute turned since the ten runs: a new window's own job, made once
    assert job_id in {j.job_id for j in jobs} and status == "completed"
    assert rest.startswith("(already submitted for window")


def test_a_windows_never_launched_job_is_launched_once(home: Path, tmux_env, tmp_path: Path):
    from delegate.core.caps import Caps, may_start

    path = job_file(tmp_path)
    state = State.open(env={"DELEGATE_HOME": str(home), **tmux_env})
    now = datetime(2026, 11, 22, 2, 0, 30, tzinfo=UTC)
    cron.add(
        state,
        "0 2 * * *",
        path,
        crontab=cron.Crontab(file=tmp_path / "tab"),
        now=datetime(2026, 11, 21, tzinfo=UTC),
    )
    # a run that crashed after registering the window's job and before launching it
    key = "nightly-20261122T0200Z"
    crashed, _ = state.registry.register(agent="shell", idempotency_key=key)
    state.registry.update(
        crashed.job_id,
        session=f"dlg-{crashed.job_id}",
        tmux_socket=socket_path(tmux_env["DELEGATE_TMUX_SOCKET"]),
        workdir=str(tmp_path),
    )
    (tmp_path / "launch.sh").write_text("echo launched >> launched.txt\n")
    state.registry.admit(
        crashed.job_id,
        {
            "argv": ["bash", str(tmp_path / "launch.sh")],
            "prompt": "file",
            "prompt_path": str(tmp_path / "launch.sh"),
        },
        lambda j, others: may_start(j, others, Caps()),
        {"pid": 2**22 + 7, "start": 1},
    )
    first = cron.run(state, "nightly", now=now)
    assert first.job_id == crashed.job_id and first.launched and not first.created
    retry_until(lambda: state.registry.get(crashed.job_id).status is JobState.COMPLETED)
    second = cron.run(state, "nightly", now=now)
    assert second.job_id == crashed.job_id and not second.launched
    assert (tmp_path / "launched.txt").read_text() == "launched\n"  # once
    assert len(state.registry.list()) == 1


def test_catch_up_once_submits_the_latest_missed_window(home: Path, tmux_env, tmp_path: Path):
    state = State.open(env={"DELEGATE_HOME": str(home), **tmux_env})
    path = job_file(tmp_path)
    cron.add(
        state,
        "0 * * * *",
        path,
        name="hourly",
        catch_up="once",
        crontab=cron.Crontab(file=tmp_path / "tab"),
        now=datetime(2026, 11, 22, 0, 30, tzinfo=UTC),
    )
    first = cron.run(state, "hourly", now=datetime(2026, 11, 22, 1, 0, 5, tzinfo=UTC))
    assert first.window == "20261122T0100Z" and first.caught_up is None
    # the machine was off for the 02:00, 03:00 and 04:00 windows; it runs again at 05:00
    later = cron.run(state, "hourly", now=datetime(2026, 11, 22, 5, 0, 5, tzinfo=UTC))
    assert later.window == "20261122T0500Z" and later.caught_up == "20261122T0400Z"
    keys = sorted(j.idempotency_key for j in state.registry.list())
    assert keys == ["hourly-20261122T0100Z", "hourly-20261122T0400Z", "hourly-20261122T0500Z"]
    entry = cron.CronBook(state).load()["hourly"]
    assert entry["skipped"] == ["20261122T0200Z", "20261122T0300Z"]
    listed = cron.listing(state, now=datetime(2026, 11, 22, 5, 10, tzinfo=UTC))
    assert listed[0]["skipped"] == 2 and listed[0]["last_job_id"] == later.job_id
    # windows before the entry was added are never missed ones
    fresh = cron.windows_between(
        "0 * * * *",
        datetime(2026, 11, 22, 0, 30, tzinfo=UTC),
        datetime(2026, 11, 22, 1, 0, tzinfo=UTC),
    )
    assert fresh == []


# The real daemon runs in a mount namespace of its own where /etc/cron.d, /etc/crontab, the
# users' spool and /run are the test's folders: it sees the one crontab file this test wrote and
# nothing of the machine's, and it cannot collide with a cron daemon the machine already runs.
PRIVATE_CRON = """
mount --bind "$1/cron.d" /etc/cron.d
mount --bind "$1/crontab" /etc/crontab
mount --bind "$1/spool" /var/spool/cron/crontabs
mount --bind "$1/run" /run
exec /usr/sbin/cron -f
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/usr/sbin/cron").exists(),
    reason="the cron daemon and a private mount namespace need root and Debian's cron",
)
def test_the_cron_daemon_fires_an_entry_and_its_job_completes(home: Path, tmux_env, tmp_path: Path):
    private = tmp_path / "etc"
    for folder in ("cron.d", "spool", "run"):
        (private / folder).mkdir(parents=True)
    (private / "crontab").write_text("")
    # a file in /etc/cron.d must be root's, not writable by others, and its name has no dot
    tab = private / "cron.d" / "delegate-e2e"
    others = (
        "# a system crontab file: schedule, user, command\n"
        'MAILTO=""\n'
        "\n"
        "17 3 1 1 *  root  /bin/true   # never in this test\n"
    )
    tab.write_text(others)
    tab.chmod(0o644)
    job = job_file(tmp_path, "echo ran >> ran.txt")
    env = {**tmux_env, "DELEGATE_HOME": str(home)}
    added = run_cli(
        home, "cron", "add", "* * * * *", str(job), "--file", str(tab), "--user", "root", env=env
    )
    assert added.returncode == 0, added.stderr
    [ours] = tab.read_text()[len(others) :].splitlines()
    assert ours.split()[:6] == ["*", "*", "*", "*", "*", "root"]
    daemon = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-ec", PRIVATE_CRON, "-", private],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        state = State.open(env={"DELEGATE_HOME": str(home)})
        # cron fires at the start of the next minute: at most a minute and a little from now
        jobs = retry_until(
            lambda: daemon.poll() is None and state.registry.list(), timeout=130, interval=0.5
        )
        [fired] = jobs
        assert fired.idempotency_key and fired.idempotency_key.startswith("nightly-")
        retry_until(
            lambda: state.registry.get(fired.job_id).status is JobState.COMPLETED, timeout=60
        )
        assert (tmp_path / "ran.txt").read_text() == "ran\n"
        listed = json_lines(run_cli(home, "cron", "list", "--json", env=env).stdout)
        assert [(r["last_job_id"], r["last_state"]) for r in listed] == [
            (fired.job_id, "completed")
        ]
    finally:
        daemon.terminate()
        out = daemon.communicate(timeout=30)[0]
    assert daemon.returncode in (0, -15), out  # it ran until this test stopped it
    removed = run_cli(home, "cron", "remove", "nightly", env=env)
    assert removed.returncode == 0, removed.stderr
    assert tab.read_bytes() == others.encode()  # the other lines, byte for byte


BAD_SCHEDULES = {
    "minute-61": ("61 2 * * *", "minute field '61' is out of range (0-59)"),
    "four-fields": (
        "0 2 * *",
        "expected 5 fields (minute hour day-of-month month day-of-week), got 4",
    ),
    "six-fields": (
        "0 2 * * * *",
        "expected 5 fields (minute hour day-of-month month day-of-week), got 6",
    ),
    "hour-24": ("0 24 * * *", "hour field '24' is out of range (0-23)"),
    "day-0": ("0 2 0 * *", "day-of-month field '0' is out of range (1-31)"),
    "day-32": ("0 2 32 * *", "day-of-month field '32' is out of range (1-31)"),
    "month-13": ("0 2 * 13 *", "month field '13' is out of range (1-12)"),
    "month-name": (
        "0 2 * foo *",
        "month field 'foo': 'foo' is not a number (1-12) or a name (jan-dec)",
    ),
    "weekday-8": ("0 2 * * 8", "day-of-week field '8' is out of range (0-7)"),
    "in-a-list": ("1,61 * * * *", "minute field '1,61': 61 is out of range (0-59)"),
    "in-a-range": ("0 2-25 * * *", "hour field '2-25': 25 is out of range (0-23)"),
    "backwards-range": (
        "5-1 * * * *",
        "minute field '5-1': the range '5-1' goes backwards (cron needs low-high)",
    ),
    "step-0": ("*/0 * * * *", "minute field '*/0': step '0' must be a number from 1 to 60"),
    "step-too-big": ("0 */25 * * *", "hour field '*/25': step '25' must be a number from 1 to 24"),
    "double-step": (
        "*/5/2 * * * *",
        "minute field '*/5/2': step '5/2' must be a number from 1 to 60",
    ),
    "step-of-a-number": (
        "5/2 * * * *",
        "minute field '5/2': a step needs * or a range before it (*/2, 0-30/2)",
    ),
    "empty-item": ("1,,2 * * * *", "minute field '1,,2': an empty item in the list"),
    "letters": ("x 2 * * *", "minute field 'x': 'x' is not a number (0-59)"),
    "croniter-only-L": ("0 2 L * *", "day-of-month field 'L': 'L' is not a number (1-31)"),
    "never-fires": ("0 2 30 2 *", "it never fires (no such day in those months)"),
}


@pytest.mark.parametrize("schedule,problem", list(BAD_SCHEDULES.values()), ids=list(BAD_SCHEDULES))
def test_a_bad_schedule_names_the_field_and_its_range(schedule: str, problem: str):
    with pytest.raises(UsageError) as caught:
        cron._validate_schedule(schedule)
    assert str(caught.value) == f"cron schedule {schedule!r}: {problem}"


@pytest.mark.parametrize(
    "schedule,normal",
    [
        ("0 2 * * *", "0 2 * * *"),
        ("  */15   9-17 * * 1-5 ", "*/15 9-17 * * 1-5"),
        ("0 0 1,15 jan-jun sun", "0 0 1,15 jan-jun sun"),
        ("0-30/10 0 * * 7", "0-30/10 0 * * 7"),
        ("59 23 31 12 *", "59 23 31 12 *"),
    ],
    ids=["nightly", "spaced", "names", "range-step", "highs"],
)
def test_good_schedules_pass_normalised(schedule: str, normal: str):
    assert cron._validate_schedule(schedule) == normal


def test_cron_add_with_a_bad_schedule_says_so_in_one_line(home: Path, tmp_path: Path):
    tab = tmp_path / "crontab"
    result = run_cli(home, "cron", "add", "61 2 * * *", str(job_file(tmp_path)), "--file", str(tab))
    assert_one_line_error(result)
    assert result.returncode == 64
    assert result.stderr == (
        "delegate: cron schedule '61 2 * * *': minute field '61' is out of range (0-59)\n"
    )
    assert not tab.exists()


def test_the_cron_line_carries_where_state_and_tmux_live(tmp_path: Path):
    """DELEGATE_HOME always; DELEGATE_CONFIG, DELEGATE_TMUX_SOCKET and TMUX_TMPDIR when set, so
    cron's jobs land on the tmux server the person looks at. Quoted for cron's shell: the line's
    command, as cron hands it to /bin/sh (`\\%` -> `%`), sets each variable to the exact value."""
    home = tmp_path / "state dir's %d"
    config = tmp_path / "conf $HOME" / "delegate.toml"
    tmpdir = tmp_path / "tmux;dir"
    env = {
        "DELEGATE_HOME": str(home),
        "DELEGATE_CONFIG": str(config),
        "DELEGATE_TMUX_SOCKET": "night",
        "TMUX_TMPDIR": str(tmpdir),
    }
    line = cron.cron_line(State.open(env=env), "nightly", "0 2 * * *")
    assert line.startswith("0 2 * * * DELEGATE_HOME=") and line.endswith(" # delegate:nightly")
    command = line.split(" ", 5)[5]
    assert re.search(r"(?<!\\)%", command) is None  # no bare % for cron to cut the line at
    settings = command.split(f" {cron.cron_quote(str(Path(sys.executable).parent / 'delegate'))}")[
        0
    ]
    shown = subprocess.run(
        ["/bin/sh", "-c", settings.replace("\\%", "%") + " env -0"],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout.decode()
    got = dict(item.split("=", 1) for item in shown.split("\0") if "=" in item)
    assert got["DELEGATE_HOME"] == str(home)
    assert got["DELEGATE_CONFIG"] == str(config)
    assert got["DELEGATE_TMUX_SOCKET"] == f"{tmpdir}/tmux-{os.getuid()}/night"
    assert got["TMUX_TMPDIR"] == str(tmpdir)
    bare = cron.cron_line(State.open(env={"DELEGATE_HOME": str(home)}), "n", "0 2 * * *")
    assert "DELEGATE_HOME=" in bare
    assert all(f"{name}=" not in bare for name in cron.CRON_ENV[1:])
    with pytest.raises(UsageError):
        cron.cron_quote("two\nlines")
