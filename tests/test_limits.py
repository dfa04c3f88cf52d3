"""Memory, CPU and process limits on a job's whole process tree (issue 32, item 3), with the
machine's real cgroups: the kernel stops a job at its memory limit and we end it
`memory_exceeded` with its peak; a fork bomb is held at its pids limit and cleared away; a busy
loop gets its share of a core; a machine where no cgroup can be written refuses the job."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.adapters.cgroups import support
from delegate.core.errors import UsageError
from delegate.core.limits import MEMORY_EXCEEDED, Limits, human_bytes, limits_from, parse_size
from delegate.core.model import JobState

from .helpers import refused_submit, retry_until, run_cli
from .test_monitor import open_state

CGROUPS = Path("/sys/fs/cgroup")
needs_cgroups = pytest.mark.skipif(
    support(CGROUPS).missing(Limits(1 << 30, 1.0, 64)) != [],
    reason="this machine lets no one write its memory, cpu and pids cgroups",
)


@pytest.fixture(autouse=True)
def _groups_cleared(home: Path):
    """A test stopped midway (its wrappers SIGKILLed by tmux_env) leaves its jobs' cgroups:
    emptied and removed here, only those of this test's jobs."""
    yield
    from delegate.adapters.cgroups import JobGroup

    for record in (home / "jobs").glob("*.json") if (home / "jobs").is_dir() else ():
        folders = {
            c: CGROUPS / c / "delegate" / record.stem
            for c in ("memory", "cpu", "cpuacct", "pids")
            if (CGROUPS / c / "delegate" / record.stem).is_dir()
        }
        if folders:
            group = JobGroup("v1", folders)
            group.kill_all()
            group.remove()


# --- the words -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [("200M", 200 << 20), ("4G", 4 << 30), ("1.5G", int(1.5 * (1 << 30))), ("512MiB", 512 << 20)],
)
def test_sizes_are_read_in_units_of_1024(text: str, size: int):
    assert parse_size(text) == size


@given(st.one_of(st.text(max_size=12), st.floats(allow_nan=True), st.integers()))
def test_no_word_gives_a_limit_below_the_floor_or_not_a_number(value):
    try:
        limits = limits_from(value, None, None, "--")
    except UsageError:
        return
    assert limits.memory_bytes is not None and limits.memory_bytes >= 4 << 20


@given(
    st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(max_size=6))
)
def test_cpus_and_pids_are_checked(value):
    for memory, cpus, pids in ((None, value, None), (None, None, value)):
        try:
            limits = limits_from(memory, cpus, pids, "--")
        except UsageError:
            continue
        if limits.cpus is not None:
            assert 0.01 <= limits.cpus <= 4096
        if limits.pids is not None:
            assert limits.pids >= 8 and isinstance(limits.pids, int)


def test_a_group_s_limits_come_over_its_profile_s_over_the_defaults(tmp_path: Path):
    from delegate.config.limits import limits_for

    config = {
        "limits": {
            "max_memory": "4G",
            "max_pids": 512,
            "profiles": {"codex": {"max_cpus": 1.5, "max_memory": "3G"}},
            "groups": {"nightly": {"max_memory": "2G"}},
        }
    }
    source = tmp_path / "delegate.toml"
    assert limits_for(config, source, "shell") == Limits(4 << 30, None, 512)
    assert limits_for(config, source, "codex") == Limits(3 << 30, 1.5, 512)
    assert limits_for(config, source, "codex", "nightly") == Limits(2 << 30, 1.5, 512)
    assert limits_for(config, source, "shell", "other") == Limits(4 << 30, None, 512)
    # flags over all of them (what submit does with --max-memory)
    assert Limits(1 << 30).over(limits_for(config, source, "codex", "nightly")) == Limits(
        1 << 30, 1.5, 512
    )


@pytest.mark.parametrize(
    "table",
    [
        {"groups": {"nightly": {"max_memory": "lots"}}},
        {"groups": {"nightly": {"groups": {}}}},  # no nesting below a group
        {"groups": ["nightly"]},
    ],
)
def test_a_bad_group_table_is_refused_naming_it(tmp_path: Path, table: dict):
    from delegate.config.limits import limits_for
    from delegate.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\[limits\]\.groups"):
        limits_for({"limits": table}, tmp_path / "delegate.toml", "shell", "nightly")


def test_each_layout_gets_its_own_files_for_the_same_limits(tmp_path: Path):
    """The limits as each layout's kernel files say them (written into plain folders here:
    the v2 names and values are checked even on a machine that only has v1)."""
    from delegate.adapters.cgroups import JobGroup

    limits = Limits(200 << 20, 0.5, 64)
    v2 = tmp_path / "v2"
    v2.mkdir()
    JobGroup("v2", {"v2": v2})._limited(limits)
    assert {f.name: f.read_text() for f in v2.iterdir()} == {
        "memory.max": f"{200 << 20}\n",
        "memory.swap.max": "0\n",
        "cpu.max": "50000 100000\n",
        "pids.max": "64\n",
    }
    v1 = {c: tmp_path / "v1" / c for c in ("memory", "cpu", "pids")}
    for folder in v1.values():
        folder.mkdir(parents=True)
    JobGroup("v1", v1)._limited(limits)
    assert {f"{c}/{f.name}": f.read_text() for c, d in v1.items() for f in d.iterdir()} == {
        "memory/memory.limit_in_bytes": f"{200 << 20}\n",
        "memory/memory.memsw.limit_in_bytes": f"{200 << 20}\n",
        "cpu/cpu.cfs_period_us": "100000\n",
        "cpu/cpu.cfs_quota_us": "50000\n",
        "pids/pids.max": "64\n",
    }
    (v2 / "pids.max").unlink()
    (v2 / "pids.max").mkdir()  # a file the kernel refuses: the group is removed, and it says
    with pytest.raises(OSError):
        JobGroup("v2", {"v2": v2})._limited(limits)


# --- on the machine's cgroups ----------------------------------------------------------------


def _submit(home: Path, env: dict[str, str], workdir: Path, script: str, *flags: str) -> str:
    made = run_cli(
        home, "submit", "-a", "shell", "-p", script, "--workdir", str(workdir), "--no-wait",
        "--json", *flags, env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return str(json.loads(made.stdout)["job_id"])


def _ended(home: Path, job_id: str, timeout: float = 60):
    state = open_state(home)
    return retry_until(
        lambda: (job := state.registry.get(job_id)).status.terminal and job, timeout=timeout
    )


def _no_group_left(job_id: str) -> bool:
    return not any((CGROUPS / c / "delegate" / job_id).exists() for c in ("memory", "cpu", "pids"))


HOG = (  # takes 8 MiB more every 10 ms until something stops it
    "python3 -c 'import time\nb = []\nwhile True:\n"
    "    b.append(bytearray(8 << 20)); time.sleep(0.01)'"
)


@needs_cgroups
def test_a_job_past_its_memory_limit_ends_memory_exceeded_with_its_peak(
    home: Path, tmux_env, tmp_path: Path
):
    job_id = _submit(home, tmux_env, tmp_path, HOG, "--max-memory", "200M")
    job = _ended(home, job_id)
    assert job.status is JobState.ERROR
    assert job.error.startswith(f"{MEMORY_EXCEEDED}: "), job.error
    assert human_bytes(200 << 20) in job.error
    assert job.peak_memory_bytes is not None and 150 << 20 <= job.peak_memory_bytes <= 210 << 20
    # (the record moves first, its status_changed line a moment after: waited for)
    started = retry_until(
        lambda: (
            (lines := open_state(home).audit.read_events(job_id, "status_changed"))
            and any(e["status"] == "error" for e in lines)
            and lines
        ),
        timeout=10,
    )
    running = next(e for e in started if e["status"] == "running")
    ended = next(e for e in started if e["status"] == "error")
    from delegate.core.timefmt import parse_timestamp

    took = parse_timestamp(ended["ts"]) - parse_timestamp(running["ts"])
    assert took.total_seconds() < 10  # 200 MB at 800 MB/s, then within 2 s of the kill
    assert retry_until(lambda: _no_group_left(job_id), timeout=10)
    status = json.loads((home / "logs" / job_id / "status.json").read_text())
    assert status["peak_memory_bytes"] == job.peak_memory_bytes and status["status"] == "error"
    shown = run_cli(home, "show", job_id, env=tmux_env)
    assert "peak_memory_bytes" in shown.stdout and "memory 200 MiB" in shown.stdout


@needs_cgroups
def test_a_job_of_a_group_gets_the_group_s_memory_limit(home: Path, tmux_env, tmp_path: Path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text('[limits.groups.nightly]\nmax_memory = "200M"\n')
    added = run_cli(home, "group", "add", "nightly", env=tmux_env)
    assert added.returncode == 0, added.stderr
    job_id = _submit(home, tmux_env, tmp_path, HOG, "--group", "nightly")
    job = _ended(home, job_id)
    assert job.launch["limits"]["memory_bytes"] == 200 << 20, job.launch
    assert job.status is JobState.ERROR and job.error.startswith(f"{MEMORY_EXCEEDED}: ")
    assert job.peak_memory_bytes is not None and job.peak_memory_bytes <= 210 << 20
    # the same job outside the group has no limit from it
    free = _submit(home, tmux_env, tmp_path, "true")
    assert "limits" not in _ended(home, free).launch


@needs_cgroups
def test_a_fork_bomb_is_held_at_its_pids_limit_and_cleared_away(
    home: Path, tmux_env, tmp_path: Path
):
    marker = f"bomb-{os.getpid()}-{time.monotonic_ns()}"
    # each `b` leaves a looping shell named by the marker and starts the next `b`, until the
    # kernel refuses a fork; the job's own shell then lives on a little (if it can fork)
    script = f"b() {{ sh -c 'while :; do sleep 1; done' {marker} & b & }}; b 2>/dev/null; sleep 3"
    job_id = _submit(home, tmux_env, tmp_path, script, "--max-pids", "64", "--wall-timeout", "60")
    job = _ended(home, job_id)
    assert job.status.terminal
    hits = open_state(home).audit.read_events(job_id, "pids_limit_hit")
    assert hits and hits[0]["limit"] == 64 and hits[0]["refused"] >= 1
    assert retry_until(lambda: _no_group_left(job_id), timeout=10)

    def left() -> list[str]:
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    if marker in Path(f"/proc/{entry.name}/cmdline").read_text():
                        found.append(entry.name)
                except OSError:
                    continue
        return found

    assert retry_until(lambda: not left(), timeout=10)


@needs_cgroups
def test_the_groups_a_killed_wrapper_left_are_cleared_with_what_runs_in_them(
    home: Path, tmux_env, tmp_path: Path
):
    """A wrapper SIGKILLed leaves its agent running in the job's cgroups; once the job has
    ended the supervisor kills what is left there and removes the groups, on record."""
    import signal

    from .test_monitor import pane_pid, wait_running

    mark = f"{time.monotonic_ns() % 10**6 + 10**6}.5"  # a sleep no other test runs
    # what the agent started in a session of its own, its job's marks dropped from its
    # environment (an agent may): neither the pane's hang-up nor a look for the job's
    # processes by their environment finds it; its cgroup holds it all the same
    script = f"env -u DELEGATE_JOB_ID setsid sleep {mark} & wait"
    job_id = _submit(home, tmux_env, tmp_path, script, "--max-pids", "64")
    wait_running(home, job_id)

    def agents() -> list[int]:
        return [
            int(e.name)
            for e in os.scandir("/proc")
            if e.name.isdigit() and _cmdline(e.name) == f"sleep {mark}"
        ]

    assert retry_until(agents, timeout=10)
    os.kill(pane_pid(home, job_id), signal.SIGKILL)  # the wrapper, at once
    job = _ended(home, job_id)
    assert job.status.terminal and agents(), "the agent outlives its wrapper in its groups"
    assert retry_until(lambda: not agents() and _no_group_left(job_id), timeout=40)
    cleared = open_state(home).audit.read_events(job_id, "cgroup_cleared")
    assert len(cleared) == 1 and cleared[0]["killed"] >= 1


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@needs_cgroups
def test_half_a_core_is_half_a_core(home: Path, tmux_env, tmp_path: Path):
    script = "end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do :; done"
    job_id = _submit(home, tmux_env, tmp_path, script, "--max-cpus", "0.5")
    job = _ended(home, job_id)
    assert job.status is JobState.COMPLETED, job.error
    assert job.cpu_s is not None
    # about 1.5 s of the 3: never more than half a core (the kernel's quota); a busy machine
    # may give it less, so the floor only says it ran
    assert 0.6 <= job.cpu_s <= 1.65, job.cpu_s


def test_limits_this_machine_cannot_apply_are_refused_and_nothing_is_recorded(
    home: Path, tmux_env, tmp_path: Path
):
    empty = tmp_path / "no-cgroups"
    empty.mkdir()
    env = {**tmux_env, "DELEGATE_CGROUP_ROOT": str(empty)}
    refused = refused_submit(home, env, "--max-memory", "1G")
    assert "--max-memory" in refused.stderr and "cgroup" in refused.stderr


def test_doctor_says_what_this_machine_can_limit(home: Path, tmux_env, tmp_path: Path):
    said = json.loads(run_cli(home, "doctor", "--json", env=tmux_env).stdout)["checks"]
    found = support(CGROUPS)
    line = next(c for c in said if c["name"] == "limits")
    if found.layout is None:
        assert line["status"] == "warn" and "refused" in line["detail"]
    else:
        assert line["detail"].startswith(f"cgroup {found.layout} at {CGROUPS}")
        assert ("--max-memory" in line["detail"]) is ("memory" in found.controllers)
    empty = tmp_path / "none"
    empty.mkdir()
    env = {**tmux_env, "DELEGATE_CGROUP_ROOT": str(empty)}
    said = json.loads(run_cli(home, "doctor", "--json", env=env).stdout)["checks"]
    line = next(c for c in said if c["name"] == "limits")
    assert (
        line["status"] == "warn"
        and f"no writable cgroup controller under {empty}" in line["detail"]
    )
