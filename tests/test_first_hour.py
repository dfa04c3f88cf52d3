"""The first hour on a fresh machine: tmux's socket folder made from nothing, doctor's tmux
checks, refused submits that record nothing, and what `submit --wait` shows a person.

Every test starts from a new empty TMUX_TMPDIR (tmux_fixtures), DELEGATE_HOME and HOME.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
from pathlib import Path

import pytest

from delegate.core.model import JobState

from .helpers import (
    assert_one_line_error,
    cli_env,
    delegate_cmd,
    json_lines,
    retry_until,
    run_cli,
    submit_shell,
)
from .pty_run import run_in_pty
from .test_monitor import open_state as _state
from .test_monitor import submit_no_wait, supervisor_pid, wait_running


def _server_pid(socket: str) -> int:
    out = subprocess.run(
        ["tmux", "-S", socket, "display-message", "-p", "#{pid}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip())


def _snapshot(home: Path) -> dict[str, str]:
    """Every file of the registry and the audit logs, by content."""
    found = {}
    for folder in ("jobs", "logs"):
        root = home / folder
        if not root.exists():
            continue
        for path in sorted(root.rglob("*")):
            if path.is_file() and path.name != ".lock":  # the lock file holds no record
                found[str(path.relative_to(home))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def default_socket_env(tmux_env: dict[str, str], tmux_tmpdir: Path):
    """tmux_env without DELEGATE_TMUX_SOCKET: the default server of a fresh TMUX_TMPDIR, as
    `make demo` meets it on a machine where tmux never ran."""
    env = {k: v for k, v in tmux_env.items() if k != "DELEGATE_TMUX_SOCKET"}
    yield env
    socket = tmux_tmpdir / f"tmux-{os.getuid()}" / "default"
    subprocess.run(["tmux", "-S", str(socket), "kill-server"], capture_output=True)


def test_demo_path_from_an_empty_tmux_tmpdir(
    home: Path, default_socket_env, tmux_tmpdir: Path, tmp_path: Path
):
    folder = tmux_tmpdir / f"tmux-{os.getuid()}"
    assert not folder.exists()
    done = submit_shell(home, default_socket_env, tmp_path, "echo hello from a fresh machine")
    assert done.returncode == 0, done.stderr
    info = folder.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()
    job = _state(home).registry.list()[0]
    assert job.status is JobState.COMPLETED and job.tmux_socket == str(folder / "default")


def test_socket_folder_removed_between_two_submits(
    home: Path, default_socket_env, tmux_tmpdir: Path, tmp_path: Path
):
    first = submit_shell(home, default_socket_env, tmp_path, "echo one")
    assert first.returncode == 0, first.stderr
    folder = tmux_tmpdir / f"tmux-{os.getuid()}"
    old_server = _server_pid(str(folder / "default"))
    # what a reboot or a /tmp cleaner does: the folder and its socket are gone (the old
    # server, unreachable now, is killed by its pid at the end)
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    try:
        second = submit_shell(home, default_socket_env, tmp_path, "echo two")
        assert second.returncode == 0, second.stderr
        assert folder.is_dir() and stat.S_IMODE(folder.stat().st_mode) == 0o700
        statuses = sorted(j.status.value for j in _state(home).registry.list())
        assert statuses == ["completed", "completed"]
    finally:
        os.kill(old_server, signal.SIGKILL)


@pytest.mark.parametrize("problem", ["other-owner", "mode-0777"])
def test_submit_and_doctor_refuse_an_unsafe_socket_folder(
    home: Path, tmux_env, tmux_tmpdir: Path, tmp_path: Path, problem: str
):
    folder = tmux_tmpdir / f"tmux-{os.getuid()}"
    folder.mkdir(mode=0o700)
    if problem == "other-owner":
        os.chown(folder, 65534, 65534)
    else:
        folder.chmod(0o777)
    doctor = run_cli(home, "doctor", "--json", env=tmux_env)
    assert doctor.returncode == 1
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["tmux_socket"]["status"] == "fail"
    assert str(folder) in checks["tmux_socket"]["detail"]
    refused = submit_shell(home, tmux_env, tmp_path, "echo never")
    assert_one_line_error(refused)
    assert f"tmux socket folder {folder} " in refused.stderr
    assert _state(home).registry.list() == []  # refused before anything was recorded


def test_doctor_passes_on_a_fresh_machine(home: Path, tmux_env, tmux_tmpdir: Path):
    doctor = run_cli(home, "doctor", "--json", env=tmux_env)
    assert doctor.returncode == 0, doctor.stdout
    checks = {c["name"]: c["status"] for c in json.loads(doctor.stdout)["checks"]}
    assert checks["tmux"] == checks["tmux_socket"] == checks["tmux_round_trip"] == "ok"
    assert not (tmux_tmpdir / f"tmux-{os.getuid()}").exists()  # doctor used a private one


def test_a_launch_tmux_refuses_ends_launch_failed_with_tmux_s_words(
    home: Path, tmux_env, tmp_path: Path
):
    bad = tmp_path / "sock"
    bad.mkdir()  # a folder where the socket should be: tmux cannot connect nor create it
    env = {**tmux_env, "DELEGATE_TMUX_SOCKET": str(bad)}
    failed = submit_shell(home, env, tmp_path, "echo never")
    assert_one_line_error(failed)
    (job,) = _state(home).registry.list()
    assert f"job {job.job_id} ended launch_failed: " in failed.stderr
    assert "Is a directory" in failed.stderr  # tmux's own message
    assert job.status is JobState.ERROR
    assert job.error.startswith("launch_failed: ") and "Is a directory" in job.error


def test_a_refused_busy_session_submit_records_nothing(home: Path, tmux_env, tmp_path: Path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, "sleep 30", "--session", "busy")
    wait_running(home, job_id)
    retry_until((home / "logs" / job_id / "agent.log").exists)  # the running job settled
    # and the state dir's supervisor too: on the SQLite bus submit returns before it listens,
    # and it then audits the `started` it catches up on
    supervisor_pid(home, job_id)
    retry_until(lambda: _state(home).audit.read_events(job_id, kind="received"))
    before = _snapshot(home)
    listed = run_cli(home, "ps", "--all", "--json", env=tmux_env)
    refused = submit_shell(home, tmux_env, tmp_path, "echo no", "--session", "busy", "--no-wait")
    assert_one_line_error(refused)
    assert "busy" in refused.stderr and job_id in refused.stderr
    assert _snapshot(home) == before
    after = run_cli(home, "ps", "--all", "--json", env=tmux_env)

    def ids_states(text: str) -> list[tuple[str, str]]:
        return [(r["job_id"], r["job_state"]) for r in json_lines(text)]

    assert ids_states(after.stdout) == ids_states(listed.stdout) == [(job_id, "running")]
    run_cli(home, "cancel", job_id, env=tmux_env)


def test_on_event_naming_a_missing_program_is_refused_before_anything(
    home: Path, tmux_env, tmp_path: Path
):
    refused = submit_shell(home, tmux_env, tmp_path, "echo x", "--on-event", "/no/such/program")
    assert_one_line_error(refused)
    assert "/no/such/program" in refused.stderr
    assert _snapshot(home) == {}
    assert _state(home).registry.list() == []


def test_submit_wait_at_a_terminal_reads_as_lines_and_piped_as_json(
    home: Path, tmux_env, tmp_path: Path
):
    script = "delegate publish --event progress --detail 'half way' --data '{\"done\": 1}'\n"
    argv = delegate_cmd("submit", "-a", "shell", "-C", str(tmp_path), "-p", script, "-w")
    shown = run_in_pty(argv, env=cli_env(home, tmux_env), separate_stderr=True)
    assert shown.returncode == 0, shown
    assert "{" not in shown.output and "{" not in shown.stderr
    lines = shown.output.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["started", "progress", "completed"]
    assert "half way" in lines[1]
    assert "completed in" in shown.stderr
    piped = submit_shell(home, tmux_env, tmp_path, script)
    assert piped.returncode == 0, piped.stderr
    events = json_lines(piped.stdout)  # every line is JSON
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    assert all("hmac_sig" in e["data"] for e in events)


def test_publish_at_a_terminal_says_a_sentence_and_piped_a_json_receipt(
    home: Path, tmux_env, tmp_path: Path
):
    job_id = submit_no_wait(home, tmux_env, tmp_path, "sleep 30")
    wait_running(home, job_id)
    argv = delegate_cmd("publish", "--job", job_id, "--event", "progress", "--detail", "half")
    shown = run_in_pty(argv, env=cli_env(home, tmux_env))
    assert shown.returncode == 0, shown
    assert shown.output.strip() == f"job {job_id}: progress published (seq 2)"
    piped = run_cli(home, *argv[-7:], env=tmux_env)
    assert json.loads(piped.stdout) == {"job_id": job_id, "seq": 3, "event": "progress"}
    assert run_cli(home, "cancel", job_id, env=tmux_env).returncode == 0


def test_an_idle_timeout_says_why(home: Path, tmux_env, tmp_path: Path):
    argv = delegate_cmd(
        "submit", "-a", "shell", "-C", str(tmp_path), "-p", "sleep 60", "--idle-timeout", "2"
    )
    shown = run_in_pty(argv, env=cli_env(home, tmux_env), separate_stderr=True, timeout=60)
    assert shown.returncode == 2, shown
    assert "timed out" in shown.stderr and "no activity for 2s" in shown.stderr
    assert "idle_timeout" in shown.stderr


def test_ctrl_c_while_waiting_leaves_the_job_running(home: Path, tmux_env, tmp_path: Path):
    (tmp_path / "go").unlink(missing_ok=True)
    script = "while [ ! -e go ]; do sleep 0.05; done\necho done\n"
    argv = delegate_cmd("submit", "-a", "shell", "-C", str(tmp_path), "-p", script)

    def interrupt_once_started(text: str, process: subprocess.Popen[bytes]) -> bool:
        if "started" not in text:
            return False
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C at the terminal sends
        return True

    shown = run_in_pty(
        argv,
        env=cli_env(home, tmux_env),
        separate_stderr=True,
        on_output=interrupt_once_started,
    )
    assert shown.returncode == 130, shown
    (job,) = _state(home).registry.list()
    expected = (
        f"job {job.job_id} keeps running; 'delegate watch {job.job_id}' follows it,"
        f" 'delegate cancel {job.job_id}' stops it"
    )
    assert expected in shown.stderr and "Traceback" not in shown.stderr
    assert job.status is JobState.RUNNING
    (tmp_path / "go").touch()
    state = _state(home)
    retry_until(lambda: state.registry.get(job.job_id).status.terminal, timeout=30)
    assert state.registry.get(job.job_id).status is JobState.COMPLETED


READ_STDIN = """
touch reading
IFS= read -r line
printf 'got:%s\\n' "$line" > got.txt
"""


def test_send_reaches_a_shell_agent_reading_stdin(home: Path, tmux_env, tmp_path: Path):
    job_id = submit_no_wait(home, tmux_env, tmp_path, READ_STDIN, "--session", "reader")
    wait_running(home, job_id)
    retry_until((tmp_path / "reading").exists)
    sent = run_cli(home, "send", "reader", "hello agent", env=tmux_env)
    assert sent.returncode == 0, sent.stderr
    got = retry_until(lambda: (tmp_path / "got.txt").exists() and (tmp_path / "got.txt"))
    assert got.read_text() == "got:hello agent\n"
    state = _state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal)
    ended = run_cli(home, "send", "reader", "anyone?", env=tmux_env)
    assert_one_line_error(ended)
    assert "nothing reads" in ended.stderr


def test_send_refuses_an_agent_whose_stdin_is_its_prompt(home: Path, tmux_env, tmp_path: Path):
    result = run_cli(
        home,
        "submit",
        "--no-wait",
        "--cmd",
        "touch started; sleep 30",
        "-C",
        str(tmp_path),
        "-s",
        "piped",
        "-p",
        "the prompt",
        env=tmux_env,
    )
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    wait_running(home, job_id)
    refused = run_cli(home, "send", "piped", "hello", env=tmux_env)
    assert_one_line_error(refused)
    assert "stdin" in refused.stderr and job_id in refused.stderr
    run_cli(home, "cancel", job_id, env=tmux_env)
