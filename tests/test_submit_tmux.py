"""`delegate submit` against a real tmux server on an isolated socket."""

from __future__ import annotations

import json
import os
import pty
import random
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.adapters.publish_socket import socket_path
from delegate.adapters.sessions_db import SessionInventory
from delegate.adapters.tmux import Tmux, alive
from delegate.core.model import JobState, SessionState
from delegate.services.state import State

from .helpers import (
    assert_one_line_error,
    cli_env,
    delegate_cmd,
    json_lines,
    read_pids,
    retry_until,
    run_cli,
    submit_shell,
    with_wait,
)
from .tmux_fixtures import kill_processes_of

ROOT = Path(__file__).resolve().parent.parent


def open_state(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


def publish_socket_of(home: Path, job_id: str) -> Path:
    """Where job `job_id`'s wrapper serves publishes: its log folder, or a private temp folder
    when that path is too long for a Unix socket (a deep tmp_path: pytest-xdist's adds
    `popen-gwN/`)."""
    path = socket_path(home / "logs" / job_id, job_id)
    assert path is not None
    return path


def submit(home: Path, env: dict[str, str], *args: str, timeout: float = 120):
    return run_cli(home, "submit", *with_wait(args), *args, env=env, timeout=timeout)


def job_of(result) -> str:
    return json_lines(result.stdout)[0]["job_id"]


def test_a_shell_job_that_succeeds(home: Path, tmux_env, tmp_path: Path):
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        "echo made > out.txt",
        "--wait",
        "--idle-timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "completed"]
    assert (tmp_path / "out.txt").read_text() == "made\n"
    state = open_state(home)
    job = state.registry.get(events[0]["job_id"])
    assert job.status is JobState.COMPLETED
    assert (state.audit.job_dir(job.job_id) / "agent.log").exists()
    session = SessionInventory(state.layout.sessions_db).get(job.session)
    assert session is not None and session.state is SessionState.STOPPED


def test_a_shell_job_that_exits_3(home: Path, tmux_env, tmp_path: Path):
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        "echo failing; exit 3",
        "--idle-timeout",
        "30",
    )
    assert result.returncode == 1, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == ["started", "error"]
    assert "status 3" in events[-1]["detail"] and events[-1]["data"]["exit_status"] == 3
    job = open_state(home).registry.get(job_of(result))
    assert job.status is JobState.ERROR and "status 3" in (job.error or "")
    log = (home / "logs" / job.job_id / "agent.log").read_text()
    assert "failing" in log


HANG = """
echo $$ > "{pids}"
sleep 300 &
echo $! >> "{pids}"
sh -c 'sleep 300 & echo $! >> "{pids}"; wait' &
echo $! >> "{pids}"
wait
"""


def test_a_hanging_job_times_out_and_leaves_no_process(home: Path, tmux_env, tmp_path: Path):
    pids_file = tmp_path / "pids"
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        HANG.format(pids=pids_file),
        "--idle-timeout",
        "2",
    )
    assert result.returncode == 2, result.stderr
    pids = read_pids(pids_file)
    assert len(pids) == 4, pids  # the script, a sleep, a nested shell and its sleep
    state = open_state(home)
    job = state.registry.get(job_of(result))
    assert job.status is JobState.ERROR and job.error == "idle_timeout"
    session = SessionInventory(state.layout.sessions_db).get(job.session)
    assert session is not None and session.pane_pid
    for pid in [*pids, session.pane_pid]:  # the pane's process is the wrapper
        assert not alive(pid), pid
    assert session is not None and session.state is SessionState.TERMINATED
    assert Tmux(tmux_env["DELEGATE_TMUX_SOCKET"]).panes() == []


def test_an_agent_that_reports_itself(home: Path, tmux_env, tmp_path: Path):
    files = []
    for i in range(3):
        path = tmp_path / f"f{i}.txt"
        path.write_text("one two three\n" * (i + 1))
        files.append(str(path))
    agent = ROOT / "examples" / "agents" / "word-count.sh"
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        f'exec "{agent}" ' + " ".join(files),
        "--idle-timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr
    events = json_lines(result.stdout)
    assert [e["event"] for e in events] == [
        "started",
        "progress",
        "progress",
        "progress",
        "completed",
    ]
    assert [e["seq"] for e in events] == [1, 2, 3, 4, 5]
    assert events[-1]["data"]["total_words"] == 18
    assert events[-1]["detail"] == "18 words in 3 file(s)"  # its own report, not the wrapper's
    published = open_state(home).audit.read_events(events[0]["job_id"], kind="published")
    terminal = [e for e in published if e["event"] in ("completed", "error")]
    assert len(terminal) == 1


TRICKY = (
    "quotes ' \" and $(touch pwned-subst) and `touch pwned-backtick` ; touch pwned-semi\n"
    "$HOME ${PATH} \\n \\\\ %s {prompt_file} \t tab\n"
)


@pytest.mark.parametrize("mode", ["stdin", "file"])
def test_a_prompt_reaches_the_agent_byte_for_byte(home: Path, tmux_env, tmp_path: Path, mode):
    rng = random.Random(5)
    filler = "".join(rng.choice("abc xyz$`'\"\\\n(){}|&;<>*?!#~") for _ in range(100_000))
    prompt = (TRICKY + filler + "\nend").encode()
    (tmp_path / "prompt.txt").write_bytes(prompt)
    work = tmp_path / "work"
    work.mkdir()
    if mode == "stdin":
        args = ["--cmd", "cat > received.bin"]
    else:
        (home).mkdir(parents=True, exist_ok=True)
        (home / "delegate.toml").write_text(
            textwrap.dedent("""
            [profiles.copier]
            command = ["cp", "{prompt_file}", "received.bin"]
            prompt = "file"
            preamble = false
        """)
        )
        args = ["--agent", "copier"]
    result = submit(
        home,
        tmux_env,
        *args,
        "--workdir",
        str(work),
        "--prompt-file",
        str(tmp_path / "prompt.txt"),
        "--idle-timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr
    assert (work / "received.bin").read_bytes() == prompt
    assert sorted(p.name for p in work.iterdir()) == ["received.bin"]  # nothing ran
    assert not list(tmp_path.glob("pwned*"))


def test_the_prompt_can_come_from_stdin(home: Path, tmux_env, tmp_path: Path):
    result = run_cli(
        home,
        "submit",
        "--wait",
        "--cmd",
        "cat > got.txt",
        "--prompt",
        "-",
        "--workdir",
        str(tmp_path),
        env=tmux_env,
        input="from stdin $(no)\n",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "got.txt").read_text() == "from stdin $(no)\n"


def test_ai_profiles_get_the_reporting_preamble(home: Path, tmux_env, tmp_path: Path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[profiles.fake-ai]\ncommand = ["sh", "-c", "cat > seen.txt"]\npreamble = true\n'
    )
    result = submit(
        home, tmux_env, "--agent", "fake-ai", "--prompt", "Fix the bug.", "--workdir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    seen = (tmp_path / "seen.txt").read_text()
    assert "delegate publish --event completed" in seen
    assert seen.endswith("Fix the bug.") and not seen.startswith("---")


def test_cancel_kills_the_agent_and_its_children(home: Path, tmux_env, tmp_path: Path):
    pids_file = tmp_path / "pids"
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        HANG.format(pids=pids_file),
        "--no-wait",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["job_id"]
    pids = retry_until(lambda: len(read_pids(pids_file)) == 4 and read_pids(pids_file), timeout=30)
    state = open_state(home)
    assert state.registry.get(job_id).status is JobState.RUNNING
    pane_pid = SessionInventory(state.layout.sessions_db).get(f"dlg-{job_id}").pane_pid
    cancelled = run_cli(home, "cancel", job_id, env=tmux_env)
    assert cancelled.returncode == 0, cancelled.stderr
    for pid in [*pids, pane_pid]:
        assert not alive(pid), pid
    assert state.registry.get(job_id).status is JobState.CANCELLED
    session = SessionInventory(state.layout.sessions_db).get(f"dlg-{job_id}")
    assert session is not None and session.state is SessionState.TERMINATED
    assert Tmux(tmux_env["DELEGATE_TMUX_SOCKET"]).panes() == []
    history = [h.state for h in SessionInventory(state.layout.sessions_db).history(f"dlg-{job_id}")]
    assert history == ["running", "terminated"]


def test_twenty_jobs_at_once_all_complete_and_the_books_agree(home: Path, tmux_env, tmp_path: Path):
    env = cli_env(home, tmux_env)
    procs = [
        subprocess.Popen(
            delegate_cmd(
                "submit",
                "--agent",
                "shell",
                "--no-wait",
                "--workdir",
                str(tmp_path),
                "--prompt",
                f'delegate publish --event progress --detail "job {i}"',
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(20)
    ]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    assert len(set(ids)) == 20
    state = open_state(home)
    sessions = SessionInventory(state.layout.sessions_db)

    unsettled: dict[str, tuple[str, str | None]] = {}

    def all_settled() -> bool:
        unsettled.clear()
        for j in ids:
            job, recorded = state.registry.get(j), sessions.get(f"dlg-{j}")
            session_state = recorded.state if recorded is not None else None
            if job.status is not JobState.COMPLETED or session_state is not SessionState.STOPPED:
                unsettled[j] = (job.status.value, session_state and session_state.value)
        return not unsettled

    try:
        retry_until(all_settled, timeout=120, interval=0.1)
    except AssertionError:
        for j in unsettled:
            print(j, unsettled[j], state.audit.events_path(j).read_text()[-3000:])
        raise AssertionError(f"jobs not settled (job state, session state): {unsettled}") from None
    tmux = Tmux(tmux_env["DELEGATE_TMUX_SOCKET"])
    # A job completes a moment before its wrapper process exits: wait for every pane to die.
    panes = retry_until(
        lambda: (
            (found := {p.session: p for p in tmux.panes()})
            and all(p.dead for p in found.values())
            and found
        ),
        timeout=30,
    )
    for job_id in ids:
        pane = panes[f"dlg-{job_id}"]
        # tmux 3.3 now and then shows a dead pane without its status; never a non-zero one.
        assert pane.job_id == job_id and pane.dead and pane.exit_status in (0, None)
        assert not alive(pane.pid)
        events = state.audit.read_events(job_id, kind="published")
        assert [e["event"] for e in events] == ["started", "progress", "completed"]
        # the state dir's one supervisor received each, once
        received = state.audit.read_events(job_id, kind="received")
        assert [e["event"] for e in received] == ["started", "progress", "completed"]
    assert set(panes) == {f"dlg-{j}" for j in ids}
    ps = json_lines(run_cli(home, "ps", "--json", "--limit", "20", env=tmux_env).stdout)
    assert len(ps) == 20
    assert len(json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)) == 10
    books = {r["job_id"]: (r["job_state"], r["session_state"]) for r in ps}
    assert books == {j: ("completed", "stopped") for j in ids}
    assert {r["tmux"] for r in ps} <= {"exited 0", "exited ?"}  # ? only when tmux lost track


PICKER = """
import json, sys
from delegate.services.state import State
state = State.open()
got = []
while (job := state.registry.pick(sys.argv[1])) is not None:
    got.append(job.job_id)
print(json.dumps(got))
"""


def test_two_pickers_never_get_the_same_job(home: Path):
    state = open_state(home)
    ids = {state.registry.register()[0].job_id for _ in range(50)}
    env = cli_env(home)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PICKER, f"picker-{n}"],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    picked = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert not set(picked[0]) & set(picked[1])
    assert sorted(picked[0] + picked[1]) == sorted(ids)
    for job_id in ids:
        assert state.registry.get(job_id).status is JobState.RUNNING


def test_submit_from_a_job_file_and_idempotency(home: Path, tmux_env, tmp_path: Path):
    (tmp_path / "task.sh").write_text("echo nightly >> ran.txt\n")
    (tmp_path / "nightly.toml").write_text(
        textwrap.dedent("""
        agent = "shell"
        prompt_file = "task.sh"
        workdir = "."
        idle_timeout = 30
    """)
    )
    args = [
        "--from-file",
        str(tmp_path / "nightly.toml"),
        "--idempotency-key",
        "nightly-2026-11-22",
    ]
    first = submit(home, tmux_env, *args)
    second = submit(home, tmux_env, *args)
    assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
    assert job_of(first) == job_of(second)
    assert (tmp_path / "ran.txt").read_text() == "nightly\n"  # it ran once
    assert len(open_state(home).registry.list()) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["--agent", "shell"],
        ["--agent", "nope", "--prompt", "x"],
        ["--agent", "shell", "--cmd", "true", "--prompt", "x"],
        ["--cmd", "true", "--prompt", "x", "--workdir", "/definitely/not/here"],
        ["--cmd", "true", "--prompt", "x", "--session", "bad:name"],
        ["--cmd", "true", "--prompt-file", "/no/such/prompt"],
        ["--cmd", "true", "--prompt", "x", "--from-file", "/no/such.toml"],
    ],
    ids=[
        "no-prompt",
        "unknown-agent",
        "agent-and-cmd",
        "bad-workdir",
        "bad-session",
        "missing-prompt-file",
        "missing-job-file",
    ],
)
def test_bad_submit_input(home: Path, tmux_env, args):
    from .helpers import assert_one_line_error

    result = submit(home, tmux_env, *args)
    assert_one_line_error(result)
    assert open_state(home).registry.list() == []


SOCKET_AGENT = """
test -S "$DELEGATE_PUBLISH_SOCKET" && stat -c %a "$DELEGATE_PUBLISH_SOCKET" > socket-mode
delegate publish --event progress --data '{bad json' 2> bad.err; echo $? > bad.code
delegate publish --event started 2> again.err; echo $? > again.code
delegate publish --event progress --detail "served" --data '{"n": 1}' > ok.out
delegate publish --event completed --detail "done by the agent" > /dev/null
"""


def test_publishes_from_the_pane_are_served_by_the_wrapper(home: Path, tmux_env, tmp_path: Path):
    result = submit_shell(
        home,
        tmux_env,
        tmp_path,
        SOCKET_AGENT,
        "--idle-timeout",
        "30",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "socket-mode").read_text().strip() == "600"
    # errors come back as one line and the same exit codes as a direct publish
    assert (tmp_path / "bad.code").read_text().strip() == "64"
    assert "--data is not valid JSON" in (tmp_path / "bad.err").read_text()
    assert (tmp_path / "again.code").read_text().strip() == "67"
    assert "already started" in (tmp_path / "again.err").read_text()
    receipt = json.loads((tmp_path / "ok.out").read_text())
    assert receipt["event"] == "progress" and receipt["seq"] == 2
    events = json_lines(result.stdout)
    assert [(e["seq"], e["event"]) for e in events] == [
        (1, "started"),
        (2, "progress"),
        (3, "completed"),
    ]
    assert events[1]["data"] == {"n": 1, "hmac_sig": events[1]["data"]["hmac_sig"]}
    job_id = events[0]["job_id"]
    assert not publish_socket_of(home, job_id).exists()  # removed with the wrapper


def test_submit_waits_at_a_terminal_and_returns_at_once_without_one(
    home: Path, tmux_env, tmp_path: Path
):
    env = cli_env(home, tmux_env)
    gate = tmp_path / "gate"
    # the job cannot end before the test opens the gate: a returned submit did not wait
    prompt = (
        f"while [ ! -e {gate} ]; do sleep 0.05; done;"
        ' delegate publish --event progress --detail "through"'
    )
    piped = run_cli(
        home, "submit", "--agent", "shell", "--prompt", prompt, "--workdir", str(tmp_path), env=env
    )
    assert piped.returncode == 0, piped.stderr
    job_id = piped.stdout.strip()
    assert open_state(home).registry.get(job_id).status in (JobState.PENDING, JobState.RUNNING)
    gate.touch()
    retry_until(
        lambda: open_state(home).registry.get(job_id).status is JobState.COMPLETED, timeout=60
    )

    # stdout on a terminal: submit streams the job's events and exits with its outcome
    gate.unlink()
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        delegate_cmd("submit", "--agent", "shell", "--prompt", prompt, "--workdir", str(tmp_path)),
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.PIPE,
    )
    os.close(follower)
    seen = b""
    while b" started " not in seen:
        seen += os.read(leader, 4096)
    assert proc.poll() is None  # still following the job
    gate.touch()
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    assert proc.wait(timeout=60) == 0
    os.close(leader)
    # at a terminal: one readable line per event (`14:02:07  started  shell starting`)
    lines = seen.decode().replace("\r\n", "\n").splitlines()
    assert not any("{" in line for line in lines)
    assert [line.split()[1] for line in lines if line.strip()] == [
        "started",
        "progress",
        "completed",
    ]


# --- the detached supervisor's readiness -----------------------------------------------------


def test_a_supervisor_that_dies_before_it_is_ready_fails_the_submit_and_starts_nothing(
    home: Path, tmux_env, tmp_path: Path
):
    """On a broker the submit blocks on the supervisor's ready pipe; a supervisor that exits
    first (here: no broker listens) ends the pipe without its byte. The submit says so in one
    line with the supervisor's own reason, the job ends launch_failed, and nothing was started:
    no tmux session, no session row, no supervisor, no open job. A job on a broker of its own
    (`--bus`) finds it out before its agent starts, in the broker's words."""
    from .mqtt_fixtures import free_port

    bus = f"mqtt://127.0.0.1:{free_port()}"
    refused = submit_shell(
        home, {**tmux_env, "DELEGATE_BUS": bus}, tmp_path, "echo never", "--no-wait"
    )
    assert_one_line_error(refused)
    assert "exited before it listened: broker 127.0.0.1" in refused.stderr
    assert "refused the connection" in refused.stderr
    (job,) = open_state(home).registry.list()
    assert job.status is JobState.ERROR and job.error.startswith("launch_failed: ")
    own = submit_shell(home, tmux_env, tmp_path, "echo never", "--no-wait", "--bus", bus)
    assert_one_line_error(own)
    assert "broker 127.0.0.1" in own.stderr and "refused the connection" in own.stderr
    second = next(j for j in open_state(home).registry.list() if j.job_id != job.job_id)
    assert second.status is JobState.ERROR and second.error.startswith("launch_failed: ")
    assert f"job {job.job_id} ended launch_failed" in refused.stderr
    assert f"job {second.job_id} ended launch_failed" in own.stderr
    assert SessionInventory(open_state(home).layout.sessions_db).list() == []
    assert Tmux(tmux_env["DELEGATE_TMUX_SOCKET"]).panes(owned_only=False) == []
    listed = run_cli(home, "ps", "--json", "--limit", "0", env=tmux_env)
    assert listed.returncode == 0 and listed.stdout == ""


def test_on_a_broker_submit_returns_once_the_supervisor_said_it_is_ready(
    home: Path, tmux_env, tmp_path: Path, broker
):
    """The supervisor says who it is in its lock file, then writes its byte on the pipe: a
    submit --no-wait that returned has seen the byte, so it is there at once, and no event was
    missed."""
    from delegate.services.supervisor import running_supervisor

    env = {**tmux_env, "DELEGATE_BUS": broker.url}
    done = submit_shell(home, env, tmp_path, "echo hi", "--no-wait", "--json")
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["job_id"]
    state = open_state(home)
    supervisor = running_supervisor(state)  # no retry: it said so before submit could return
    assert supervisor is not None and alive(supervisor)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=60)
    assert state.registry.get(job_id).status is JobState.COMPLETED
    retry_until(lambda: len(state.audit.read_events(job_id, "received")) >= 2)  # (the supervisor)
    received = [e["event"] for e in state.audit.read_events(job_id, "received")]
    assert received[0] == "started" and received[-1] == "completed"


def test_on_sqlite_a_late_supervisor_loses_no_event_so_no_one_waits_for_it(home: Path):
    """Every event of an open job published before the supervisor starts reaches it: the
    SQLite bus keeps them. So the supervisor is started without a ready pipe, start returns at
    once, and it leaves a moment after the job's end (`DELEGATE_SUPERVISOR_QUIET_S`)."""
    from delegate.services.supervisor import ensure_supervisor

    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    for event in ("started", "progress"):
        published = run_cli(home, "publish", "--job", job_id, "--event", event)
        assert published.returncode == 0, published.stderr
    state = State.open(env={"DELEGATE_HOME": str(home), "DELEGATE_SUPERVISOR_QUIET_S": "0.2"})
    pid = ensure_supervisor(state)
    assert pid is not None and ensure_supervisor(state) is None  # one, never two
    assert "--ready-fd" not in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    retry_until(lambda: len(state.audit.read_events(job_id, "received")) == 2, timeout=30)
    assert run_cli(home, "publish", "--job", job_id, "--event", "completed").returncode == 0
    retry_until(lambda: len(state.audit.read_events(job_id, "received")) == 3, timeout=30)
    received = [e["event"] for e in state.audit.read_events(job_id, "received")]
    assert received == ["started", "progress", "completed"]
    retry_until(lambda: not alive(pid), timeout=30)  # no open job: it left


# Runs `delegate publish` in-process, then names which of the direct path's modules it loaded.
PUBLISH_AND_LIST_LOADED = """
import sys
from delegate.__main__ import main
code = main(sys.argv[1:])
heavy = ("delegate.adapters.registry", "delegate.adapters.bus", "delegate.services.state")
print("LOADED", [name for name in heavy if name in sys.modules], file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def short_home() -> Iterator[Path]:
    """A state dir whose log folders hold a Unix socket's path (under /tmp, as tmux_tmpdir):
    the wrapper serves in the job's log folder, however deep pytest's tmp_path is (pytest-xdist
    adds a folder). Its processes are killed afterwards, as tmux_env does for `home`'s."""
    home = Path(tempfile.mkdtemp(prefix="dls-", dir="/tmp")) / "state"
    yield home
    kill_processes_of(home)
    shutil.rmtree(home.parent, ignore_errors=True)


def _outside_publish_is_served(home: Path, tmux_env, tmp_path: Path) -> None:
    """`publish --job` from outside the pane reaches the job's wrapper (nothing heavy loaded
    here), and the wrapper's socket goes with it."""
    gate = tmp_path / "gate"
    script = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    submitted = submit_shell(home, tmux_env, tmp_path, script, "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    sock = publish_socket_of(home, job_id)
    retry_until(sock.exists, timeout=30)
    argv = ["publish", "--job", job_id, "--event", "progress", "--detail", "from outside"]
    served = subprocess.run(
        [sys.executable, "-c", PUBLISH_AND_LIST_LOADED, *argv],
        env=cli_env(home, tmux_env),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 0, served.stderr
    receipt = json.loads(served.stdout)
    assert receipt["job_id"] == job_id and receipt["event"] == "progress"
    assert "LOADED []" in served.stderr  # the wrapper published it: no registry, no bus here
    published = open_state(home).audit.read_events(job_id, kind="published")
    assert [e["envelope"]["detail"] for e in published if e["event"] == "progress"] == [
        "from outside"
    ]
    # a refusal comes back as one line with the direct path's exit code
    again = run_cli(home, "publish", "--job", job_id, "--event", "started", env=tmux_env)
    assert again.returncode == 67 and "already started" in again.stderr
    gate.touch()
    retry_until(lambda: open_state(home).registry.get(job_id).status.terminal, timeout=60)
    retry_until(lambda: not sock.exists(), timeout=30)  # removed with the wrapper


def test_a_publish_from_outside_the_pane_is_served_by_the_jobs_wrapper(
    short_home: Path, tmux_env, tmp_path: Path
):
    _outside_publish_is_served(short_home, tmux_env, tmp_path)


def test_a_publish_from_outside_finds_the_wrapper_of_a_deep_state_dir(tmux_env, tmp_path: Path):
    home = tmp_path / ("deep-" + "x" * 80) / "state"
    try:
        _outside_publish_is_served(home, tmux_env, tmp_path)
    finally:
        kill_processes_of(home)


def test_a_publish_finding_a_dead_wrappers_socket_publishes_itself(short_home: Path, tmux_env):
    home = short_home
    state = open_state(home)
    job, _ = state.registry.register(agent="shell", workdir=str(home), session="dlg-gone")
    stale = publish_socket_of(home, job.job_id)
    stale.parent.mkdir(parents=True, exist_ok=True)
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(stale))  # bound, never listening, then closed: as a killed wrapper
    result = run_cli(home, "publish", "--job", job.job_id, "--event", "started", env=tmux_env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["seq"] == 1
    assert state.registry.get(job.job_id).status is JobState.RUNNING


def test_a_session_name_taken_outside_delegate_is_reused_as_a_used_one(
    home: Path, tmux_env, tmp_path: Path
):
    # no job ever used the name, so submit starts it without asking tmux first; tmux says the
    # name is taken, and the job goes the way of a used name: the pane is respawned
    tmux = Tmux(tmux_env["DELEGATE_TMUX_SOCKET"], tmux_env)
    tmux.prepare()
    made = subprocess.run(
        ["tmux", "-S", tmux.socket_path, "new-session", "-d", "-s", "handmade", "sleep 300"],
        env={**os.environ, **tmux_env},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    result = submit_shell(
        home, tmux_env, tmp_path, "echo here > out.txt", "--session", "handmade", "--wait"
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out.txt").read_text() == "here\n"
    job = open_state(home).registry.get(json_lines(result.stdout)[0]["job_id"])
    assert job.status is JobState.COMPLETED and job.session == "handmade"
    row = SessionInventory(open_state(home).layout.sessions_db).get("handmade")
    assert row is not None and row.job_id == job.job_id
