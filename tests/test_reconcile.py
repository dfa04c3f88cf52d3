"""The pure reconcile policy: every row of DESIGN 8's table, deadlines from the record, the
queue under caps, and idempotency (a world with the actions applied yields no more actions)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.core.model import Job, JobState, Pane, Session, SessionState, TmuxView
from delegate.core.policy import (
    AGENT_EXITED,
    IDLE_TIMEOUT,
    TMUX_GONE,
    WALL_TIMEOUT,
    ApplyEvent,
    Caps,
    FailJob,
    KillSession,
    LaunchJob,
    PolicySettings,
    ReportOrphan,
    SeenEvent,
    SetSession,
    SkipSocket,
    Snapshot,
    deadline_passed,
    may_start,
    next_deadline_s,
    reconcile,
)
from delegate.core.timefmt import record_timestamp

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
SOCK = "/tmp/tmux-0/test"
LAUNCH = {"argv": ["true"], "prompt": "stdin", "prompt_path": ""}


def at(seconds_ago: float) -> str:
    return record_timestamp(NOW - timedelta(seconds=seconds_ago))


def job(job_id: str = "0000000a", status: JobState = JobState.RUNNING, **kw) -> Job:
    values = {
        "job_id": job_id,
        "status": status,
        "created_at": at(100),
        "updated_at": at(100),
        "auth_token": "t",
        "agent": "shell",
        "session": f"dlg-{job_id}",
        "tmux_socket": SOCK,
        "launch": LAUNCH,
        "started_at": at(50) if status is JobState.RUNNING else None,
        "wall_timeout_s": 3600.0,
        "idle_timeout_s": 600.0,
    }
    values.update(kw)
    return Job(**values)


def row(j: Job, state: SessionState = SessionState.RUNNING, updated: float = 60) -> Session:
    return Session(
        j.session or "",
        state,
        j.job_id,
        j.agent,
        "/w",
        1234,
        at(100),
        at(updated),
        SOCK,
    )


def pane(j: Job, *, dead: bool = False, status: int | None = None, signo: int | None = None):
    return Pane(j.session or "", "%1", 1234, dead, status, j.job_id, signo)


def snap(jobs, panes=(), rows=(), *, status="ok", **kw) -> Snapshot:
    views = {SOCK: TmuxView(SOCK, status, tuple(panes), "why" if status != "ok" else "")}
    return Snapshot(jobs=list(jobs), views=views, sessions=list(rows), now=NOW, **kw)


def kinds(actions) -> list[tuple[str, str | None]]:
    return [(a.kind, a.job_id) for a in actions]


def test_a_terminal_event_is_applied_and_the_session_stopped_next():
    j = job()
    actions = reconcile(
        snap([j], [pane(j)], [row(j)], events=[SeenEvent(j.job_id, "completed", 3)])
    )
    # applied, and its session stopped in the same pass
    assert [(type(a), getattr(a, "state", None)) for a in actions] == [
        (ApplyEvent, None),
        (SetSession, SessionState.STOPPED),
    ]
    ended = replace_status(j, JobState.COMPLETED)
    actions = reconcile(snap([ended], [pane(ended, dead=True, status=0)], [row(ended)]))
    assert [(type(a), getattr(a, "state", None)) for a in actions] == [
        (SetSession, SessionState.STOPPED)
    ]
    # progress changes no state: nothing to apply, nothing else to do
    progress = snap([j], [pane(j)], [row(j)], events=[SeenEvent(j.job_id, "progress", 2)])
    assert reconcile(progress) == []
    # an event for a job that already ended is not applied again
    late = snap([ended], [], [], events=[SeenEvent(j.job_id, "error", 4)])
    assert not [a for a in reconcile(late) if isinstance(a, ApplyEvent)]


def replace_status(j: Job, status: JobState) -> Job:
    return j._replace(status=status)


@pytest.mark.parametrize(
    ("dead", "status", "signo", "reason"),
    [
        (True, 3, None, "agent_exited: the wrapper exited with status 3"),
        (True, None, 9, "agent_exited: the wrapper was killed by signal 9"),
        (True, None, None, "agent_exited: its pane is dead"),
    ],
    ids=["exit-status", "signal", "unknown"],
)
def test_a_dead_pane_fails_its_job_and_kills_the_session(dead, status, signo, reason):
    j = job()
    actions = reconcile(snap([j], [pane(j, dead=dead, status=status, signo=signo)], [row(j)]))
    assert kinds(actions) == [("fail_job", j.job_id), ("kill_session", j.job_id)]
    assert actions[0].reason == reason and reason.startswith(AGENT_EXITED)
    assert actions[0].evidence["exit_status"] == status


def test_a_gone_session_fails_its_job():
    j = job()
    actions = reconcile(snap([j], [], [row(j)]))
    assert kinds(actions)[0] == ("fail_job", j.job_id)
    assert actions[0].reason == "agent_exited: its tmux session is gone"


def test_a_gone_server_fails_with_tmux_gone_and_kills_nothing():
    j = job()
    actions = reconcile(snap([j], [], [row(j)], status="gone"))
    assert [(type(a), a.reason) for a in actions[:1]] == [(FailJob, TMUX_GONE)]
    assert isinstance(actions[1], SetSession) and actions[1].state is SessionState.TERMINATED
    assert not [a for a in actions if isinstance(a, KillSession)]


def test_tmux_that_cannot_be_asked_gives_no_verdict():
    j = job(started_at=at(10_000))  # even past its deadline: nothing is known of its pane
    actions = reconcile(snap([j], [], [row(j)], status="unreachable"))
    assert [type(a) for a in actions] == [SkipSocket]


@pytest.mark.parametrize(
    ("started", "last_event", "expected"),
    [
        (50, 10, None),
        (3601, 1, WALL_TIMEOUT),
        (700, 601, IDLE_TIMEOUT),
        (700, None, IDLE_TIMEOUT),
        (599, None, None),
    ],
    ids=["fresh", "wall", "idle", "idle-since-start", "within"],
)
def test_deadlines_come_from_the_record(started, last_event, expected):
    j = job(started_at=at(started), last_event_at=at(last_event) if last_event else None)
    assert deadline_passed(j, NOW) == expected
    actions = reconcile(snap([j], [pane(j)], [row(j)]))
    if expected is None:
        assert actions == []
    else:
        assert kinds(actions) == [("fail_job", j.job_id), ("kill_session", j.job_id)]
        assert actions[0].reason == expected


def test_next_deadline_is_the_nearest_one():
    j = job(started_at=at(3500), last_event_at=at(590))
    assert next_deadline_s(j, NOW) == pytest.approx(10.0)
    assert next_deadline_s(job(status=JobState.PENDING), NOW) is None


def test_a_launched_job_that_never_started_is_timed_from_its_launch():
    j = job(status=JobState.PENDING, idle_timeout_s=30.0)
    fresh = reconcile(snap([j], [pane(j)], [row(j, updated=10)]))
    assert fresh == []
    stale = reconcile(snap([j], [pane(j)], [row(j, updated=31)]))
    assert stale and stale[0].reason == IDLE_TIMEOUT


def test_a_never_launched_job_is_launched_unless_its_launcher_lives():
    j = job(status=JobState.PENDING, launcher={"pid": 1, "start": 2})
    assert kinds(reconcile(snap([j]))) == [("launch_job", j.job_id)]
    assert reconcile(snap([j], launchers_alive=frozenset({j.job_id}))) == []
    picked = job(status=JobState.PENDING, launch={}, session=None)
    assert reconcile(snap([picked])) == []  # registered for `pick`: not ours to launch


def test_the_queue_starts_oldest_first_within_the_caps():
    running = [job(f"0000000{i}", created_at=at(200 - i)) for i in range(2)]
    queued = [
        job(f"0000001{i}", JobState.QUEUED, created_at=at(100 - i), started_at=None)
        for i in range(3)
    ]
    world = running + queued
    live = ([pane(j) for j in running], [row(j) for j in running])

    def look(jobs, policy):
        return kinds(reconcile(snap(jobs, *live), policy))

    assert look(world, PolicySettings(caps=Caps(total=2))) == []
    assert look(world, PolicySettings(caps=Caps(total=3))) == [("launch_job", "00000010")]
    assert look(world, PolicySettings(caps=Caps())) == [("launch_job", q.job_id) for q in queued]
    # a job's own cap counts every running job; a profile cap only its own profile's
    own = [q._replace(max_running=3) for q in queued]
    assert look(running + own, PolicySettings()) == [("launch_job", "00000010")]
    other = [q._replace(agent="claude") for q in queued]
    capped = PolicySettings(caps=Caps(per_agent={"claude": 1}))
    assert look(running + other, capped) == [("launch_job", "00000010")]


def test_may_start_counts_admitted_jobs_and_running_ones():
    admitted = job("00000001", JobState.PENDING)
    registered = job("00000002", JobState.PENDING, launch={})
    newcomer = job("00000003", JobState.QUEUED)
    assert not may_start(newcomer, [admitted], Caps(total=1))
    assert may_start(newcomer, [registered], Caps(total=1))


def test_orphans_are_reported_and_killed_only_when_asked():
    stray = Pane("dlg-stray", "%9", 99, False, None, "", None)
    users = Pane("work", "%8", 98, False, None, "", None)
    marked = Pane("renamed", "%7", 97, False, None, "0badc0de", None)
    actions = reconcile(snap([], [stray, users, marked]))
    assert sorted((a.session, a.kill) for a in actions) == [
        ("dlg-stray", False),
        ("renamed", False),
    ]
    reaped = reconcile(snap([], [stray]), PolicySettings(reap_orphans=True))
    assert [(type(a), a.kill) for a in reaped] == [(ReportOrphan, True)]


def test_finished_sessions_are_kept_then_removed():
    j = job(status=JobState.COMPLETED)
    kept = row(j, SessionState.STOPPED, updated=100)
    assert reconcile(snap([j], [pane(j, dead=True, status=0)], [kept])) == []
    old = row(j, SessionState.STOPPED, updated=601)
    actions = reconcile(snap([j], [pane(j, dead=True, status=0)], [old]))
    assert kinds(actions) == [("kill_session", j.job_id)]
    assert (
        reconcile(snap([j], [pane(j, dead=True)], [old]), PolicySettings(keep_finished_s=1e9)) == []
    )


def test_a_row_whose_tmux_session_is_gone_is_terminated():
    j = job(status=JobState.COMPLETED)
    actions = reconcile(snap([j], [], [row(j)]))
    assert [(type(a), a.state) for a in actions] == [(SetSession, SessionState.TERMINATED)]


# --- idempotency over random worlds ----------------------------------------------------------


def apply(world: Snapshot, actions) -> Snapshot:
    """What the executor would leave behind, written out independently of it."""
    jobs = {j.job_id: j for j in world.jobs}
    rows = {r.name: r for r in world.sessions}
    panes = list(world.views[SOCK].panes)
    for a in actions:
        if isinstance(a, ApplyEvent):
            jobs[a.job_id] = jobs[a.job_id]._replace(
                status=JobState.COMPLETED if a.event == "completed" else JobState.ERROR
            )
        elif isinstance(a, FailJob):
            jobs[a.job_id] = jobs[a.job_id]._replace(status=JobState.ERROR, error=a.reason)
        elif isinstance(a, (SetSession, KillSession)):
            state = a.state if isinstance(a, SetSession) else SessionState.TERMINATED
            rows[a.session] = rows[a.session]._replace(state=state, updated_at=at(0))
            if isinstance(a, KillSession):
                panes = [p for p in panes if p.session != a.session]
        elif isinstance(a, LaunchJob):
            j = jobs[a.job_id]._replace(status=JobState.PENDING)
            jobs[a.job_id] = j
            rows[j.session or ""] = row(j, updated=0)
            panes = [p for p in panes if p.session != j.session] + [pane(j)]
    live = [r for r in rows.values() if r.state is not SessionState.TERMINATED]
    status = world.views[SOCK].status
    if any(isinstance(a, LaunchJob) for a in actions):
        status = "ok"  # launching starts a server on the socket
    views = {SOCK: TmuxView(SOCK, status, tuple(panes))}
    return replace(world, jobs=list(jobs.values()), sessions=live, views=views, events=())


@st.composite
def worlds(draw):
    jobs, panes, rows = [], [], []
    for i in range(draw(st.integers(0, 6))):
        status = draw(st.sampled_from(list(JobState)))
        j = job(
            f"000000{i:02x}",
            status,
            created_at=at(300 - i),
            started_at=at(draw(st.sampled_from([5, 700, 4000])))
            if status is JobState.RUNNING
            else None,
        )
        jobs.append(j)
        kind = draw(st.sampled_from(["alive", "dead", "absent"]))
        if status is not JobState.QUEUED and kind != "absent":
            panes.append(pane(j, dead=kind == "dead", status=0 if kind == "dead" else None))
        if status is not JobState.QUEUED and draw(st.booleans()):
            state = draw(st.sampled_from([SessionState.RUNNING, SessionState.STOPPED]))
            rows.append(row(j, state, updated=draw(st.sampled_from([5, 700]))))
    server = draw(st.sampled_from(["ok", "ok", "gone"]))
    if server == "gone":
        panes = []
    events = [SeenEvent(j.job_id, "completed", 9) for j in jobs if draw(st.booleans())]
    return snap(jobs, panes, rows, status=server, events=events)


@settings(max_examples=300, deadline=None)
@given(worlds(), st.sampled_from([Caps(), Caps(total=1), Caps(total=3)]))
def test_a_second_pass_over_the_outcome_changes_nothing(world, caps):
    policy = PolicySettings(caps=caps)
    first = reconcile(world, policy)
    after = apply(world, first)
    second = [a for a in reconcile(after, policy) if not isinstance(a, ReportOrphan)]
    # launched jobs are new facts (their panes are young): only they may act again, never twice
    assert second == [], (first, second)


def test_a_kill_lost_to_a_crash_after_the_verdict_is_carried_out_next_pass():
    failed = job(status=JobState.ERROR, error="idle_timeout")
    actions = reconcile(snap([failed], [pane(failed)], [row(failed)]))
    assert [(type(a), a.session) for a in actions] == [(KillSession, failed.session)]
    # a job that ended by its own report only has its session stopped
    reported = job(status=JobState.ERROR, error="agent_error: tests failed")
    actions = reconcile(snap([reported], [pane(reported, dead=True, status=1)], [row(reported)]))
    assert [(type(a), a.state) for a in actions] == [(SetSession, SessionState.STOPPED)]


def test_a_pending_remote_job_is_assigned_or_ended():
    remote = job(status=JobState.PENDING, host="h1", session=None, tmux_socket=None, launch=None)
    heard = {"hosts": {"h1": (1.0, 60.0)}}
    # its submit still runs: it is assigning it
    assert reconcile(snap([remote], launchers_alive=frozenset({remote.job_id}), **heard)) == []
    # its submit died before sending it: sent by whoever runs the policy, once (a claim)
    (never,) = reconcile(snap([remote], **heard))
    assert isinstance(never, LaunchJob) and never.expected_launcher == remote.launcher
    assert never.evidence["host"] == "h1"
    # sent a while ago, not started: measured from the assignment like a launch
    assert reconcile(snap([remote], assigned_at={remote.job_id: at(10)}, **heard)) == []
    (late,) = reconcile(snap([remote], assigned_at={remote.job_id: at(601)}, **heard))
    assert isinstance(late, FailJob) and late.reason == IDLE_TIMEOUT
    # queued on the host (its own caps): it waits for a slot there, as a local queued job
    waiting = {
        "assigned_at": {remote.job_id: at(601)},
        "queued_on_host": frozenset({remote.job_id}),
    }
    assert reconcile(snap([remote], **waiting, **heard)) == []
    # a host lost wins over all of it
    lost = {"hosts": {"h1": (61.0, 60.0)}}
    (gone,) = reconcile(snap([remote], assigned_at={remote.job_id: at(10)}, **lost))
    assert gone.reason == "host_lost"
