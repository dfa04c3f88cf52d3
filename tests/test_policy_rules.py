"""The reconcile policy rule by rule, and a golden record that the composition decides as before.

Each rule of delegate/core/policy.py is tried alone on small worlds built by hand (pure: no
tmux, no files), and `reconcile()` on one world where every rule acts, for their order.

The golden file (tests/data/policy_golden.json) holds, for each of a few thousand seeded random
worlds, a digest of the actions `reconcile()` returned for it when the policy was still one
function (`<count>:<sha256 prefix>` of every field of every action, in order). The worlds are
rebuilt here from their seeds, so the file stays small (about 90 KB) and is deterministic.
Regenerate it only when the policy is meant to decide differently:
`.venv/bin/python -m tests.test_policy_rules`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from enum import Enum
from pathlib import Path
from typing import Any

from delegate.core.caps import Gate, waiting_for
from delegate.core.model import Job, JobState, Pane, Session, SessionState, TmuxView
from delegate.core.policy import (
    AGENT_EXITED,
    ENDED_BY_RECONCILE,
    HOST_LOST,
    IDLE_TIMEOUT,
    LOST,
    TMUX_GONE,
    WALL_TIMEOUT,
    Action,
    Caps,
    Facts,
    FailJob,
    KillSession,
    PolicySettings,
    SeenEvent,
    SetSession,
    SkipSocket,
    Snapshot,
    accepted_events,
    fail_actions,
    jobs_on_socket,
    judge_job_outside_tmux,
    judge_open_job,
    judge_remote_job,
    judge_session_row,
    open_job_verdicts,
    orphan_sessions,
    queued_launches,
    reconcile,
    session_row_actions,
    unreachable_servers,
)

from .test_reconcile import LAUNCH, NOW, at
from .test_reconcile import job as reconcile_job

SOCKETS = ("/tmp/tmux-0/a", "/tmp/tmux-0/b", "/tmp/tmux-0/c")
GOLDEN = Path(__file__).resolve().parent / "data" / "policy_golden.json"
GOLDEN_WORLDS = 3000
EVENT_NAMES = ("started", "progress", "permission_required", "completed", "error")


# --- seeded random worlds --------------------------------------------------------------------
# Chosen to reach every branch: every job state, remote and outside-tmux jobs, rows that name
# another job, panes marked for another job, servers ok/gone/unreachable/not asked, events of
# unknown jobs and unknown names, every setting.


def _random_job(rnd: random.Random, job_id: str, names: list[str]) -> Job:
    status = rnd.choice(list(JobState))
    error = None
    if status is JobState.ERROR:
        # the reasons the golden worlds were drawn from (`lost` came later; a lost job's
        # session is judged as any other job's a pass failed, which these reasons cover)
        drawn = [r for r in ENDED_BY_RECONCILE if r != LOST]
        error = rnd.choice([None, "agent_error: tests failed", *drawn])
    session = rnd.choice([f"dlg-{job_id}", f"dlg-{job_id}", None, "work", *names[-1:]])
    return Job(
        job_id=job_id,
        status=status,
        created_at=at(rnd.choice([100, 200, 300])),  # ties: the id decides
        updated_at=at(100),
        auth_token="t",
        agent=rnd.choice(["shell", "claude", None]),
        session=session,
        wall_timeout_s=rnd.choice([None, 3600.0, 30.0]),
        idle_timeout_s=rnd.choice([None, 600.0, 20.0]),
        error=error,
        launch=rnd.choice([LAUNCH, LAUNCH, {}]),
        started_at=rnd.choice([None, at(5), at(700), at(4000)]),
        last_event_at=rnd.choice([None, None, at(1), at(25)]),
        tmux_socket=rnd.choice([*SOCKETS, None]),
        max_running=rnd.choice([None, None, 1, 3]),
        launcher=rnd.choice([None, {"pid": 7, "start": 1.5}]),
        host=rnd.choice([None, None, None, "h1", "h2"]),
    )


def _random_row(rnd: random.Random, job: Job, ids: list[str]) -> Session:
    return Session(
        name=job.session or f"dlg-{job.job_id}",
        state=rnd.choice([SessionState.RUNNING, SessionState.STOPPED, SessionState.ARCHIVED]),
        job_id=rnd.choice([job.job_id, job.job_id, job.job_id, None, *ids[:1]]),
        agent=job.agent,
        workdir="/w",
        pane_pid=rnd.choice([1234, None]),
        created_at=at(300),
        updated_at=at(rnd.choice([5, 25, 700, 5000])),
        socket=rnd.choice([None, None, *SOCKETS]),
    )


def _random_pane(rnd: random.Random, session: str, job_id: str, ids: list[str]) -> Pane:
    dead = rnd.random() < 0.4
    return Pane(
        session=session,
        pane_id=f"%{rnd.randrange(100)}",
        pid=rnd.randrange(1000, 2000),
        dead=dead,
        exit_status=rnd.choice([None, 0, 3]) if dead else None,
        job_id=rnd.choice([job_id, job_id, "", *ids[:1]]),
        exit_signal=rnd.choice([None, None, 9]) if dead else None,
    )


def random_world(seed: int) -> tuple[Snapshot, PolicySettings]:
    rnd = random.Random(seed)
    ids = [f"{rnd.randrange(16**8):08x}" for _ in range(rnd.randrange(0, 8))]
    jobs: list[Job] = []
    for job_id in ids:
        jobs.append(_random_job(rnd, job_id, [j.session for j in jobs if j.session]))
    rows = [_random_row(rnd, j, ids) for j in jobs if rnd.random() < 0.6]
    panes: dict[str, list[Pane]] = {s: [] for s in SOCKETS}
    for j in jobs:
        for _ in range(rnd.choice([0, 1, 1, 2])):
            socket = rnd.choice([j.tmux_socket or SOCKETS[0], *SOCKETS])
            name = j.session or f"dlg-{j.job_id}"
            panes[socket].append(_random_pane(rnd, name, j.job_id, ids))
    strays = ["dlg-stray", "work", "renamed"]
    for name in rnd.sample(strays, rnd.randrange(0, 3)):
        panes[rnd.choice(SOCKETS)].append(_random_pane(rnd, name, rnd.choice(["", "0badc0de"]), []))
    views = {}
    for socket in SOCKETS:
        status = rnd.choice(["ok", "ok", "ok", "gone", "unreachable", "absent"])
        if status == "ok":
            views[socket] = TmuxView(socket, "ok", tuple(panes[socket]))
        elif status != "absent":
            views[socket] = TmuxView(socket, status, (), f"{status} because")
    names = [*ids, "0badc0de", "ffffffff"]
    events = [
        SeenEvent(rnd.choice(names), rnd.choice([*EVENT_NAMES, "bogus"]), rnd.randrange(1, 9), "d")
        for _ in range(rnd.randrange(0, 4))
    ]
    closed = [
        Session(name, SessionState.TERMINATED, None, None, None, None, at(9), at(9), SOCKETS[0])
        for name in rnd.sample(strays, rnd.randrange(0, 2))
    ]
    snap = Snapshot(
        jobs=jobs,
        views=views,
        sessions=rows,
        now=NOW,
        events=events,
        launchers_alive=frozenset(i for i in ids if rnd.random() < 0.2),
        closed_sessions=closed,
        hosts={h: (rnd.choice([1.0, 61.0]), 60.0) for h in ("h1", "h2") if rnd.random() < 0.8},
        assigned_at={i: at(rnd.choice([10, 700])) for i in ids if rnd.random() < 0.4},
        queued_on_host=frozenset(i for i in ids if rnd.random() < 0.2),
    )
    settings = PolicySettings(
        keep_finished_s=rnd.choice([600.0, 0.0, 1e9]),
        reap_orphans=rnd.random() < 0.5,
        caps=rnd.choice(
            [None, Caps(), Caps(total=1), Caps(total=3), Caps(per_agent={"claude": 1})]
        ),
        launch_queued=rnd.random() < 0.8,
        report_orphans=rnd.random() < 0.8,
        default_socket=rnd.choice([None, SOCKETS[0], SOCKETS[2]]),
    )
    return snap, settings


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def action_record(action: Action) -> list[Any]:
    """Every field of an action, in order, as JSON: what "the same action" means here."""
    fields = [_plain(getattr(action, f.name)) for f in dataclasses.fields(action)]
    return [type(action).__name__, *fields]


def digest(actions: list[Action]) -> str:
    """`<count>:<sha256 prefix>` of every field of every action, in order."""
    text = json.dumps([action_record(a) for a in actions], separators=(",", ":"))
    return f"{len(actions)}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def golden_digests() -> dict[str, str]:
    return {str(seed): digest(reconcile(*random_world(seed))) for seed in range(GOLDEN_WORLDS)}


def test_reconcile_decides_as_the_single_function_did():
    expected = json.loads(GOLDEN.read_text())
    assert len(expected) == GOLDEN_WORLDS
    changed = {}
    reached: set[str] = set()
    for seed, was in expected.items():
        actions = reconcile(*random_world(int(seed)))
        if digest(actions) != was:
            changed[seed] = (was, [a.describe() for a in actions])
        reached.update(type(a).__name__ for a in actions)
        reached.update(a.reason.split(":")[0] for a in actions if isinstance(a, FailJob))
    # the old actions of a seed: check out the commit that wrote the golden file and run
    # reconcile(*random_world(seed)) there
    assert not changed, dict(list(changed.items())[:3])
    # the record is worth only as much as the worlds cover: every action, every verdict
    kinds = {"SkipSocket", "ApplyEvent", "FailJob", "SetSession", "KillSession", "ReportOrphan"}
    verdicts = {AGENT_EXITED, TMUX_GONE, WALL_TIMEOUT, IDLE_TIMEOUT, HOST_LOST}
    assert reached >= kinds | {"LaunchJob"} | verdicts


# --- each rule alone, on small hand-built worlds ---------------------------------------------

SOCK = SOCKETS[0]


def job(job_id: str = "0000000a", status: JobState = JobState.RUNNING, **kw: Any) -> Job:
    """test_reconcile's job, on this file's first socket unless told otherwise."""
    return reconcile_job(job_id, status, **{"tmux_socket": SOCK, **kw})


def row(j: Job, state: SessionState = SessionState.RUNNING, **kw: Any) -> Session:
    values: dict[str, Any] = {
        "name": j.session or "",
        "state": state,
        "job_id": j.job_id,
        "agent": j.agent,
        "workdir": "/w",
        "pane_pid": 1234,
        "created_at": at(100),
        "updated_at": at(60),
        "socket": SOCK,
    }
    values.update(kw)
    return Session(**values)


def pane(j: Job, *, dead: bool = False, status: int | None = None, mark: str | None = None):
    return Pane(j.session or "", "%1", 1234, dead, status, j.job_id if mark is None else mark)


def world(jobs=(), panes=(), rows=(), *, status: str = "ok", **kw: Any) -> Snapshot:
    views = {SOCK: TmuxView(SOCK, status, tuple(panes), "" if status == "ok" else "why")}
    return Snapshot(jobs=list(jobs), views=views, sessions=list(rows), now=NOW, **kw)


def facts(snap: Snapshot, **settings: Any) -> Facts:
    return Facts.of(snap, PolicySettings(**settings))


def shapes(actions) -> list[tuple[str, str | None]]:
    return [(type(a).__name__, a.job_id) for a in actions]


# rule 1


def test_servers_not_asked_are_named_in_socket_order():
    views = {
        "/s/c": TmuxView("/s/c", "unreachable", (), "permission denied"),
        "/s/a": TmuxView("/s/a", "unreachable", (), "timed out"),
        "/s/b": TmuxView("/s/b", "gone"),
        "/s/d": TmuxView("/s/d", "ok"),
    }
    skips = unreachable_servers(Snapshot(jobs=[], views=views, sessions=[], now=NOW))
    assert [(a.socket, a.reason) for a in skips] == [
        ("/s/a", "timed out"),
        ("/s/c", "permission denied"),
    ]
    assert all(isinstance(a, SkipSocket) and a.job_id is None for a in skips)


# rule 2


def test_events_that_change_state_are_applied_once_and_end_their_job():
    pending, running, done = job("00000001", JobState.PENDING), job("00000002"), job("00000003")
    done = done._replace(status=JobState.COMPLETED)
    events = [
        SeenEvent(pending.job_id, "started", 1),
        SeenEvent(running.job_id, "progress", 2),  # changes no state
        SeenEvent(running.job_id, "bogus", 3),  # not an event name
        SeenEvent("0badc0de", "completed", 1),  # no such open job
        SeenEvent(done.job_id, "error", 5),  # already ended
        SeenEvent(running.job_id, "error", 4, "tests failed"),
        SeenEvent(running.job_id, "completed", 5),  # the job ended with the event before
    ]
    actions, jobs = accepted_events(world([pending, running, done], events=events))
    assert [(a.job_id, a.event, a.seq, a.detail) for a in actions] == [
        (pending.job_id, "started", 1, ""),
        (running.job_id, "error", 4, "tests failed"),
    ]
    # only an ending event changes the job the later rules see
    assert jobs[pending.job_id].status is JobState.PENDING
    assert jobs[running.job_id].status is JobState.ERROR


# rule 3


def test_a_job_on_a_lost_host_fails_before_anything_else_is_asked():
    remote = job(host="h1", session=None, started_at=at(10_000))
    actions = judge_remote_job(remote, facts(world([remote], hosts={"h1": (90.04, 60.0)})))
    assert shapes(actions) == [("FailJob", remote.job_id)]
    assert actions[0].reason == HOST_LOST
    assert actions[0].evidence == {"host": "h1", "silent_s": 90.0, "lost_after_s": 60.0}


def test_a_remote_job_is_assigned_waits_or_times_out():
    pending = job(status=JobState.PENDING, host="h1", session=None, launcher={"pid": 3})
    heard = {"hosts": {"h1": (1.0, 60.0)}}
    never = judge_remote_job(pending, facts(world([pending], **heard)))
    assert shapes(never) == [("LaunchJob", pending.job_id)]
    assert never[0].expected_launcher == {"pid": 3}
    alive = world([pending], launchers_alive=frozenset({pending.job_id}), **heard)
    assert judge_remote_job(pending, facts(alive)) == []
    late = {"assigned_at": {pending.job_id: at(601)}}
    assert judge_remote_job(pending, facts(world([pending], **late)))[0].reason == IDLE_TIMEOUT
    queued = world([pending], queued_on_host=frozenset({pending.job_id}), **late)
    assert judge_remote_job(pending, facts(queued)) == []
    running = job(host="h1", session=None, started_at=at(3601))
    assert judge_remote_job(running, facts(world([running])))[0].reason == WALL_TIMEOUT


def test_a_job_outside_tmux_is_judged_by_its_deadlines_only():
    late = job(session=None, started_at=at(3601))
    (failed,) = judge_job_outside_tmux(late, facts(world([late])))
    assert isinstance(failed, FailJob) and failed.reason == WALL_TIMEOUT
    assert judge_job_outside_tmux(job(session=None), facts(world())) == []
    pending = job(status=JobState.PENDING, session=None)
    assert judge_job_outside_tmux(pending, facts(world())) == []


def test_a_job_never_launched_is_launched_unless_it_cannot_be_told():
    j = job(status=JobState.PENDING, launcher={"pid": 1})
    assert shapes(judge_open_job(j, facts(world([j])))) == [("LaunchJob", j.job_id)]
    alive = world([j], launchers_alive=frozenset({j.job_id}))
    assert judge_open_job(j, facts(alive)) == []
    assert judge_open_job(j, facts(world([j], status="unreachable"))) == []
    picked = j._replace(launch={})  # registered for `pick`: never ours to launch
    assert judge_open_job(picked, facts(world([picked]))) == []
    # a row with the pane's pid means it was launched: judged in tmux (its pane is absent)
    launched = judge_open_job(j, facts(world([j], [], [row(j)])))
    assert shapes(launched) == [("FailJob", j.job_id), ("KillSession", j.job_id)]


def test_a_job_in_tmux_fails_when_its_server_or_pane_is_gone():
    j = job()
    gone = judge_open_job(j, facts(world([j], [], [row(j)], status="gone")))
    assert [(type(a).__name__, a.reason) for a in gone] == [
        ("FailJob", TMUX_GONE),
        ("SetSession", f"job {j.job_id} {TMUX_GONE}"),
    ]
    assert gone[1].state is SessionState.TERMINATED and gone[1].follows_fail
    dead = judge_open_job(j, facts(world([j], [pane(j, dead=True, status=2)], [row(j)])))
    assert dead[0].reason == "agent_exited: the wrapper exited with status 2"
    assert isinstance(dead[1], KillSession) and dead[1].socket == SOCK and dead[1].follows_fail
    assert judge_open_job(j, facts(world([j], [], [row(j)], status="unreachable"))) == []
    assert judge_open_job(j, facts(world([j], [pane(j)], [row(j)]))) == []
    # a pane marked for another job is not this job's
    stolen = judge_open_job(j, facts(world([j], [pane(j, mark="0badc0de")], [row(j)])))
    assert stolen[0].reason == "agent_exited: its tmux session is gone"


def test_a_job_whose_server_cannot_be_seen_ends_lost_only_after_the_grace():
    j = job()
    started = {SOCK: at(30)}  # the episode began 30 s before NOW
    unseen = world([j], [], [row(j)], status="unreachable", unseen_since=started)
    # within the grace, and before any episode was recorded: no verdict, nothing killed
    assert judge_open_job(j, facts(unseen, lost_after_s=60.0)) == []
    first = world([j], [], [row(j)], status="unreachable")
    assert judge_open_job(j, facts(first, lost_after_s=0.0)) == []
    assert reconcile(unseen, PolicySettings(lost_after_s=60.0)) == [
        SkipSocket("skip_socket", None, "why", {}, socket=SOCK)
    ]
    # past it: lost, saying so, and its session left for when the server is seen again
    lost = judge_open_job(j, facts(unseen, lost_after_s=20.0))
    assert shapes(lost) == [("FailJob", j.job_id)]
    assert lost[0].reason.startswith(f"{LOST}: tmux on {SOCK} could not be asked for 30 s")
    assert lost[0].evidence["unseen_since"] == at(30)
    # the default grace is 60 s
    assert judge_open_job(j, facts(unseen)) == []
    assert shapes(judge_open_job(j, facts(world([j], [], [row(j)], status="unreachable",
        unseen_since={SOCK: at(61)})))) == [("FailJob", j.job_id)]  # fmt: skip


def test_a_lost_job_is_killed_once_its_server_is_seen_again():
    j = job(status=JobState.ERROR, error=f"{LOST}: tmux on {SOCK} could not be asked")
    seen = world([j], [pane(j)], [row(j)], unseen_since={SOCK: at(90)})
    actions = reconcile(seen)
    assert [type(a).__name__ for a in actions] == ["SeenAgain", "KillSession"]
    assert actions[0].socket == SOCK and actions[0].evidence["unseen_since"] == at(90)
    gone = reconcile(world([j], [], [row(j)], status="gone", unseen_since={SOCK: at(90)}))
    assert [type(a).__name__ for a in gone] == ["SeenAgain", "SetSession"]
    assert gone[0].reason == "no server there"
    # a server not asked this pass ends no episode
    assert reconcile(world([j], [], [row(j)], status="ok", unseen_since={"/s/else": at(9)})) == [
        SetSession("set_session", j.job_id, "its tmux session is gone",
                   {"row_socket": SOCK, "tmux": "ok"}, session=j.session or "")
    ]  # fmt: skip


def test_jobs_on_a_socket_are_the_open_tmux_jobs_placed_there():
    a, b = job("0000000a"), job("0000000b", tmux_socket="/s/other")
    ended = job("0000000c", status=JobState.COMPLETED)
    snap = world([a, b, ended], [], [row(a), row(b, socket="/s/other")])
    assert jobs_on_socket(snap, PolicySettings(), SOCK) == [a.job_id]
    assert jobs_on_socket(snap, PolicySettings(), "/s/other") == [b.job_id]
    assert jobs_on_socket(snap, PolicySettings(), SOCK, ended_too=True) == [a.job_id]
    with_row = world([a, ended], [], [row(a), row(ended)])
    assert jobs_on_socket(with_row, PolicySettings(), SOCK, ended_too=True) == [
        a.job_id,
        ended.job_id,
    ]


def test_a_job_whose_server_was_not_asked_is_judged_by_the_record():
    j = job(status=JobState.PENDING, idle_timeout_s=30.0, tmux_socket="/s/elsewhere")
    elsewhere = row(j, socket="/s/elsewhere", updated_at=at(31))  # launched 31 s ago
    (failed, kill) = judge_open_job(j, facts(world([j], [], [elsewhere])))
    assert failed.reason == IDLE_TIMEOUT and failed.evidence["idle_timeout_s"] == 30.0
    assert isinstance(kill, KillSession) and kill.socket == "/s/elsewhere"
    fresh = elsewhere._replace(updated_at=at(29))
    assert judge_open_job(j, facts(world([j], [], [fresh]))) == []


def test_a_row_of_another_job_under_the_same_name_is_not_this_jobs():
    j = job(status=JobState.PENDING)
    other = row(j, job_id="0badc0de", socket="/s/other")
    placed = facts(world([j], [], [other])).placement(j)
    assert placed.row is None and not placed.launched
    assert placed.socket == SOCK  # the job's own socket, not the other row's
    assert Facts.of(world(), PolicySettings(default_socket="/s/d")).socket_of(None, None) == "/s/d"


def test_fail_actions_close_the_session_the_way_its_server_allows():
    j = job()
    (only,) = fail_actions(j, WALL_TIMEOUT, {"x": 1}, facts(world([j])), kill_row=None)
    assert isinstance(only, FailJob) and only.evidence == {"x": 1}
    for status, kind in (("ok", KillSession), ("gone", SetSession), ("unreachable", SetSession)):
        f = facts(world([j], status=status))
        _, close = fail_actions(j, WALL_TIMEOUT, {}, f, kill_row=row(j))
        assert isinstance(close, kind) and close.session == j.session and close.follows_fail


def test_open_jobs_are_judged_oldest_first_ties_by_id():
    b = job("0000000b", started_at=at(3601), created_at=at(100))
    a = job("0000000a", started_at=at(3601), created_at=at(100))
    old = job("0000000c", started_at=at(3601), created_at=at(200))
    skipped = [
        job("0000000d", JobState.QUEUED, started_at=at(3601)),
        job("0000000e", JobState.ERROR, started_at=at(3601)),
    ]
    actions = open_job_verdicts(facts(world([b, a, old, *skipped])))
    assert [a.job_id for a in actions if isinstance(a, FailJob)] == [
        "0000000c",
        "0000000a",
        "0000000b",
    ]


# rule 4


def test_a_row_whose_tmux_session_is_gone_is_terminated_once_its_job_ended():
    ended = job(status=JobState.COMPLETED)
    (closed,) = judge_session_row(row(ended), facts(world([ended])))
    assert isinstance(closed, SetSession) and closed.state is SessionState.TERMINATED
    assert closed.evidence == {"row_socket": SOCK, "tmux": "ok"}
    open_job = job()
    assert judge_session_row(row(open_job), facts(world([open_job]))) == []
    assert judge_session_row(row(ended), facts(world([ended], status="unreachable"))) == []


def test_a_running_session_of_an_ended_job_is_killed_or_stopped():
    cases = [
        (JobState.ERROR, IDLE_TIMEOUT, KillSession, f"job 0000000a {IDLE_TIMEOUT}"),
        (
            JobState.CANCELLED,
            None,
            KillSession,
            "job 0000000a cancelled; its agent was still running",
        ),
        (JobState.ERROR, "agent_error: tests failed", SetSession, "job 0000000a error"),
        (JobState.COMPLETED, None, SetSession, "job 0000000a completed"),
    ]
    for status, error, kind, reason in cases:
        ended = job(status=status, error=error)
        (action,) = judge_session_row(row(ended), facts(world([ended], [pane(ended)])))
        assert (type(action), action.reason) == (kind, reason)
        if kind is SetSession:
            assert action.state is SessionState.STOPPED


def test_a_stopped_session_is_kept_for_inspection_then_killed():
    ended = job(status=JobState.COMPLETED)
    seen = world([ended], [pane(ended, dead=True, status=0)])
    kept = row(ended, SessionState.STOPPED, updated_at=at(599))
    assert judge_session_row(kept, facts(seen)) == []
    old = kept._replace(updated_at=at(600))
    (kill,) = judge_session_row(old, facts(seen))
    assert isinstance(kill, KillSession) and kill.reason == "finished, kept 600 s for inspection"
    assert judge_session_row(old, facts(seen, keep_finished_s=1e9)) == []
    # a stopped session of an open job (resumed) is not the rule's
    resumed = job()
    stopped = row(resumed, SessionState.STOPPED, updated_at=at(5000))
    assert judge_session_row(stopped, facts(world([resumed], [pane(resumed)]))) == []


def test_rows_the_open_job_verdicts_already_closed_are_left_alone():
    a, b = job("0000000a", JobState.COMPLETED), job("0000000b", JobState.COMPLETED)
    f = facts(world([a, b], [pane(a), pane(b)], [row(a), row(b)]))
    assert shapes(session_row_actions(f)) == [("SetSession", a.job_id), ("SetSession", b.job_id)]
    verdicts = [FailJob("fail_job", a.job_id, WALL_TIMEOUT, {})]
    assert shapes(session_row_actions(f, verdicts)) == [("SetSession", b.job_id)]
    closed = [KillSession("kill_session", "0badc0de", "x", {}, session=b.session or "")]
    assert shapes(session_row_actions(f, closed)) == [("SetSession", a.job_id)]


# rule 5


def test_orphans_are_toolkit_sessions_no_record_knows():
    known = job()
    panes = [
        Pane("dlg-stray", "%9", 9, False, None, ""),
        Pane("work", "%8", 8, False, None, ""),  # a person's own session
        Pane("renamed", "%7", 7, False, None, "0badc0de"),  # marked for a job
        Pane("dlg-closed", "%6", 6, False, None, ""),  # a terminated row still names it
        pane(known),
    ]
    closed = [Session("dlg-closed", SessionState.TERMINATED, None, None, None, None, "", "", SOCK)]
    seen = world([known], panes, [row(known)], closed_sessions=closed)
    reports = orphan_sessions(facts(seen))
    assert [(a.session, a.job_id, a.kill) for a in reports] == [
        ("dlg-stray", None, False),
        ("renamed", "0badc0de", False),
    ]
    assert [a.kill for a in orphan_sessions(facts(seen, reap_orphans=True))] == [True, True]
    assert orphan_sessions(facts(seen, report_orphans=False)) == []


# rule 6


def test_queued_jobs_start_oldest_first_while_the_cap_allows():
    queued = [
        job(f"0000001{i}", JobState.QUEUED, created_at=at(100 - i), started_at=None)
        for i in range(3)
    ]
    launched = queued_launches(facts(world(queued), caps=Caps(total=2)))
    # a job launched in this pass holds its slot for the next one in line
    assert shapes(launched) == [("LaunchJob", "00000010"), ("LaunchJob", "00000011")]
    assert queued_launches(facts(world(queued), launch_queued=False)) == []


def test_a_queued_retry_on_a_host_waits_only_for_its_backoff():
    """A job on an agent host counts against its host's caps, not this side's: its retry
    waits here for its `not_before` alone, then is launched (assigned) even with every local
    slot taken."""
    running = job("00000001", created_at=at(300))
    retry = job(
        "00000002", JobState.QUEUED, host="h1", attempt=2, not_before=at(-5), started_at=None
    )
    full = world([running, retry], [pane(running)], [row(running)])
    assert queued_launches(facts(full, caps=Caps(total=1))) == []
    assert waiting_for(retry, [running], Caps(total=1), gate=Gate(now=NOW)).startswith("retry 2 at")
    due = world([running, retry._replace(not_before=at(1))], [pane(running)], [row(running)])
    assert shapes(queued_launches(facts(due, caps=Caps(total=1)))) == [("LaunchJob", retry.job_id)]
    local = retry._replace(host=None, not_before=at(1))
    assert waiting_for(local, [running], Caps(total=1), gate=Gate(now=NOW)) == (
        "max_running 1 reached"
    )


def test_slots_freed_earlier_in_the_pass_are_free():
    running = job("00000001", created_at=at(300))
    queued = job("00000002", JobState.QUEUED, started_at=None)
    f = facts(world([running, queued], [pane(running)], [row(running)]), caps=Caps(total=1))
    assert queued_launches(f) == []
    failed = FailJob("fail_job", running.job_id, WALL_TIMEOUT, {})
    # failed, but its session still runs: it holds the slot until the session is closed
    assert queued_launches(f, [failed]) == []
    kill = KillSession("kill_session", running.job_id, "x", {}, session=running.session or "")
    assert shapes(queued_launches(f, [failed, kill])) == [("LaunchJob", queued.job_id)]


# the composition


def test_reconcile_runs_the_rules_in_their_order():
    """One world where every rule acts: the actions come out rule by rule."""
    late = job("00000001", started_at=at(3601), created_at=at(300))
    reported = job("00000002", created_at=at(200))
    queued = job("00000003", JobState.QUEUED, started_at=None)
    panes = [pane(late), pane(reported), Pane("dlg-stray", "%9", 9, False, None, "")]
    views = {
        SOCK: TmuxView(SOCK, "ok", tuple(panes)),
        "/s/x": TmuxView("/s/x", "unreachable", (), "timed out"),
    }
    seen = Snapshot(
        jobs=[queued, reported, late],
        views=views,
        sessions=[row(reported), row(late)],
        now=NOW,
        events=[SeenEvent(reported.job_id, "completed", 4)],
    )
    actions = reconcile(seen, PolicySettings(caps=Caps(total=1)))
    assert shapes(actions) == [
        ("SkipSocket", None),  # 1
        ("ApplyEvent", reported.job_id),  # 2
        ("FailJob", late.job_id),  # 3
        ("KillSession", late.job_id),
        ("SetSession", reported.job_id),  # 4: stopped, its job completed by the event
        ("ReportOrphan", None),  # 5
        ("LaunchJob", queued.job_id),  # 6: both slots were freed above
    ]


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps(golden_digests(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
