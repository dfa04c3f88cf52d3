"""`delegate report` through its state dir's warm Spark (services/warm_report,
runtime/report_server): real reports, a real server process, a real Unix socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from delegate.report.generator import Spec, generate
from delegate.services import warm_report
from delegate.services.report import run_report
from delegate.services.state import State
from tests.helpers import assert_one_line_error, cli_env, delegate_cmd, retry_until, run_cli

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(600)


def server_pid(home: Path) -> int | None:
    """The pid of the process listening on `home`'s report socket (None: none listens)."""
    path = warm_report.server_socket(home)
    assert path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        try:
            conn.connect(str(path))
        except OSError:
            return None
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return struct.unpack("3i", creds)[0]


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1].startswith("Z")  # a zombie has ended
    except FileNotFoundError:
        return True


def report_json(home: Path, out: Path, **env: str) -> dict:
    result = run_cli(home, "report", "--format", "json", "--out", str(out), env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == str(out / "report.json")
    data = json.loads((out / "report.json").read_text())
    data.pop("generated_at")
    return data


def start_reports_at_once(home: Path, outs: list[Path]) -> None:
    procs = [
        subprocess.Popen(
            delegate_cmd("report", "--format", "json", "--out", str(out)),
            env=cli_env(home),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for out in outs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]


def report_servers(home: Path) -> list[int]:
    """The report servers of `home` running now (by their socket path, which is private)."""
    path = str(warm_report.server_socket(home)).encode()
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            cmdline = _cmdline(int(name))
            if path in cmdline and b"report_server" in cmdline:
                found.append(int(name))
    return found


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_next_report_is_the_warm_servers_and_sees_what_changed(spark, tmp_path: Path):
    home = tmp_path / "state"
    generate(home / "logs", Spec(jobs=30, seed=21))
    generate(tmp_path / "new", Spec(jobs=5, seed=22))
    # two first reports at once: one server is started, and answers both
    start_reports_at_once(home, [tmp_path / "o1", tmp_path / "o2"])
    for out in ("o1", "o2"):
        assert json.loads((tmp_path / out / "report.json").read_text())["totals"]["jobs"] == 30
    pid = server_pid(home)
    assert pid is not None and report_servers(home) == [pid]
    for folder in (tmp_path / "new").iterdir():
        folder.rename(home / "logs" / folder.name)
    second = report_json(home, tmp_path / "second")
    assert server_pid(home) == pid  # the same Spark answered
    assert second["totals"]["jobs"] == 35  # nothing cached from the first report
    # the same figures as a report computed in this process, on the run's shared local Spark
    run_report(
        State.open(env={"DELEGATE_HOME": str(home)}),
        master="local[1]",
        fmt="json",
        out=tmp_path / "here",
    )
    here = json.loads((tmp_path / "here" / "report.json").read_text())
    here.pop("generated_at")
    assert second == here
    # a table too: its dates (per day) come back as dates from the server
    table = run_cli(home, "report", env={"COLUMNS": "120"}, timeout=300)
    assert table.returncode == 0 and table.stderr == "", table.stderr
    assert "per day" in table.stdout and "2026-11-21" in table.stdout
    assert "35 jobs" in table.stdout.splitlines()[0]
    _bad_requests_get_an_answer(home)
    assert report_json(home, tmp_path / "third")["totals"]["jobs"] == 35
    assert server_pid(home) == pid
    # a person ends it sooner than its idle time, and is told whether one was up
    stopped = run_cli(home, "report", "--stop")
    assert stopped.returncode == 0 and stopped.stderr == "the report's Spark ended\n"
    retry_until(lambda: report_servers(home) == [], timeout=30)
    again = run_cli(home, "report", "--stop")
    assert again.returncode == 0 and again.stderr == "no report's Spark was up\n"


def _bad_requests_get_an_answer(home: Path) -> None:
    """Garbage and a plan that would write elsewhere are refused; the server goes on."""
    path = warm_report.server_socket(home)
    assert path is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(path))
        conn.sendall(b"{not json")
        conn.shutdown(socket.SHUT_WR)
        answer = json.loads(conn.recv(65536))
    assert answer["ok"] is False and answer["exit_code"] == 64
    plan = {
        "logs": str(home / "logs"),
        "store": str(home / "analytics"),
        "local": True,
        "own": True,
        "since_day": None,
        "compact": False,
        "fmt": "json",
        "out": "relative/out",
    }
    answer = warm_report.ask(
        path, {"fingerprint": warm_report.fingerprint(cli_env(home)), "plan": plan}
    )
    assert answer is not None and answer["ok"] is False
    assert "absolute" in answer["message"] and not Path("/relative").exists()


def test_servers_give_way_end_when_idle_and_are_replaced(tmp_path: Path):
    home = tmp_path / "state"
    generate(home / "logs", Spec(jobs=8, seed=23))
    bad = run_cli(home, "report", env={"DELEGATE_REPORT_WARM_S": "soon"})
    assert_one_line_error(bad)
    assert bad.returncode == 64 and "DELEGATE_REPORT_WARM_S" in bad.stderr
    assert server_pid(home) is None  # a refused command started nothing
    report_json(home, tmp_path / "a")
    old = server_pid(home)
    assert old is not None
    # another Spark setting: the old server leaves its socket and ends, a new one answers
    assert report_json(home, tmp_path / "b", PYSPARK_DELEGATE_TEST="1")["totals"]["jobs"] == 8
    killed = server_pid(home)
    assert killed is not None and killed != old
    retry_until(lambda: gone(old), timeout=60, interval=0.1)
    # a server killed leaves its socket file behind; the next report starts one all the same
    os.kill(killed, signal.SIGKILL)
    retry_until(lambda: gone(killed), timeout=30, interval=0.05)
    assert warm_report.server_socket(home).exists()  # type: ignore[union-attr]
    assert report_json(home, tmp_path / "c", DELEGATE_REPORT_WARM_S="1")["totals"]["jobs"] == 8
    idle = server_pid(home)
    assert idle not in (None, old, killed)
    retry_until(lambda: gone(idle), timeout=60, interval=0.1)  # 1 s idle, then it ends
    assert server_pid(home) is None and not warm_report.stop(home)


def test_a_malformed_request_is_answered_and_the_server_stays_up(tmp_path: Path):
    """A request nested past the JSON parser's limit (`[[[...`, issue 30) gets "bad request"
    and the server answers the next one: no request ends it but `stop`."""
    import threading

    from delegate.runtime.report_server import ReportServer
    from delegate.services.state import State

    from .test_publish_socket import _raw

    state = State.open(env={"DELEGATE_HOME": str(tmp_path / "state")})
    state.layout.home.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "r.sock"
    server = ReportServer(state, path, java="java", idle_s=30.0)  # Spark starts only for a plan
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    try:
        for bad in (b"[" * 200_000, b"{nope", b"[1]"):
            answer = _raw(path, bad)
            assert answer["ok"] is False and answer["exit_code"] == 64, answer
            assert answer["message"].startswith("bad request")
        assert serving.is_alive()
        assert _raw(path, b'{"stop": true}') == {"ok": True}
        serving.join(timeout=10)
        assert not serving.is_alive()
    finally:
        server.leave()
