from __future__ import annotations

import json
import os
import socket
import stat
from pathlib import Path

from delegate.adapters.publish_socket import MAX_REQUEST, PublishServer, request, socket_path


def test_round_trip_and_private_socket(tmp_path: Path):
    seen = []

    def handler(req):
        seen.append(req)
        return {"ok": True, "receipt": {"seq": 7}}

    server = PublishServer(tmp_path / "p.sock", handler)
    try:
        assert stat.S_IMODE((tmp_path / "p.sock").stat().st_mode) == 0o600
        answer = request(str(tmp_path / "p.sock"), {"event": "progress", "data": None})
        assert answer == {"ok": True, "receipt": {"seq": 7}}
        assert seen == [{"event": "progress", "data": None}]  # the request id is the server's
    finally:
        server.close()
    assert not (tmp_path / "p.sock").exists()
    assert request(str(tmp_path / "p.sock"), {"event": "x"}) is None  # gone: caller falls back


def _raw(path: Path, data: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer and close before reading everything
        return json.loads(sock.makefile("rb").read())


def test_bad_requests_get_an_answer_not_a_crash(tmp_path: Path):
    server = PublishServer(tmp_path / "p.sock", lambda req: {"ok": True, "receipt": {}})
    try:
        assert _raw(tmp_path / "p.sock", b"{nope")["exit_code"] == 64
        assert _raw(tmp_path / "p.sock", b"[1]")["exit_code"] == 64
        # nested past the parser's own limit (issue 30): an answer, and the server stays up
        assert _raw(tmp_path / "p.sock", b"[" * 200_000)["message"] == "malformed request"
        assert (
            _raw(tmp_path / "p.sock", b"x" * (MAX_REQUEST + 10))["message"] == "request too large"
        )
        assert _raw(tmp_path / "p.sock", b"{}")["ok"] is True  # still serving
    finally:
        server.close()


def test_long_log_paths_fall_back_to_a_private_temp_folder(tmp_path: Path):
    deep = tmp_path / ("d" * 120)
    path = socket_path(deep, "0123abcd")
    assert path is not None and len(str(path)) < 100
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    short = socket_path(tmp_path, "0123abcd")
    assert short == tmp_path / "publish.sock"


def test_a_lost_answer_is_asked_again_and_the_event_goes_out_once(tmp_path: Path):
    from delegate.adapters.bus import open_bus
    from delegate.services.jobs.publish import publish_event, publish_receipt
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(tmp_path / "state")})
    job, _ = state.registry.register()
    publish_event(state, job.job_id, "started")

    def handler(req):
        receipt = publish_receipt(state, job=job.job_id, event=req["event"])
        return {"ok": True, "receipt": receipt}

    path = tmp_path / "p.sock"
    server = PublishServer(path, handler)
    try:
        body = json.dumps({"event": "progress", "request_id": "abc123"}).encode()
        # the first exchange: the request arrives, the client goes before the answer comes
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(str(path))
            sock.sendall(body)
            sock.shutdown(socket.SHUT_WR)
        first_seq = None
        for _ in range(100):  # the server has published it by the time it answers
            if state.registry.get(job.job_id).last_seq == 2:
                first_seq = 2
                break
            import time

            time.sleep(0.02)
        assert first_seq == 2
        again = request(str(path), {"event": "progress", "request_id": "abc123"})
        assert again == {
            "ok": True,
            "receipt": {"job_id": job.job_id, "seq": 2, "event": "progress"},
        }
    finally:
        server.close()
    bus = open_bus(state.bus_url_for(job))
    sub = bus.subscribe(job.job_id)
    events = []
    while (message := sub.get(timeout=0)) is not None:
        events.append(json.loads(message.payload)["event"])
    sub.close()
    bus.close()
    assert events == ["started", "progress"]  # one event for the two exchanges


def test_a_wrapper_that_stops_answering_is_not_bypassed(tmp_path: Path):
    path = tmp_path / "p.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    try:
        # it accepts the request but never answers: no silent second publish
        answer = request(str(path), {"event": "progress"}, timeout_s=0.2)
        assert answer is not None and answer["ok"] is False and answer["exit_code"] == 69
        assert "not publishing again" in answer["message"]
    finally:
        listener.close()


def test_a_silent_client_does_not_hold_the_server(tmp_path: Path, monkeypatch):
    import delegate.adapters.publish_socket as module

    monkeypatch.setattr(module, "CONNECTION_TIMEOUT_S", 0.2)
    path = tmp_path / "p.sock"
    server = PublishServer(path, lambda req: {"ok": True, "receipt": {"seq": 1}})
    try:
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(str(path))  # connects, sends nothing, never closes
        answer = request(str(path), {"event": "progress"}, timeout_s=5)
        assert answer == {"ok": True, "receipt": {"seq": 1}}
        silent.close()
    finally:
        server.close()


def test_the_warm_mcp_socket_never_goes_through_a_planted_link(tmp_path: Path, monkeypatch):
    """`mcp_handover.socket_path`'s fallback folder (a log folder too deep for a socket) is
    refused when a link stands where it should be (issue 30), as publish_socket's is."""
    import os
    import shutil
    import tempfile

    from delegate.adapters import mcp_handover

    temp = Path(tempfile.mkdtemp(prefix="dlt-", dir="/tmp"))  # short: a socket path fits
    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(temp))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, temp / f"delegate-{os.getuid()}")
    deep = str(tmp_path / ("d" * 120))
    assert mcp_handover.socket_path(deep, "0123abcd") is None
    os.unlink(temp / f"delegate-{os.getuid()}")
    try:
        found = mcp_handover.socket_path(deep, "0123abcd")
        assert found is not None and found.startswith(str(temp))
    finally:
        shutil.rmtree(temp, ignore_errors=True)


IMPOSTOR = """
import os, socket, sys
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind(sys.argv[1])
os.chmod(sys.argv[1], 0o777)
listener.listen()
print("listening", flush=True)
while True:
    conn, _ = listener.accept()
    conn.recv(65536)
    conn.sendall(b'{"ok": true, "receipt": {"seq": 1}}')
    conn.close()
"""


def test_a_client_never_talks_to_another_users_server(tmp_path: Path):
    """A socket another user planted where a client looks (a shared temp folder, issue 30)
    gets nothing of it: no request, no descriptor; the publish client falls back to publishing
    itself (None), the MCP nursery is not asked. Its own user's and root's servers are used."""
    import os
    import shutil
    import subprocess
    import tempfile

    from delegate.adapters.mcp_handover import ask_nursery
    from delegate.adapters.publish_socket import exchange, trusted_server

    assert trusted_server(os.getuid()) and trusted_server(0)
    if os.getuid() != 0:
        return  # another user's server needs root to start here
    shared = Path(tempfile.mkdtemp(prefix="delegate-shared-"))
    shared.chmod(0o777)
    path = shared / "planted.sock"
    impostor = subprocess.Popen(
        [shutil.which("python3", path="/usr/bin:/bin") or "python3", "-c", IMPOSTOR, str(path)],
        user=65534, group=65534, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert impostor.stdout is not None and impostor.stdout.readline() == "listening\n"
        assert not trusted_server(65534)
        assert exchange(str(path), b'{"event": "progress"}', 5.0) == (None, False)
        assert request(str(path), {"event": "progress"}) is None
        read, write = os.pipe()
        try:
            assert ask_nursery(str(path), {}, [read]) is None
        finally:
            os.close(read)
            os.close(write)
    finally:
        impostor.kill()
        impostor.wait()
        shutil.rmtree(shared)


def test_a_client_in_a_run_as_box_trusts_roots_overflow_id_only_for_its_own_socket(tmp_path):
    """In a `run_as` job's sandbox root's wrapper shows as the overflow id: trusted for a socket
    this user owns (only root can have made it in root's folder), never for one of someone
    else's, and never is any other id."""
    from delegate.adapters.publish_socket import _overflow_uid, trusted_server

    overflow = _overflow_uid()
    mine = tmp_path / "mine.sock"
    mine.touch()
    assert trusted_server(os.getuid()) and trusted_server(0)
    assert trusted_server(overflow, str(mine))
    assert not trusted_server(overflow)  # no path: nothing to check it by
    assert not trusted_server(overflow, str(tmp_path / "gone.sock"))
    assert not trusted_server(4242, str(mine))
    if os.geteuid() == 0:
        os.chown(mine, 4242, 4242)
        assert not trusted_server(overflow, str(mine))  # someone else's socket
