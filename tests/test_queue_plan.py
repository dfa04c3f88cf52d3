"""A queue people can plan with (issue 20): dependencies between jobs (`submit --after`) and
queue groups with caps of their own and a pause, all on a real tmux server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from delegate.core.caps import Caps, Gate, GroupRule, broken_dependency, rule_holds, waiting_for
from delegate.core.model import Job, JobState

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli
from .test_monitor import open_state, submit_no_wait

# --- the rules alone -------------------------------------------------------------------------


def _job(job_id: str, status: JobState = JobState.QUEUED, **fields: object) -> Job:
    stamp = "2026-11-25T10:00:00.000000Z"
    return Job(job_id, status, stamp, stamp, "t", agent="shell", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "state", "holds"),
    [
        ("succeeded", JobState.RUNNING, None),
        ("succeeded", JobState.COMPLETED, True),
        ("succeeded", JobState.ERROR, False),
        ("succeeded", JobState.CANCELLED, False),
        ("finished", JobState.ERROR, True),
        ("finished", JobState.CANCELLED, True),
        ("finished", JobState.QUEUED, None),
        ("failed", JobState.ERROR, True),
        ("failed", JobState.COMPLETED, False),
        ("succeeded", None, False),  # a dependency not found never succeeds
    ],
)
def test_after_rules(rule: str, state: JobState | None, holds: bool | None):
    assert rule_holds(rule, state) is holds


def test_waiting_for_names_the_first_reason_and_honours_every_cap_together():
    a, b = "aaaaaaaa", "bbbbbbbb"
    deps = Gate({a: JobState.RUNNING, b: JobState.COMPLETED})
    waiting = _job("cccccccc", after=[a, b])
    assert waiting_for(waiting, [], Caps(), gate=deps) == f"waits for {a} (succeeded)"
    assert broken_dependency([a, b], None, Gate({a: JobState.ERROR, b: JobState.RUNNING})) == a
    running = [_job(f"{i:08x}", JobState.RUNNING, group="g") for i in range(2)]
    groups = Gate(groups={"g": GroupRule(max_running=2)})
    member = _job("dddddddd", group="g")
    assert (
        waiting_for(member, running, Caps(), gate=groups) == "group g runs 2 of its max_running 2"
    )
    assert waiting_for(member, running[:1], Caps(), gate=groups) is None
    assert waiting_for(member, running[:1], Caps(total=1), gate=groups) == "max_running 1 reached"
    paused = Gate(groups={"g": GroupRule(max_running=5, paused=True)})
    assert waiting_for(member, [], Caps(), gate=paused) == "group g is paused"
    outsider = _job("eeeeeeee", group="other")
    assert waiting_for(outsider, running, Caps(), gate=groups) is None  # no rule for `other`


# --- dependencies on real tmux ---------------------------------------------------------------


def _record(home: Path, job_id: str) -> Job:
    return open_state(home).registry.get(job_id)


def _ended(home: Path, *ids: str, timeout: float = 60) -> list[Job]:
    state = open_state(home)
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=timeout)
    return [state.registry.get(j) for j in ids]


def test_a_diamond_runs_in_order(home: Path, tmux_env, tmp_path: Path):
    gate = tmp_path / "go"
    a = submit_no_wait(
        home, tmux_env, tmp_path, f"while [ ! -e {gate} ]; do sleep 0.05; done; echo a >> order"
    )
    b = submit_no_wait(home, tmux_env, tmp_path, "echo b >> order", "--after", a)
    c = submit_no_wait(home, tmux_env, tmp_path, "echo c >> order", "--after", a)
    d = submit_no_wait(home, tmux_env, tmp_path, "echo d >> order", "--after", f"{b},{c}")
    queued = {
        r["job_id"]: r for r in json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)
    }
    assert queued[d]["waiting_for"].startswith("waits for ")  # names what it waits for
    assert b in queued[d]["waiting_for"] and c in queued[d]["waiting_for"]
    tree = run_cli(home, "ps", "--tree", env=tmux_env)
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.count(d) == 2  # drawn under each of the two jobs it waits for
    gate.touch()
    jobs = _ended(home, a, b, c, d)
    assert [j.status for j in jobs] == [JobState.COMPLETED] * 4
    order = (tmp_path / "order").read_text().split()
    assert order[0] == "a" and order[-1] == "d" and sorted(order[1:3]) == ["b", "c"]
    ja, jb, jc, jd = jobs
    assert ja.updated_at <= min(jb.started_at or "", jc.started_at or "")
    assert max(jb.updated_at, jc.updated_at) <= (jd.started_at or "")


def test_a_failed_dependency_ends_its_dependents_at_once(home: Path, tmux_env, tmp_path: Path):
    gate = tmp_path / "go"
    a = submit_no_wait(
        home, tmux_env, tmp_path, f"while [ ! -e {gate} ]; do sleep 0.05; done; exit 3"
    )
    b = submit_no_wait(home, tmux_env, tmp_path, "true", "--after", a)
    c = submit_no_wait(home, tmux_env, tmp_path, "true", "--after", a)
    d = submit_no_wait(home, tmux_env, tmp_path, "true", "--after", f"{b},{c}")
    anyway = submit_no_wait(
        home, tmux_env, tmp_path, "echo ran > anyway", "--after", a, "--after-rule", "finished"
    )
    cleanup = submit_no_wait(
        home, tmux_env, tmp_path, "echo ran > cleanup", "--after", a, "--after-rule", "failed"
    )
    gate.touch()
    ja, jb, jc, jd = _ended(home, a, b, c, d)
    assert ja.status is JobState.ERROR
    assert jb.error == jc.error == f"dependency_failed: {a} error"
    assert jd.status is JobState.ERROR and jd.error is not None
    assert jd.error.startswith("dependency_failed: ") and jd.error.split()[1] in (b, c)
    # "at once": ended by whoever ended the dependency, within moments, not a monitor pass
    assert max(jb.updated_at, jc.updated_at, jd.updated_at) <= _plus(ja.updated_at, 2.0)
    audit = open_state(home).audit.read_events(d, kind="dependency_failed")
    assert audit and audit[0]["dependency"] in (b, c)
    done = _ended(home, anyway, cleanup)
    assert [j.status for j in done] == [JobState.COMPLETED] * 2
    assert (tmp_path / "anyway").read_text().strip() == "ran"
    assert (tmp_path / "cleanup").read_text().strip() == "ran"


def _plus(stamp: str, seconds: float) -> str:
    from datetime import timedelta

    from delegate.core.timefmt import parse_timestamp, record_timestamp

    return record_timestamp(parse_timestamp(stamp) + timedelta(seconds=seconds))


def test_jobs_that_could_never_start_are_refused(home: Path, tmux_env, tmp_path: Path):
    done = submit_no_wait(home, tmux_env, tmp_path, "true")
    _ended(home, done)
    before = sorted(p.name for p in (home / "jobs").glob("*.json"))
    for args, words in (
        (("--after", "ffffffff"), "no such job"),
        (("--after", "not-an-id"), "invalid job id"),
        (("--after", done, "--after-rule", "failed"), "could never start"),
        (("--after", done, "--after-rule", "sometimes"), "unknown --after-rule"),
        (("--group", "nosuch"), "no group 'nosuch'"),
    ):
        result = run_cli(
            home, "submit", "--agent", "shell", "--prompt", "true", "--no-wait", *args, env=tmux_env
        )
        assert result.returncode == 64, (args, result.stderr)
        assert_one_line_error(result)
        assert words in result.stderr, (args, result.stderr)
    assert sorted(p.name for p in (home / "jobs").glob("*.json")) == before  # nothing recorded


def test_a_job_file_may_name_its_dependencies(home: Path, tmux_env, tmp_path: Path):
    """`after` in a job file, as a list; a job named twice is waited for once. (A job can only
    wait for jobs that exist already, so a submit cannot close a cycle.)"""
    result = run_cli(home, "register", env=tmux_env)
    job_id = result.stdout.strip()
    spec = tmp_path / "job.toml"
    spec.write_text(f'cmd = "true"\nprompt = "x"\nafter = ["{job_id}", "{job_id}"]\n')
    ok = run_cli(home, "submit", "--from-file", str(spec), "--no-wait", "--json", env=tmux_env)
    assert ok.returncode == 0, ok.stderr
    assert _record(home, json.loads(ok.stdout)["job_id"]).after == [job_id]  # no repeats
    run_cli(home, "cancel", job_id, env=tmux_env)


# --- groups ----------------------------------------------------------------------------------


def _running_now(home: Path) -> list[Job]:
    return [j for j in open_state(home).registry.open_jobs() if j.status is JobState.RUNNING]


def test_group_caps_and_the_global_cap_hold_together(home: Path, tmux_env, tmp_path: Path):
    (home).mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text("max_running = 2\n")
    for name, cap in (("one", "1"), ("two", "2")):
        added = run_cli(home, "group", "add", name, "--max-running", cap, env=tmux_env)
        assert added.returncode == 0, added.stderr
    ids = []
    for i in range(6):
        group = "one" if i % 2 == 0 else "two"
        ids.append(submit_no_wait(home, tmux_env, tmp_path, "sleep 0.6", "--group", group))
    seen: list[tuple[int, int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            running = _running_now(home)
            ones = sum(1 for j in running if j.group == "one")
            seen.append((len(running), ones, len(running) - ones))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        jobs = _ended(home, *ids, timeout=90)
    finally:
        stop.set()
        sampler.join()
    assert [j.status for j in jobs] == [JobState.COMPLETED] * 6
    assert seen and max(total for total, _, _ in seen) <= 2
    assert max(ones for _, ones, _ in seen) <= 1
    assert max(twos for _, _, twos in seen) <= 2
    listed = json_lines(run_cli(home, "group", "list", "--json", env=tmux_env).stdout)
    assert [(g["group"], g["max_running"], g["paused"]) for g in listed] == [
        ("one", 1, False),
        ("two", 2, False),
    ]
    mine = json_lines(run_cli(home, "ps", "--group", "one", "--json", env=tmux_env).stdout)
    assert {r["job_id"] for r in mine} <= set(ids[0::2]) and all(r["group"] == "one" for r in mine)


def test_a_paused_group_starts_nothing_until_resumed(home: Path, tmux_env, tmp_path: Path):
    assert run_cli(home, "group", "add", "night", env=tmux_env).returncode == 0
    paused = run_cli(home, "group", "pause", "night", env=tmux_env)
    assert paused.returncode == 0 and "paused" in paused.stdout
    job = submit_no_wait(home, tmux_env, tmp_path, "true", "--group", "night")
    time.sleep(2.5)  # two of its supervisor's queue checks: it must not start meanwhile
    assert _record(home, job).status is JobState.QUEUED
    row = json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)
    assert [r["waiting_for"] for r in row if r["job_id"] == job] == ["group night is paused"]
    assert run_cli(home, "group", "resume", "night", env=tmux_env).returncode == 0
    [ended] = _ended(home, job)
    assert ended.status is JobState.COMPLETED
    bad = run_cli(home, "group", "add", "night", env=tmux_env)
    assert bad.returncode == 64 and "exists" in bad.stderr


PLAN = """
cmd = "true"
prompt = "x"

[[jobs]]
name = "build"
cmd = "echo build >> order"

[[jobs]]
name = "test"
cmd = "echo test >> order"
after = ["build"]

[[jobs]]
name = "docs"
cmd = "echo docs >> order"
after = "build"

[[jobs]]
name = "ship"
cmd = "echo ship >> order"
after = ["test", "docs"]
"""


def test_a_plan_file_declares_jobs_and_their_after_by_name(home: Path, tmux_env, tmp_path: Path):
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    made = run_cli(
        home, "submit", "--from-file", str(plan), "--workdir", str(tmp_path), env=tmux_env
    )
    assert made.returncode == 0, made.stderr
    ids = dict(line.split() for line in made.stdout.splitlines())
    names = list(ids)
    assert names[0] == "build" and names[-1] == "ship"  # each after what it waits for
    assert set(ids) == {"build", "test", "docs", "ship"}
    jobs = _ended(home, *ids.values())
    assert [j.status for j in jobs] == [JobState.COMPLETED] * 4
    ship = _record(home, ids["ship"])
    assert sorted(ship.after or []) == sorted([ids["test"], ids["docs"]])
    order = (tmp_path / "order").read_text().split()
    assert order[0] == "build" and order[-1] == "ship"


def test_a_circle_or_an_unknown_name_in_a_plan_is_refused(home: Path, tmux_env, tmp_path: Path):
    circle = tmp_path / "circle.toml"
    circle.write_text(
        'cmd = "true"\nprompt = "x"\n'
        '[[jobs]]\nname = "a"\nafter = ["c"]\n'
        '[[jobs]]\nname = "b"\nafter = ["a"]\n'
        '[[jobs]]\nname = "c"\nafter = ["b"]\n'
    )
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('cmd = "true"\nprompt = "x"\n[[jobs]]\nname = "a"\nafter = ["nope"]\n')
    for path, words in ((circle, "in a circle: "), (unknown, "'nope' is no job of this file")):
        refused = run_cli(home, "submit", "--from-file", str(path), env=tmux_env)
        assert refused.returncode == 64, refused.stderr
        assert_one_line_error(refused)
        assert words in refused.stderr
    assert not list((home / "jobs").glob("*.json"))  # nothing was recorded
    said = run_cli(home, "submit", "--from-file", str(circle), env=tmux_env).stderr
    assert all(name in said for name in ("a ->", "b ->", "c"))
