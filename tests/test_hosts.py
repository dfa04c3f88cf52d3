"""Agent hosts over a real Mosquitto broker: a delegator and an agent host with state dirs of
their own (the agent host with its own tmux server), `submit --host`, forged and replayed
assignments, remote cancel, a host that dies, and what travels on the wire."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate.core import hostproto
from delegate.core.model import JobState
from delegate.core.timefmt import parse_timestamp
from delegate.services.jobs.finish import end_job
from delegate.services.jobs.launch import SENT_TO_HOST
from delegate.services.remote import HostBook
from delegate.services.state import State

from .helpers import (
    assert_one_line_error,
    cli_env,
    delegate_cmd,
    json_lines,
    retry_until,
    run_cli,
    signed_assignment,
)
from .tmux_fixtures import kill_processes_of


class Wiretap:
    """Everything published under the prefix, as a subscriber to `delegate/#` receives it."""

    def __init__(self, port: int) -> None:
        import paho.mqtt.client as mqtt
        from paho.mqtt.enums import CallbackAPIVersion

        self.payloads: list[tuple[str, bytes]] = []
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2, client_id=f"tap-{uuid.uuid4().hex[:8]}"
        )
        self.client.on_message = lambda c, u, m: self.payloads.append((m.topic, bytes(m.payload)))
        self.client.on_connect = lambda c, u, f, r, p: c.subscribe("delegate/#", qos=1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class Sides:
    def __init__(
        self,
        home: Path,
        host_home: Path,
        env: dict[str, str],
        host_env: dict[str, str],
        key: str,
        key_file: Path,
    ) -> None:
        self.home, self.host_home = home, host_home
        self.env, self.host_env = env, host_env
        self.key, self.key_file = key, key_file
        self.server: subprocess.Popen[bytes] | None = None

    def serve(self, workdir: Path) -> None:
        self.server = subprocess.Popen(
            delegate_cmd(
                "host",
                "serve",
                "--name",
                "h1",
                "--key-file",
                str(self.key_file),
                "--workdir",
                str(workdir),
                "--presence-every",
                "1",
            ),
            env=self.host_env,
            stdin=subprocess.DEVNULL,
        )
        retry_until(lambda: (self.host_home / "logs" / "host-h1.ndjson").exists(), timeout=30)

    def submit(self, prompt: str, *flags: str) -> subprocess.CompletedProcess[str]:
        """`delegate submit --host h1 --agent shell` on the delegator's side."""
        return subprocess.run(
            delegate_cmd("submit", "--host", "h1", "--agent", "shell", *flags, "--prompt", prompt),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    @contextlib.contextmanager
    def monitoring(self) -> Iterator[None]:
        """A `delegate monitor` on the delegator's side for the duration."""
        monitor = subprocess.Popen(
            delegate_cmd("monitor", "--interval", "0.5"),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        try:
            yield
        finally:
            monitor.send_signal(signal.SIGTERM)
            monitor.wait(timeout=30)

    def host_state(self) -> State:
        return State.open(env={"DELEGATE_HOME": str(self.host_home)})

    def host_audit(self) -> list[dict[str, Any]]:
        path = self.host_home / "logs" / "host-h1.ndjson"
        return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def sides(
    request: pytest.FixtureRequest, broker, home: Path, tmux_env, tmp_path: Path
) -> Iterator[Sides]:
    lost_after = str(getattr(request, "param", 4))
    host_home = tmp_path / "agent-host"
    env = cli_env(home, {"DELEGATE_BUS": broker.url})
    host_env = cli_env(host_home, {**tmux_env, "DELEGATE_BUS": broker.url})
    added = run_cli(
        home, "host", "add", "h1", "--lost-after", lost_after, env={"DELEGATE_BUS": broker.url}
    )
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    key_file = tmp_path / "h1.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    made = Sides(home, host_home, env, host_env, key, key_file)
    yield made
    if made.server is not None and made.server.poll() is None:
        made.server.send_signal(signal.SIGTERM)
        try:
            made.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            made.server.kill()
    kill_processes_of(host_home)
    kill_processes_of(home)


def test_submit_host_runs_there_waits_here_and_the_token_never_travels(
    sides: Sides, broker, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    tap = Wiretap(broker.port)
    sides.serve(work)
    listed = json_lines(run_cli(sides.home, "host", "list", "--json", env=sides.env).stdout)
    assert [(r["name"], r["online"]) for r in listed] == [("h1", True)]
    assert "key" not in json.dumps(listed)
    result = sides.submit(
        'delegate publish --event progress --detail "on the host"; echo ran > out.txt', "--wait"
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    job_id = events[0]["job_id"]
    assert (work / "out.txt").read_text() == "ran\n"  # ran on the host, in its folder
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    there = sides.host_state()
    assert here.registry.get(job_id).status is JobState.COMPLETED
    assert here.registry.get(job_id).host == "h1"
    retry_until(lambda: there.registry.get(job_id).status is JobState.COMPLETED, timeout=30)
    received = [e["event"] for e in here.audit.read_events(job_id, "received")]
    published = [e["event"] for e in there.audit.read_events(job_id, "published")]
    assert received == published == ["started", "progress", "completed"]
    assert any(a["kind"] == "assigned" and a["job_id"] == job_id for a in sides.host_audit())
    token = here.registry.get(job_id).auth_token
    assert token == there.registry.get(job_id).auth_token  # derived on both sides
    time.sleep(0.3)
    tap.close()
    topics = {t for t, _ in tap.payloads}
    assert "delegate/hosts/h1/assign" in topics and f"delegate/jobs/{job_id}/events" in topics
    assert not any(token.encode() in p or sides.key.encode() in p for _, p in tap.payloads)
    ps = json_lines(run_cli(sides.home, "ps", "--json", env=sides.env).stdout)
    assert [r.get("host") for r in ps if r["job_id"] == job_id] == ["h1"]


def _publish(port: int, topic: str, payload: bytes) -> None:
    import paho.mqtt.publish as publish

    publish.single(topic, payload, qos=1, hostname="127.0.0.1", port=port)


def test_forged_and_replayed_assignments_are_refused_and_audited(
    sides: Sides, broker, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    key = bytes.fromhex(sides.key)
    forged = signed_assignment(os.urandom(32), "h1", "r-forged", work)
    _publish(broker.port, "delegate/hosts/h1/assign", forged)
    good = signed_assignment(key, "h1", "r-good", work)
    stale = signed_assignment(
        key, "h1", "r-old", work, issued_ms=int(time.time() * 1000) - 3_600_000
    )
    _publish(broker.port, "delegate/hosts/h1/assign", stale)
    _publish(broker.port, "delegate/hosts/h1/assign", good)
    there = sides.host_state()
    retry_until(lambda: there.registry.exists("0badf00d"), timeout=30)
    _publish(broker.port, "delegate/hosts/h1/assign", good)  # the same message again
    retry_until(
        lambda: (
            [a.get("reason") for a in sides.host_audit() if a["kind"] == "refused"]
            == ["bad_signature", "stale", "replayed"]
        ),
        timeout=30,
    )
    assert len(there.registry.list()) == 1  # only the genuine one exists
    retry_until(lambda: (work / "pwned.txt").exists(), timeout=30)  # and it ran, once


def test_cancel_of_a_remote_job_kills_its_tree_on_the_host(sides: Sides, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    submitted = sides.submit("sleep 300 & echo $! > child.pid; sleep 300", "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    there = sides.host_state()
    retry_until(
        lambda: (
            there.registry.exists(job_id)
            and there.registry.get(job_id).status is JobState.RUNNING
            and (work / "child.pid").exists()
        ),
        timeout=60,
    )
    child = int((work / "child.pid").read_text())
    # the host answers what runs there through its presence
    reported = retry_until(
        lambda: (
            json_lines(run_cli(sides.home, "ps", "--host", "h1", "--json", env=sides.env).stdout)
            or None
        ),
        timeout=30,
    )
    assert [(r["job_id"], r["status"], r["host"]) for r in reported] == [(job_id, "running", "h1")]
    cancelled = run_cli(sides.home, "cancel", job_id, env=sides.env)
    assert cancelled.returncode == 0, cancelled.stderr
    retry_until(lambda: there.registry.get(job_id).status is JobState.CANCELLED, timeout=30)

    def gone(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    retry_until(lambda: gone(child), timeout=30)
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    assert here.registry.get(job_id).status is JobState.CANCELLED


def test_a_host_that_dies_fails_its_jobs_host_lost(sides: Sides, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    submitted = sides.submit("sleep 300", "--no-wait")
    job_id = submitted.stdout.strip()
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    retry_until(lambda: here.registry.get(job_id).status is JobState.RUNNING, timeout=60)
    # the machine goes away: its host service and everything it started, at once
    assert sides.server is not None
    sides.server.send_signal(signal.SIGKILL)
    sides.server.wait(timeout=10)
    kill_processes_of(sides.host_home)
    ended = retry_until(
        lambda: (job := here.registry.get(job_id)).status.terminal and job, timeout=60
    )
    assert ended.status is JobState.ERROR and ended.error == "host_lost"
    # the audit line follows the transition by a moment
    evidence = retry_until(lambda: here.audit.read_events(job_id, "reconciled"), timeout=10)
    assert evidence[0]["evidence"]["host"] == "h1"


# `delegate submit --host h1`, its process killed outright just as it would send the assignment
SUBMIT_DIES_BEFORE_SENDING = """
import os, sys
from delegate.services import remote as hosts
hosts.assign = lambda *args, **kwargs: os._exit(9)
from delegate.__main__ import main
sys.argv = ["delegate", *sys.argv[1:]]
sys.exit(main())
"""


def test_a_remote_job_whose_submit_died_before_assigning_it_is_assigned_by_the_monitor(
    sides: Sides, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    submit = ["submit", "--host", "h1", "--agent", "shell", "--no-wait"]
    died = subprocess.run(
        [sys.executable, "-c", SUBMIT_DIES_BEFORE_SENDING, *submit, "--prompt", "echo late"],
        env=sides.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert died.returncode == 9, died.stderr
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    (job,) = here.registry.list()
    # the state dir's supervisor (the submit started it before it died) launches it: the
    # launch its launcher never made, on the supervisor's own pass
    launched = retry_until(
        lambda: [
            e for e in here.audit.read_events(job.job_id, "reconciled")
            if e["action"] == "launch_job"
        ],
        timeout=30,
    )  # fmt: skip
    assert len(launched) == 1 and launched[0]["evidence"]["host"] == "h1"
    # sent once, by the supervisor; the host runs it and its outcome comes back
    assert len(here.audit.read_events(job.job_id, "assigned")) == 1
    ended = retry_until(
        lambda: (j := here.registry.get(job.job_id)).status.terminal and j, timeout=60
    )
    assert ended.status is JobState.COMPLETED
    assert [e["event"] for e in here.audit.read_events(job.job_id, "received")] == [
        "started",
        "completed",
    ]


def test_an_assignment_the_host_never_starts_does_not_keep_the_job_open(
    sides: Sides, tmp_path: Path
):
    """The host is up but refuses the assignment (it was given the wrong key): the job is
    measured from its assignment like a local job from its launch, and ends idle_timeout."""
    work = tmp_path / "work"
    work.mkdir()
    sides.key_file.write_text(os.urandom(32).hex() + "\n")
    sides.serve(work)
    submitted = sides.submit("echo never > out.txt", "--no-wait", "--idle-timeout", "2")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    retry_until(
        lambda: (
            [a.get("reason") for a in sides.host_audit() if a["kind"] == "refused"]
            == ["bad_signature"]
        ),
        timeout=30,
    )
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    assert here.registry.get(job_id).status is JobState.PENDING

    def ended_by_a_pass():
        run_cli(sides.home, "monitor", "--once", env=sides.env, timeout=60)
        job = here.registry.get(job_id)
        return job.status.terminal and job

    ended = retry_until(ended_by_a_pass, timeout=30, interval=0.5)
    assert ended.status is JobState.ERROR and ended.error == "idle_timeout"
    assert not (work / "out.txt").exists()


def test_host_commands_refuse_bad_input(sides: Sides, tmp_path: Path):
    for args in (
        ["host", "add", "bad name"],
        ["host", "add", "h1"],  # exists
        ["submit", "--host", "nowhere", "--agent", "shell", "--prompt", "x"],
        ["host", "serve", "--name", "h1", "--key-file", str(tmp_path / "missing")],
    ):
        result = run_cli(sides.home, *args, env={"DELEGATE_BUS": sides.env["DELEGATE_BUS"]})
        assert result.returncode != 0, args
        assert_one_line_error(result)
    loose = tmp_path / "loose.key"
    loose.write_text(sides.key)
    loose.chmod(0o644)
    refused = run_cli(sides.home, "host", "serve", "--name", "h1", "--key-file", str(loose))
    assert refused.returncode == 64 and "chmod 600" in refused.stderr
    prompt = tmp_path / "big.txt"
    prompt.write_text("x" * (hostproto.MAX_ASSIGNMENT + 1))
    big = run_cli(
        sides.home,
        "submit",
        "--host",
        "h1",
        "--agent",
        "shell",
        "--prompt-file",
        str(prompt),
        env={"DELEGATE_BUS": sides.env["DELEGATE_BUS"]},
    )
    assert big.returncode == 64 and "over the" in big.stderr
    assert_one_line_error(big)
    sqlite = run_cli(sides.home, "submit", "--host", "h1", "--agent", "shell", "--prompt", "x")
    assert sqlite.returncode == 64 and "MQTT broker" in sqlite.stderr


def test_the_host_unit_and_acl_name_real_options():
    root = Path(__file__).resolve().parent.parent / "examples"
    unit = (root / "systemd" / "delegate-host.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    args = exec_start.split("=", 1)[1].split()
    assert args[1:3] == ["host", "serve"]
    shown = subprocess.run(
        delegate_cmd("host", "serve", "--help"),
        capture_output=True,
        text=True,
    ).stdout
    for option in (a for a in args if a.startswith("--")):
        assert option in shown, option
    acl = (root / "mosquitto" / "acl").read_text()
    assert "topic read delegate/hosts/build-1/assign" in acl
    assert "topic write delegate/hosts/+/assign" in acl


def test_outcomes_a_lost_host_brings_back_are_audited_late_and_change_nothing(
    sides: Sides, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    with sides.monitoring():
        submitted = sides.submit(
            f"while [ ! -e {tmp_path / 'go'} ]; do sleep 0.1; done;"
            ' delegate publish --event progress --detail "while away"',
            "--no-wait",
        )
        job_id = submitted.stdout.strip()
        here = State.open(env={"DELEGATE_HOME": str(sides.home)})
        there = sides.host_state()
        retry_until(lambda: here.registry.get(job_id).status is JobState.RUNNING, timeout=60)
        assert sides.server is not None
        sides.server.send_signal(signal.SIGSTOP)  # the host goes quiet; its agent runs on
        ended = retry_until(
            lambda: (j := here.registry.get(job_id)).status.terminal and j, timeout=60
        )
        assert ended.error == "host_lost"
        (tmp_path / "go").touch()
        retry_until(lambda: there.registry.get(job_id).status is JobState.COMPLETED, timeout=60)
        sides.server.send_signal(signal.SIGCONT)  # back, with what its agent said meanwhile
        late = retry_until(
            lambda: (
                [(e["event"], e["seq"]) for e in here.audit.read_events(job_id, "late_event")]
                if len(here.audit.read_events(job_id, "late_event")) >= 2
                else None
            ),
            timeout=60,
        )
        assert late == [("progress", 2), ("completed", 3)]
        assert here.registry.get(job_id).status is JobState.ERROR  # a terminal state stays
        logs = run_cli(sides.home, "logs", job_id, env=sides.env)
        assert "late_event" in logs.stdout


def test_a_cron_entry_can_name_a_host_and_a_never_assigned_window_is_assigned(
    sides: Sides, tmp_path: Path
):
    from datetime import UTC, datetime

    from delegate.core import hostproto
    from delegate.services import cron
    from delegate.services.jobs.register import register_job

    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    (tmp_path / "task.sh").write_text("echo nightly >> nightly.txt\n")
    job_file = tmp_path / "nightly.toml"
    job_file.write_text('agent = "shell"\nprompt_file = "task.sh"\nhost = "h1"\n')
    state = State.open(env=sides.env)
    cron.add(
        state,
        "0 2 * * *",
        job_file,
        crontab=cron.Crontab(file=tmp_path / "tab"),
        now=datetime(2026, 11, 20, tzinfo=UTC),
    )
    first = cron.run(state, "nightly", now=datetime(2026, 11, 21, 2, 0, 5, tzinfo=UTC))
    assert first.created and state.registry.get(first.job_id).host == "h1"
    retry_until(lambda: state.registry.get(first.job_id).status is JobState.COMPLETED, timeout=60)
    # the next night's run crashed between registering its job and assigning it
    key = bytes.fromhex(sides.key)
    crashed, _ = register_job(
        state,
        agent="shell",
        idempotency_key="nightly-20261122T0200Z",
        host="h1",
        token_for=lambda j: hostproto.job_token(key, j),
    )
    second = cron.run(state, "nightly", now=datetime(2026, 11, 22, 2, 0, 5, tzinfo=UTC))
    # launched by this run or by the state dir's supervisor, whichever claimed it first (a
    # claim only one process can make; `launched` says whether it was this run): either way
    # it is assigned, and runs once (below)
    assert second.job_id == crashed.job_id and not second.created
    retry_until(lambda: sides.host_state().registry.exists(crashed.job_id), timeout=30)
    retry_until(
        lambda: (
            (work / "nightly.txt").exists()
            and (work / "nightly.txt").read_text() == "nightly\nnightly\n"
        ),
        timeout=60,
    )


@pytest.mark.parametrize("sides", [60], indirect=True)  # down for a moment, not lost
def test_an_assignment_sent_while_the_host_is_down_runs_when_it_is_back(
    sides: Sides, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)  # its persistent session now exists on the broker
    assert sides.server is not None
    sides.server.send_signal(signal.SIGTERM)
    assert sides.server.wait(timeout=20) == 0
    submitted = sides.submit("echo queued > queued.txt", "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    time.sleep(0.5)
    assert not sides.host_state().registry.exists(job_id)  # nobody there to take it yet
    sides.serve(work)  # back: the broker delivers what waited in its session
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    retry_until(lambda: here.registry.get(job_id).status is JobState.COMPLETED, timeout=60)
    assert (work / "queued.txt").read_text() == "queued\n"


def test_host_remove_is_refused_while_jobs_run_and_re_adding_rotates_the_key(
    sides: Sides, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    submitted = sides.submit("sleep 300", "--no-wait")
    job_id = submitted.stdout.strip()
    busy = run_cli(sides.home, "host", "remove", "h1", env=sides.env)
    assert busy.returncode == 64 and job_id in busy.stderr
    assert_one_line_error(busy)
    assert run_cli(sides.home, "cancel", job_id, env=sides.env).returncode == 0
    assert run_cli(sides.home, "host", "remove", "h1", env=sides.env).returncode == 0
    assert json_lines(run_cli(sides.home, "host", "list", "--json", env=sides.env).stdout) == []
    again = run_cli(sides.home, "host", "add", "h1", env=sides.env)
    assert again.returncode == 0 and again.stdout.strip() != sides.key  # a new key
    # the host still serves with the old key: what the delegator signs now is refused there
    late = sides.submit("echo never > never.txt", "--no-wait")
    assert late.returncode == 0, late.stderr
    retry_until(
        lambda: (
            "bad_signature"
            in [a.get("reason") for a in sides.host_audit() if a["kind"] == "refused"]
        ),
        timeout=30,
    )
    assert not (work / "never.txt").exists()
    assert_one_line_error(run_cli(sides.home, "host", "remove", "nowhere", env=sides.env))


def test_a_host_forgets_what_can_no_longer_matter_when_it_starts(sides: Sides, tmp_path: Path):
    """Request ids outside twice the time window (a replay of one is refused as stale anyway)
    and jobs that ended a week ago are dropped; what could still matter is kept."""
    from delegate.runtime.host_server import HostServer

    there = State.open(env=sides.host_env)
    there.registry.register(agent="shell", job_id="0000aaaa")  # still open
    ended, _ = there.registry.register(agent="shell", job_id="0000bbbb")
    there.registry.transition(ended.job_id, JobState.RUNNING)
    end_job(there, ended.job_id, JobState.COMPLETED)
    later = int(time.time() * 1000) + 8 * 86_400_000  # the service starts 8 days on
    server = HostServer(
        there, "h1", bytes.fromhex(sides.key), workdir=tmp_path, now_ms=lambda: later
    )
    window = hostproto.WINDOW_MS
    server.seen_path.write_text(
        f"r-recent {later - window}\nr-old {later - 3 * window}\nr-v1-line\n"
    )
    server.jobs_path.write_text("0000aaaa\n0000bbbb\n0000cccc\n0000aaaa\n")

    server.compact_memory()

    assert server.seen_requests() == {"r-recent", "r-v1-line"}
    assert server.seen_path.read_text().splitlines()[1] == f"r-v1-line {later}"
    assert server.assigned_jobs() == {"0000aaaa"}
    assert server.jobs_path.read_text() == "0000aaaa\n"
    # a replay of a remembered request is still refused
    replay = signed_assignment(bytes.fromhex(sides.key), "h1", "r-recent", tmp_path)
    server.now_ms = lambda: int(time.time() * 1000)
    server.handle("assign", replay)
    assert [a["reason"] for a in sides.host_audit() if a["kind"] == "refused"] == ["replayed"]


def test_on_event_runs_here_for_a_job_on_a_host(sides: Sides, tmp_path: Path):
    """The delegator hears the events, so it runs the job's --on-event command, once each."""
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    heard = tmp_path / "heard.ndjson"
    notifier = tmp_path / "notify.sh"
    notifier.write_text(f'#!/bin/sh\ncat >> "{heard}"\necho >> "{heard}"\n')
    notifier.chmod(0o755)
    result = sides.submit(
        'delegate publish --event permission_required --detail "may I?"',
        "--wait",
        "--on-event",
        f"{notifier} --flag",
    )
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[0]["job_id"]
    retry_until(lambda: heard.exists() and len(json_lines(heard.read_text())) >= 2, timeout=30)
    events = json_lines(heard.read_text())
    assert [(e["event"], e["job_id"]) for e in events] == [
        ("permission_required", job_id),
        ("completed", job_id),
    ]
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    notified = here.audit.read_events(job_id, kind="notified")
    assert [(n["event"], n["argv"]) for n in notified] == [
        ("permission_required", [str(notifier), "--flag"]),
        ("completed", [str(notifier), "--flag"]),
    ]


def test_a_job_the_host_cannot_launch_ends_at_once_with_the_hosts_reason(
    sides: Sides, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    started = time.monotonic()
    result = subprocess.run(
        delegate_cmd("submit", "--host", "h1", "--agent", "nosuch", "--wait", "--prompt", "hi"),
        env=sides.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["error"]
    assert "host h1 could not launch it" in events[0]["detail"]
    assert "nosuch" in events[0]["detail"]
    assert time.monotonic() - started < 60  # not after an idle timeout
    job_id = events[0]["job_id"]
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    assert here.registry.get(job_id).status is JobState.ERROR
    refused = [a for a in sides.host_audit() if a["kind"] == "refused"]
    assert [(a["reason"], a["job_id"]) for a in refused] == [("launch_failed", job_id)]


@pytest.mark.parametrize("cap", ["the host's delegate.toml", "submit --max-running"])
def test_a_job_queued_on_its_host_waits_there_under_no_deadline(
    sides: Sides, tmp_path: Path, cap: str
):
    """A cap queues the second job on the host (its own delegate.toml, or `--max-running`,
    which counts on that host); the delegator sees it queued in the host's presence and does
    not fail it for idling, however long the slot takes to free."""
    work = tmp_path / "work"
    work.mkdir()
    flags: tuple[str, ...] = ()
    if cap == "submit --max-running":
        flags = ("--max-running", "1")
    else:
        sides.host_home.mkdir(parents=True, exist_ok=True)
        (sides.host_home / "delegate.toml").write_text("max_running = 1\n")
    sides.serve(work)
    with sides.monitoring():
        first = sides.submit("while [ ! -e go ]; do sleep 0.1; done", "--no-wait").stdout.strip()
        here = State.open(env={"DELEGATE_HOME": str(sides.home)})
        retry_until(lambda: here.registry.get(first).status is JobState.RUNNING, timeout=60)
        second = sides.submit(
            "echo second > second.txt", "--no-wait", "--idle-timeout", "2", *flags
        ).stdout.strip()

        def queued_there() -> bool:
            said = (HostBook(here).presence("h1") or {}).get("jobs") or []
            return {"job_id": second, "status": "queued"}.items() <= next(
                (e.items() for e in said if e["job_id"] == second), {}.items()
            )

        retry_until(queued_there, timeout=30)
        time.sleep(3)  # past its idle timeout, counted from the assignment
        assert here.registry.get(second).status is JobState.PENDING
        (work / "go").touch()
        for job_id in (first, second):
            retry_until(lambda j=job_id: here.registry.get(j).status.terminal, timeout=60)
            assert here.registry.get(job_id).status is JobState.COMPLETED
        assert (work / "second.txt").read_text() == "second\n"


def test_waiting_on_an_offline_host_says_so_once_and_what_comes_next(sides: Sides, tmp_path: Path):
    # h1 is added but never served: no presence on the broker, lost after 4 s (the fixture)
    waited = sides.submit("echo never", "--wait")
    assert waited.returncode == 1, waited.stderr
    said = [line for line in waited.stderr.splitlines() if " is offline " in line]
    assert len(said) == 1, waited.stderr
    assert "host h1 is offline (never heard from)" in said[0]
    assert "ends host_lost if it stays silent for 4s" in said[0]
    assert "its agent host stopped answering (host_lost)" in waited.stderr


def test_a_worktree_job_on_a_host_gets_its_worktree_there(sides: Sides, tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    sides.serve(repo)
    result = sides.submit("echo two > a.txt", "--wait", "--worktree")
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[0]["job_id"]
    there = sides.host_state().registry.get(job_id)
    assert there.worktree is not None and there.worktree["branch"] == f"delegate/{job_id}"
    path = Path(there.worktree["path"])
    assert path.is_relative_to(sides.host_home / "worktrees")  # made on the host, in its state
    assert (path / "a.txt").read_text() == "two\n"
    assert (repo / "a.txt").read_text() == "one\n"  # the host's checkout is untouched
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    assert (
        status.stdout == ""
        and head
        == subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    )


def test_a_broker_out_of_hearing_is_no_evidence_against_a_host(
    sides: Sides, broker, tmp_path: Path
):
    """The broker stopped for longer than the host's lost_after (4 s) while a monitor runs:
    nothing is judged while it cannot be heard, and the job ends with its agent's own outcome."""
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    go = work / "go"
    submitted = sides.submit(f"while [ ! -e {go} ]; do sleep 0.1; done", "--no-wait", "--json")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["job_id"]
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    retry_until(lambda: here.registry.get(job_id).status is JobState.RUNNING, timeout=30)
    with sides.monitoring():
        retry_until(lambda: (sides.home / "hosts" / ".listening").exists(), timeout=30)
        broker.stop()
        try:
            retry_until(lambda: here.audit.read_events(job_id, kind="unseen"), timeout=30)
            time.sleep(6)  # longer than lost_after: the host is silent, but unheard
            assert here.registry.get(job_id).status is JobState.RUNNING
        finally:
            broker.start()
        retry_until(lambda: here.audit.read_events(job_id, kind="seen_again"), timeout=30)
        go.touch()
        retry_until(lambda: here.registry.get(job_id).status.terminal, timeout=60)
    assert here.registry.get(job_id).status is JobState.COMPLETED
    [unseen] = here.audit.read_events(job_id, kind="unseen")
    assert unseen["what"] == "broker"


# Fails the first time it runs in its folder (the host's), then succeeds.
FAILS_ONCE = 'n=$(cat runs 2>/dev/null || echo 0); n=$((n + 1)); echo $n > runs; [ "$n" -ge 2 ]'


def test_a_retry_of_a_job_on_a_host_waits_out_its_backoff_then_is_assigned(
    sides: Sides, tmp_path: Path
):
    """The second attempt waits `queued` here until its `not_before` (2 s less up to a quarter
    of jitter), is assigned to the host only then (both sides' audits say when), runs in the
    host's folder with the prompt the first was given, and completes."""
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    backoff = ("--retries", "1", "--retry-on", "error", "--backoff", "2s..2s")
    result = sides.submit(FAILS_ONCE, *backoff, "--wait")
    assert result.returncode == 0, result.stderr  # the final attempt's outcome
    assert (work / "runs").read_text().strip() == "2"  # both ran there, in the host's folder
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    first = next(j for j in here.registry.list() if j.retry_of is None)
    second = here.registry.get(first.retried_by or "")
    assert first.status is JobState.ERROR
    assert (first.error or "").startswith("agent_error: agent exited with status 1")
    assert (second.status, second.attempt, second.host) == (JobState.COMPLETED, 2, "h1")
    ended, due = parse_timestamp(first.updated_at), parse_timestamp(second.not_before or "")
    # 2 s less up to a quarter, counted from when its follower made it (a moment after the end)
    assert 1.4 <= (due - ended).total_seconds() <= 3.5
    moves = [
        (e["previous"], e["status"])
        for e in here.audit.read_events(second.job_id, "status_changed")
    ]
    assert moves[:3] == [("pending", "queued"), ("queued", "pending"), ("pending", "running")]
    (sent_here,) = here.audit.read_events(second.job_id, "assigned")
    (sent_there,) = [
        a for a in sides.host_audit() if a["kind"] == "assigned" and a["job_id"] == second.job_id
    ]
    assert parse_timestamp(sent_here["ts"]) >= due
    assert parse_timestamp(sent_there["ts"]) >= due
    # sent: judged from its assignment, and no claimer that saw it queued takes it again
    assert here.registry.get(second.job_id).launcher == SENT_TO_HOST
