from __future__ import annotations

import json
import socket
import stat
from pathlib import Path

from delegate.publish_socket import MAX_REQUEST, PublishServer, request, socket_path


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
        assert seen == [{"event": "progress", "data": None}]
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
