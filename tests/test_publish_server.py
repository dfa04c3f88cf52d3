"""The state dir's warm publisher (services/jobs/warm_publish, runtime/publish_server): real
`delegate publish` processes, a real server process, real SQLite and audit files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from delegate.adapters.publish_socket import PublishServer, exchange
from delegate.runtime.publish_server import STALE, WarmPublisher
from delegate.services.jobs import warm_publish
from delegate.services.state import State

from .helpers import cli_env, delegate_cmd, retry_until, run_cli

PUBLISH_PROBE = """
import sys
from delegate.__main__ import main
code = main(sys.argv[1:])
sys.stderr.write("\\nSQLITE " + str("sqlite3" in sys.modules) + "\\n")
sys.exit(code)
"""


def _publish(home: Path, job: str, event: str, env: dict[str, str] | None = None, **more: str):
    argv = ["publish", "--job", job, "--event", event]
    for name, value in more.items():
        argv += [f"--{name}", value]
    return run_cli(home, *argv, env=env)


def _probe(
    home: Path,
    job: str | None,
    env: dict[str, str] | None = None,
    event: str = "progress",
    cwd: Path | None = None,
) -> tuple[int, bool]:
    """A publish in a fresh process: (its exit, whether it loaded SQLite itself)."""
    argv = ["publish", "--event", event, "--detail", "probe", *(["--job", job] if job else [])]
    done = subprocess.run(
        [sys.executable, "-P", "-c", PUBLISH_PROBE, *argv],  # -P: not a `delegate/` in cwd
        env=cli_env(home, env),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
    assert done.returncode == 0, done.stderr
    return done.returncode, done.stderr.strip().splitlines()[-1] == "SQLITE True"


def _socket(home: Path) -> Path:
    """Where `home`'s server listens: in it, or in a private temp folder when that path is too
    long for a socket (a deep tmp_path, as under pytest-xdist)."""
    path = warm_publish.server_socket(str(home))
    assert path is not None
    return Path(path)


def _server_pids(home: Path) -> list[int]:
    """The publish servers started for `home` (by their command line)."""
    sock = str(warm_publish.server_socket(str(home)))
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if warm_publish.SERVER_MODULE.encode() in argv and sock.encode() in argv:
            pids.append(int(entry.name))
    return pids


def _started(home: Path) -> str:
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    assert _publish(home, job, "started").returncode == 0
    return job


def _serving(home: Path) -> int:
    """The pid of `home`'s server once it listens."""
    retry_until(lambda: _socket(home).exists() and len(_server_pids(home)) == 1)
    return _server_pids(home)[0]


def _seqs(home: Path, job: str) -> list[int]:
    state = State.open(env=cli_env(home))
    return [event["seq"] for event in state.audit.read_events(job, "published")]


def test_the_first_publish_starts_a_server_that_takes_the_next_ones(home: Path):
    job = _started(home)  # published by itself, and started the server
    pid = _serving(home)
    assert oct(_socket(home).stat().st_mode & 0o777) == "0o600"
    assert _probe(home, job) == (0, False)  # served: this process never opened SQLite
    done = _publish(home, job, "progress", detail="from a script", data='{"step": 2}')
    assert json.loads(done.stdout) == {"job_id": job, "seq": 3, "event": "progress"}
    refused = _publish(home, job, "nope")  # the server's refusals read as the direct path's
    assert refused.returncode == 64 and "unknown event 'nope'" in refused.stderr
    # a job's last event is its own process's (ending it may start queued jobs)
    assert _probe(home, job, event="completed") == (0, True)
    late = _publish(home, job, "progress")
    assert late.returncode != 0 and "cannot publish" in late.stderr
    assert _server_pids(home) == [pid]  # one server answered all of them
    assert _seqs(home, job) == [1, 2, 3, 4]
    state = State.open(env=cli_env(home))
    assert state.registry.get(job).status.value == "completed"
    bus = state.open_bus_for(state.registry.get(job))
    sub = bus.subscribe(job)
    on_bus = [json.loads(m.payload)["seq"] for m in iter(lambda: sub.get(0.2), None)]
    sub.close()
    bus.close()
    assert on_bus == [1, 2, 3, 4]  # each committed to the bus, in order
    assert warm_publish.stop(str(home))
    retry_until(lambda: not _server_pids(home))
    assert not _socket(home).exists()


def test_many_publishers_at_once_start_one_server_and_lose_no_seq(home: Path):
    jobs = [run_cli(home, "register", "--cmd", "true").stdout.strip() for _ in range(3)]
    procs = [
        subprocess.Popen(
            delegate_cmd("publish", "--job", job, "--event", "started"),
            env=cli_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for job in jobs
    ]
    assert [p.wait(60) for p in procs] == [0, 0, 0]
    script = "for i in $(seq 8); do {cmd} publish --job {job} --event progress || exit 1; done"
    cmd = " ".join(delegate_cmd())
    loops = [
        subprocess.Popen(["sh", "-c", script.format(cmd=cmd, job=job)], env=cli_env(home))
        for job in jobs * 2  # two writers a job, some before the server listens
    ]
    assert [p.wait(120) for p in loops] == [0] * 6
    assert len(_server_pids(home)) == 1
    for job in jobs:
        assert _seqs(home, job) == list(range(1, 18))  # no gap, no seq twice


def test_another_environment_is_published_directly_and_replaces_the_server(home: Path):
    job = _started(home)
    first = _serving(home)
    assert _probe(home, job) == (0, False)
    # what publishing does not read changes nothing: another terminal, PATH, a job id
    unread = {"TERM": "dumb", "COLUMNS": "33", "PATH": "/bin", "DELEGATE_JOB_ID": job}
    assert _probe(home, job, unread) == (0, False)
    # a setting publishing reads: this client's server would not be that one
    other = {"DELEGATE_LOG_LEVEL": "ERROR"}
    assert _probe(home, job, other) == (0, True)  # told "stale", published by itself
    retry_until(lambda: first not in _server_pids(home))  # the old server left
    assert _probe(home, job, other) == (0, True)  # started the new one
    assert _serving(home) != first
    assert _probe(home, job, other) == (0, False)
    assert _seqs(home, job) == [1, 2, 3, 4, 5, 6]


def test_a_server_whose_code_changed_or_of_another_client_answers_stale_and_ends(state: State):
    job, _ = state.registry.register()
    asked = {"job": job.job_id, "event": "started"}
    changed = WarmPublisher(state, idle_s=60)
    changed.code[next(iter(changed.code))] -= 1  # as if a module was written since it loaded
    assert changed.answer({**asked, "fingerprint": changed.fingerprint}) == STALE
    assert changed.ends(0.0)
    other = WarmPublisher(state, idle_s=60)
    assert other.answer({**asked, "fingerprint": ["another python", "another home"]}) == STALE
    assert other.ends(0.0)
    assert state.audit.read_events(job.job_id, "published") == []  # neither published
    same = WarmPublisher(state, idle_s=60)
    answer = same.answer({**asked, "fingerprint": same.fingerprint})
    assert answer == {"ok": True, "receipt": {"job_id": job.job_id, "seq": 1, "event": "started"}}
    assert not same.ends(59.0) and same.ends(60.0)  # only its idle time ends it


def test_no_server_without_warm_seconds_or_with_a_broker_password(home: Path):
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    assert _publish(home, job, "started", env={"DELEGATE_PUBLISH_WARM_S": "0"}).returncode == 0
    assert _publish(home, job, "progress", env={"MQTT_PASSWORD": "hunter2"}).returncode == 0
    in_url = {"DELEGATE_BUS": "mqtts://agent:hunter2@127.0.0.1:8883"}
    assert _publish(home, job, "progress", env=in_url).returncode == 0
    unknown = _publish(home, "0badf00d", "progress")  # a publish that failed starts none
    assert unknown.returncode != 0
    assert not _socket(home).exists() and not _server_pids(home)
    bad = _publish(home, job, "progress", env={"DELEGATE_PUBLISH_WARM_S": "soon"})
    assert bad.returncode == 64 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [
        "delegate: DELEGATE_PUBLISH_WARM_S='soon' is not a number of seconds (0 or more)"
    ]
    assert _seqs(home, job) == [1, 2, 3]  # the refused one recorded nothing


def test_an_idle_server_ends_and_the_next_publish_starts_another(home: Path):
    quick = {"DELEGATE_PUBLISH_WARM_S": "1"}
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    assert _publish(home, job, "started", env=quick).returncode == 0
    first = _serving(home)
    retry_until(lambda: not _server_pids(home), timeout=10)  # idle for a second: gone
    assert not _socket(home).exists()
    assert _publish(home, job, "progress", env=quick).returncode == 0
    assert _serving(home) != first
    assert _seqs(home, job) == [1, 2]


def test_a_server_ends_when_its_state_dir_is_gone(tmp_path: Path):
    home = tmp_path / "gone"
    _started(home)
    _serving(home)
    subprocess.run(["rm", "-rf", str(home)], check=True)
    retry_until(lambda: not _server_pids(home), timeout=10)


def test_the_server_keeps_no_descriptor_of_the_publish_that_started_it(home: Path):
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    read_end, write_end = os.pipe()
    first = subprocess.Popen(
        delegate_cmd("publish", "--job", job, "--event", "started"),
        env=cli_env(home),
        pass_fds=(write_end,),
        stdout=subprocess.PIPE,
    )
    os.close(write_end)
    out, _ = first.communicate(timeout=60)  # its stdout's end: the server kept no copy
    assert json.loads(out)["seq"] == 1
    _serving(home)
    done = threading.Event()
    threading.Thread(target=lambda: (os.read(read_end, 1), done.set()), daemon=True).start()
    assert done.wait(10)  # end of file: the pipe it inherited is closed in the server
    os.close(read_end)


def test_ending_answers_every_request_already_queued(tmp_path: Path):
    """A server that ends stops listening first (no new client gets in: it publishes by
    itself), then answers the connections already waiting in its queue."""
    path = str(tmp_path / "s.sock")
    asked_to_end = threading.Event()
    checked = threading.Event()

    def ends_when(idle_s: float) -> bool:
        checked.set()
        return asked_to_end.wait(30)  # holds the accepting thread while clients queue up

    server = PublishServer(path, lambda r: {"ok": True, "n": r["n"]}, ends_when=ends_when)
    assert checked.wait(10)
    queued = []
    for n in range(3):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)  # in the listen queue: nobody accepts while ends_when runs
        sock.sendall(json.dumps({"n": n}).encode())
        sock.shutdown(socket.SHUT_WR)
        queued.append(sock)
    asked_to_end.set()
    server.wait()
    for n, sock in enumerate(queued):
        sock.settimeout(10)
        assert json.loads(sock.recv(4096)) == {"ok": True, "n": n}
        sock.close()
    assert not os.path.exists(path)
    assert exchange(path, b"{}", 1.0) == (None, False)  # never reached: the caller goes on


def test_publishes_stay_ordered_while_the_server_comes_and_goes(home: Path):
    """Idle ends and restarts between publishes: each publish lands once, in order."""
    quick = {"DELEGATE_PUBLISH_WARM_S": "0.3"}
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    assert _publish(home, job, "started", env=quick).returncode == 0
    for pause in (0.0, 0.25, 0.3, 0.35, 0.5, 1.2, 0.0):
        time.sleep(pause)
        assert _publish(home, job, "progress", env=quick).returncode == 0
    assert _seqs(home, job) == list(range(1, 9))


def test_the_server_is_nobodys_job_and_holds_no_folder(home: Path, tmp_path: Path):
    """It runs in `/` with only what publishing reads: no job id (a job's stop would kill it),
    no secret of its starter's, and not the `delegate/` folder the first publish ran in."""
    job = run_cli(home, "register", "--cmd", "true").stdout.strip()
    workdir = tmp_path / "checkout"
    (workdir / "delegate").mkdir(parents=True)
    (workdir / "delegate" / "__init__.py").write_text("raise SystemExit('the wrong delegate')\n")
    first = {"DELEGATE_JOB_ID": job, "API_TOKEN": "sekrit", "DELEGATE_HOME": "state"}
    done = subprocess.run(  # no --job, a relative state dir, stdin closed
        ["sh", "-c", f"{sys.executable} -m delegate publish --event started 0<&-"],
        env=cli_env(home, first),
        cwd=workdir,  # where `state` is relative to: the state dir is `home` only for `home`
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "the wrong delegate" in done.stderr  # -m finds it, we don't
    (workdir / "delegate" / "__init__.py").write_text("")
    (workdir / "state").symlink_to(home)
    done = subprocess.run(
        ["sh", "-c", f"{sys.executable} -P -m delegate publish --event started 0<&-"],
        env=cli_env(home, first),
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    pid = retry_until(lambda: _server_pids(workdir / "state") or None)[0]
    retry_until(lambda: _socket(workdir / "state").exists())
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in environ if e.startswith((b"DELEGATE_JOB_ID=", b"API_TOKEN="))]
    assert f"DELEGATE_HOME={workdir / 'state'}".encode() in environ  # made absolute
    assert os.readlink(f"/proc/{pid}/cwd") == "/"
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
    assert str(home / "publish-server.lock") in fds  # it holds its lock (`state` links there)
    assert not any(str(workdir / "delegate") in path for path in fds)
    # served from the checkout too, without --job
    assert _probe(home, None, first, cwd=workdir) == (0, False)
    assert _seqs(home, job) == [1, 2]


def test_a_server_whose_socket_is_removed_ends(home: Path):
    job = _started(home)
    _serving(home)
    _socket(home).unlink()
    retry_until(lambda: not _server_pids(home), timeout=10)
    assert _publish(home, job, "progress").returncode == 0  # by itself; starts a new one
    _serving(home)
    assert _probe(home, job) == (0, False)
