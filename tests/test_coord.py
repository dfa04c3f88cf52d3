"""Coordination primitives on a real coord.db: locks and claims with fencing tokens, leases on an
injected clock, heartbeats, deadlock cycles, boards, the blackboard. Races use real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from delegate.coord import blackboard, board, deadlock, heartbeats, leases
from delegate.coord.store import CoordStore

from .helpers import assert_one_line_error, cli_env, delegate_cmd, json_lines, run_cli
from .pty_run import run_in_pty


class Clock:
    """Epoch milliseconds that move only when the test says so."""

    def __init__(self, ms: int = 1_800_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(home: Path, clock: Clock) -> CoordStore:
    made = CoordStore(home / "coord.db", now=clock)
    yield made
    made.close()


# --- locks and claims ----------------------------------------------------------------------

RACER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from delegate.coord import leases
    from delegate.coord.store import CoordStore

    home, counter, tokens, me, rounds = sys.argv[1:6]
    store = CoordStore(Path(home) / "coord.db")
    for _ in range(int(rounds)):
        grant, _ = leases.acquire(store, "lock", "counter", me, ttl_s=60, wait_s=120)
        # read-modify-write of a plain file: only the lock keeps it from losing updates
        value = int(Path(counter).read_text() or "0")
        Path(counter).write_text(str(value + 1))
        with open(tokens, "a") as out:
            out.write(f"{grant.token}\\n")
        leases.release(store, "lock", "counter", me)
    """
)


def test_eight_processes_thousand_acquisitions_exact_counter_increasing_tokens(
    home: Path, tmp_path: Path
):
    counter, tokens = tmp_path / "counter", tmp_path / "tokens"
    counter.write_text("0")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(home), str(counter), str(tokens), f"racer{i}", "125"]
        )
        for i in range(8)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0] * 8
    assert counter.read_text() == "1000"
    handed = [int(line) for line in tokens.read_text().split()]
    # written while holding the lock, so in the order granted
    assert handed == list(range(1, 1001))


def test_lease_expiry_renewal_reclaim_and_break_dead(store: CoordStore, clock: Clock):
    grant, events = leases.acquire(store, "lock", "db", "alice", ttl_s=30)
    assert grant.token == 1 and events[0]["kind"] == "lock_acquired"
    with pytest.raises(leases.Held):
        leases.acquire(store, "lock", "db", "bob", ttl_s=30)
    clock.advance(20)
    renewed = leases.renew(store, "lock", "db", "alice", ttl_s=30)
    assert renewed.token == 1 and renewed.expires_ms == clock.ms + 30_000
    clock.advance(29)
    with pytest.raises(leases.Held):  # renewed: still hers at 49 s
        leases.acquire(store, "lock", "db", "bob", ttl_s=30)
    with pytest.raises(leases.NotHolder):
        leases.renew(store, "lock", "db", "bob", ttl_s=30)
    with pytest.raises(leases.NotHolder):
        leases.release(store, "lock", "db", "bob")
    clock.advance(1)  # expires_ms is reached: expired
    with pytest.raises(leases.NotHolder, match="expired"):
        leases.renew(store, "lock", "db", "alice", ttl_s=30)
    taken, events = leases.acquire(store, "lock", "db", "bob", ttl_s=30)
    assert taken.token == 2 and events[0]["previous"]["owner"] == "alice"
    assert events[0]["previous"]["held_ms"] == 50_000
    # same owner asking again: same grant, extended (a retry after a lost answer)
    again, events = leases.acquire(store, "lock", "db", "bob", ttl_s=60)
    assert again.token == 2 and again.expires_ms == clock.ms + 60_000 and events == []

    # claims: same rules, their own tokens
    claim, _ = leases.acquire(store, "claim", "task-7", "carol", ttl_s=60)
    assert claim.token == 1
    # --break-dead: refused while the holder's heartbeat is alive, or unknown
    with pytest.raises(leases.Held):
        leases.acquire(store, "claim", "task-7", "dave", ttl_s=60, break_dead=True)
    heartbeats.beat(store, "carol", "working", task="task-7")
    clock.advance(40)
    with pytest.raises(leases.Held):  # WARN is not DEAD
        leases.acquire(store, "claim", "task-7", "dave", ttl_s=60, break_dead=True)
    leases.renew(store, "claim", "task-7", "carol", ttl_s=600)  # renews, but stops beating
    clock.advance(300)
    assert heartbeats.agents(store)[0]["liveness"] == "DEAD"
    broken, events = leases.acquire(store, "claim", "task-7", "dave", ttl_s=60, break_dead=True)
    assert broken.token == 2 and broken.owner == "dave"
    assert [e["kind"] for e in events] == ["claim_broken", "claim_acquired"]
    assert events[0]["previous_owner"] == "carol" and events[0]["beat_age_ms"] == 340_000
    logged = store.read("SELECT kind, actor, subject FROM events ORDER BY seq")
    assert ("claim_broken", "dave", "task-7") in logged


def test_a_paused_holder_is_refused_by_lock_check(home: Path, store: CoordStore, clock: Clock):
    old, _ = leases.acquire(store, "lock", "deploy", "paused", ttl_s=10)
    assert run_cli(home, "lock", "check", "deploy", "--token", str(old.token)).returncode == 0
    clock.advance(11)  # the holder sleeps past its lease; another takes the lock
    new, _ = leases.acquire(store, "lock", "deploy", "fresh", ttl_s=10)
    assert new.token > old.token
    stale = run_cli(home, "lock", "check", "deploy", "--token", str(old.token))
    assert stale.returncode == 1 and "stale" in stale.stdout and "fresh" in stale.stdout
    assert leases.check(store, "lock", "deploy", new.token)[0]
    clock.advance(11)  # nobody renewed: even the newest token is no longer current
    assert not leases.check(store, "lock", "deploy", new.token)[0]


def test_lock_cli_round_trip_and_refusals(home: Path):
    got = run_cli(home, "lock", "acquire", "src/app.py", "--owner", "a", "--json")
    assert got.returncode == 0, got.stderr
    grant = json.loads(got.stdout)
    assert set(grant) >= {"resource", "owner", "token", "expires_at"} and grant["token"] == 1
    held = run_cli(home, "lock", "acquire", "src/app.py", "--owner", "b")
    assert held.returncode == 75 and "held by a" in held.stderr
    assert_one_line_error(held)
    assert_one_line_error(run_cli(home, "lock", "release", "src/app.py", "--owner", "b"))
    listed = json_lines(run_cli(home, "lock", "list", "--json").stdout)
    assert [(r["resource"], r["owner"]) for r in listed] == [("src/app.py", "a")]
    assert run_cli(home, "lock", "release", "src/app.py", "--owner", "a").returncode == 0
    token = run_cli(home, "lock", "acquire", "src/app.py", "--owner", "b").stdout.strip()
    assert token == "2"
    for bad in (
        ["lock", "acquire", "x", "--owner", "a", "--ttl", "zero"],
        ["lock", "acquire", "x", "--owner", "a", "--ttl", "-1"],
        ["lock", "acquire", "x", "--owner", "a", "--bogus"],
        ["lock", "check", "x", "--token", "seven"],
        ["lock", "acquire", "--owner", "a"],
        ["claim", "renew"],
    ):
        result = run_cli(home, *bad)
        assert result.returncode == 64, (bad, result.stderr)
        assert_one_line_error(result)
    claimed = run_cli(home, "claim", "build-docs", "--owner", "w", "--lease", "60", "--json")
    assert claimed.returncode == 0 and json.loads(claimed.stdout)["task"] == "build-docs"
    assert run_cli(home, "claim", "build-docs", "--owner", "v").returncode == 75
    assert run_cli(home, "claim", "renew", "build-docs", "--owner", "w").returncode == 0
    assert run_cli(home, "claim", "release", "build-docs", "--owner", "w").returncode == 0
    assert json_lines(run_cli(home, "claim", "list", "--json").stdout) == []


def test_lock_wait_takes_it_when_released(home: Path, store: CoordStore):
    leases.acquire(store, "lock", "shared", "first", ttl_s=60)
    waiter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "delegate",
            "lock",
            "acquire",
            "shared",
            "--owner",
            "second",
            "--wait",
            "30",
        ],
        env={**os.environ, "DELEGATE_HOME": str(home)},
        stdout=subprocess.PIPE,
        text=True,
    )
    # the waiter is blocked until the release; then it gets the next token
    with pytest.raises(subprocess.TimeoutExpired):
        waiter.wait(timeout=0.5)
    leases.release(store, "lock", "shared", "first")
    out, _ = waiter.communicate(timeout=10)
    assert waiter.returncode == 0 and out.strip() == "2"


# --- heartbeats ----------------------------------------------------------------------------


def test_heartbeat_thresholds(store: CoordStore, clock: Clock, home: Path):
    heartbeats.beat(store, "a", "working", task="t1", progress=40)
    seen = [(age, heartbeats.liveness(age)) for age in (0, 29_999, 30_000, 100_000, 300_000)]
    assert [s for _, s in seen] == ["OK", "OK", "WARN", "STALE", "DEAD"]
    custom = heartbeats.Thresholds.from_config({"warn": 5, "stale": 10, "dead": 20})
    clock.advance(12)
    assert heartbeats.agents(store, custom)[0]["liveness"] == "STALE"
    with pytest.raises(Exception, match="warn < stale < dead"):
        heartbeats.Thresholds.from_config({"warn": 150})
    beat = run_cli(home, "heartbeat", "--agent", "b", "--status", "blocked", "--task", "t2")
    assert beat.returncode == 0, beat.stderr
    rows = {r["agent"]: r for r in json_lines(run_cli(home, "agents", "--json").stdout)}
    assert rows["b"]["status"] == "blocked" and rows["b"]["liveness"] == "OK"
    bad = run_cli(home, "heartbeat", "--agent", "b", "--status", "asleep")
    assert bad.returncode == 64
    assert_one_line_error(bad)


# --- deadlocks -----------------------------------------------------------------------------


def test_every_cycle_is_reported(home: Path, store: CoordStore):
    assert run_cli(home, "deadlocks").returncode == 0  # none yet
    for agent, target in (("a", "b"), ("b", "c"), ("c", "a"), ("d", "e"), ("e", "d"), ("x", "a")):
        deadlock.block(store, agent, waiting_for=target, resource=None)
    leases.acquire(store, "lock", "db", "f", ttl_s=600)
    leases.acquire(store, "lock", "cache", "g", ttl_s=600)
    deadlock.block(store, "f", waiting_for=None, resource="cache")
    deadlock.block(store, "g", waiting_for=None, resource="db")
    result = run_cli(home, "deadlocks", "--json")
    assert result.returncode == 1, result.stderr
    cycles = [c["agents"] for c in json_lines(result.stdout)]
    assert sorted(cycles) == [["a", "b", "c"], ["d", "e"], ["f", "g"]]
    assert run_cli(home, "deadlocks").stdout == result.stdout  # piped: the same JSON lines
    shown = run_in_pty(delegate_cmd("deadlocks"), env=cli_env(home), columns=80)
    assert shown.returncode == 1
    assert "f -[cache]-> g -[db]-> f" in shown.output and "a -> b -> c -> a" in shown.output
    deadlock.unblock(store, "e")
    assert len(deadlock.deadlocks(store)) == 2


def test_find_cycles_pure():
    cycles = deadlock.find_cycles([("a", "agent", "b"), ("b", "resource", "r")], {"r": "a"})
    assert cycles == [
        [{"agent": "a", "waits_for": "b"}, {"agent": "b", "waits_for": "a", "via": "r"}]
    ]
    assert deadlock.find_cycles([("a", "resource", "r")], {"r": "a"}) == []  # holds it itself


# --- boards --------------------------------------------------------------------------------


def test_verdict_table_of_five_matches_the_reference():
    t = board.Thresholds()
    table = {a: board.verdict_of(a, 5 - a, 5, t) for a in range(6)}
    assert table == {
        5: "approved",
        4: "approved",
        3: "approved_with_review",
        2: "rejected",
        1: "rejected",
        0: "rejected",
    }
    assert board.verdict_of(2, 1, 5, t) == "escalate"  # shares of all voters, not of votes cast


def _run_board(home: Path, voters: list[str], approvers: int, rounds: int = 1) -> dict:
    opened = run_cli(home, "board", "open", "--voters", ",".join(voters), "--rounds", str(rounds))
    assert opened.returncode == 0, opened.stderr
    board_id = opened.stdout.strip()
    early = run_cli(home, "board", "vote", "--voter", voters[0], "--verdict", "approve")
    assert early.returncode == 65 and "in assessment, not voting" in early.stderr
    assert "waiting for " + ", ".join(voters) in early.stderr
    assert_one_line_error(early)
    for v in voters:
        r = run_cli(home, "board", "assess", "--voter", v, "--verdict", "approve", "--concern", "x")
        assert r.returncode == 0, r.stderr
    for n in range(rounds):
        for v in voters:
            r = run_cli(home, "board", "discuss", "--voter", v, "--message", f"round {n + 1}")
            assert r.returncode == 0, r.stderr
    for i, v in enumerate(voters):
        verdict = "approve" if i < approvers else "reject"
        r = run_cli(
            home,
            "board",
            "vote",
            "--voter",
            v,
            "--verdict",
            verdict,
            "--condition",
            f"cond-{v}",
            "--board",
            board_id,
        )
        assert r.returncode == 0, r.stderr
    resolved = run_cli(home, "board", "resolve", "--json")
    assert resolved.returncode == 0, resolved.stderr
    again = run_cli(home, "board", "resolve", "--board", board_id, "--json")
    assert json.loads(again.stdout) == json.loads(resolved.stdout)  # the same resolution
    return json.loads(resolved.stdout)


def test_boards_of_three_and_seven(home: Path):
    three = _run_board(home, ["a", "b", "c"], approvers=2)  # 2/3 = 0.67: with review
    assert three["verdict"] == "approved_with_review"
    assert three["tally"] == {"approve": 2, "reject": 1, "voters": 3}
    assert three["conditions"] == [
        {"condition": "cond-a", "author": "a"},
        {"condition": "cond-b", "author": "b"},
        {"condition": "cond-c", "author": "c"},
    ]
    assert [d["voter"] for d in three["dissent"]] == ["c"]
    seven = [f"v{i}" for i in range(7)]
    assert _run_board(home, seven, approvers=6, rounds=2)["verdict"] == "approved"  # 0.86
    rejected = _run_board(home, seven, approvers=2, rounds=0)  # reject share 5/7
    assert rejected["verdict"] == "rejected"
    assert [d["voter"] for d in rejected["dissent"]] == ["v0", "v1"]
    escalated = _run_board(home, seven, approvers=3, rounds=0)  # 3/7 approve, 4/7 reject
    assert escalated["verdict"] == "escalate"


def test_board_refusals(home: Path, store: CoordStore):
    board_id, _ = board.open_board(store, ["a", "b"], rounds=1)
    board.post(store, "assess", "a", {"verdict": "approve"})
    with pytest.raises(board.OutOfPhase, match="already posted"):
        board.post(store, "assess", "a", {"verdict": "approve"})
    with pytest.raises(Exception, match="not a voter"):
        board.post(store, "assess", "z", {})
    board.post(store, "assess", "b", {})
    with pytest.raises(board.OutOfPhase, match="discussion round 1 of 1"):
        board.resolve(store, board_id)
    status = json.loads(run_cli(home, "board", "status", "--json").stdout)
    assert status["phase"] == "discuss" and status["missing"] == ["a", "b"]
    phases = [
        json.loads(d)["phase"]
        for (d,) in store.read("SELECT data FROM events WHERE kind = 'board_phase' ORDER BY seq")
    ]
    assert phases == ["assess", "discuss"]


# --- blackboard ----------------------------------------------------------------------------


def test_blackboard_ttl_versions_prefixes_snapshot_render(
    home: Path, store: CoordStore, clock: Clock
):
    assert (
        blackboard.write(
            store,
            "task:q4",
            {"status": "pending", "assigned_to": "analyst"},
            agent="orchestrator",
            ttl_s=3600,
        )["version"]
        == 1
    )
    assert (
        blackboard.write(
            store, "task:q4", {"status": "in_progress"}, agent="analyst", if_version=1
        )["version"]
        == 2
    )
    with pytest.raises(blackboard.VersionConflict, match="version 2, not 1"):
        blackboard.write(store, "task:q4", {"status": "done"}, if_version=1)
    blackboard.write(store, "signal:analyst", "available", ttl_s=60, agent="analyst")
    blackboard.write(store, "cache:metrics", {"revenue": 1250000}, ttl_s=900)
    blackboard.write(store, "trace:a1", {"action": "delegate_task"})
    blackboard.write(store, "zzz", 1)
    blackboard.write(store, "result:q4", {"summary": "up 15%"})
    keys = [e["key"] for e in blackboard.entries(store)]
    assert keys == ["task:q4", "cache:metrics", "signal:analyst", "trace:a1", "result:q4", "zzz"]
    clock.advance(61)  # the signal expires
    assert blackboard.read(store, "signal:analyst") is None
    assert "signal:analyst" not in {e["key"] for e in blackboard.entries(store)}
    # an expired key starts over at version 1
    assert blackboard.write(store, "signal:analyst", "busy", if_version=0)["version"] == 1
    page = blackboard.render(store)
    assert page.startswith("# Swarm Blackboard\nLast Updated: ")
    for heading in (
        "## Active Tasks",
        "## Knowledge Cache",
        "## Coordination Signals",
        "## Execution History",
    ):
        assert heading in page
    assert "| q4 | analyst | in_progress |" in page and "### cache:metrics" in page

    # the CLI, as the reference's shell idiom uses it
    assert run_cli(home, "bb", "read", "nothing").stdout.strip() == "null"
    assert run_cli(home, "bb", "read", "nothing", "--strict").returncode == 1
    assert run_cli(home, "bb", "write", "cache:x", '{"a": [1, 2]}', "--ttl", "900").stdout == "1\n"
    assert json.loads(run_cli(home, "bb", "read", "cache:x").stdout) == {"a": [1, 2]}
    assert run_cli(home, "bb", "write", "note", "not json {").returncode == 0
    assert json.loads(run_cli(home, "bb", "read", "note").stdout) == "not json {"
    stale = run_cli(home, "bb", "write", "note", "x", "--if-version", "7")
    assert stale.returncode == 75
    assert_one_line_error(stale)
    listed = json_lines(run_cli(home, "bb", "list", "--prefix", "cache:").stdout)
    assert [e["key"] for e in listed] == ["cache:metrics", "cache:x"]
    snapshot = json.loads(run_cli(home, "bb", "snapshot", "--json").stdout)
    assert snapshot["cache:x"]["version"] == 1 and snapshot["cache:x"]["ttl"] == 900
    assert run_cli(home, "bb", "delete", "note").returncode == 0
    assert run_cli(home, "bb", "delete", "note").returncode == 1
    assert run_cli(home, "bb", "render").stdout.startswith("# Swarm Blackboard")


# --- inside a job ----------------------------------------------------------------------------


def test_coordination_inside_a_job_reaches_its_bus_and_it_beats(
    home: Path, tmux_env, tmp_path: Path
):
    from delegate.services.state import State

    from .helpers import submit_shell

    # the owner defaults to the job: its id is also its agent's heartbeat id
    prompt = (
        "delegate lock acquire build --ttl 60 >token.txt"
        " && delegate agents --json >agents.json"
        " && delegate lock release build"
    )
    result = submit_shell(home, tmux_env, tmp_path, prompt)
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    job_id = events[0]["job_id"]
    coord = [e["data"]["coord"] for e in events if "coord" in e.get("data", {})]
    assert [(c["kind"], c["subject"], c["actor"]) for c in coord] == [
        ("lock_acquired", "build", job_id),
        ("lock_released", "build", job_id),
    ]
    assert (tmp_path / "token.txt").read_text().strip() == str(coord[0]["token"])
    beats = {r["agent"]: r for r in json_lines((tmp_path / "agents.json").read_text())}
    assert beats[job_id]["status"] == "working" and beats[job_id]["liveness"] == "OK"
    # after the agent exited, its wrapper's last beat says so
    after = CoordStore(home / "coord.db")
    assert after.read("SELECT status FROM heartbeats WHERE agent = ?", (job_id,)) == [("idle",)]
    audit = State.open(env={"DELEGATE_HOME": str(home)}).audit.read_events(job_id, "published")
    assert any(e["envelope"]["detail"] == "lock acquired: build (token 1)" for e in audit)
