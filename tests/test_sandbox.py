"""An agent in a box (issue 32, item 1), with the real bubblewrap: a sandboxed job reads
neither the registry, nor another job's prompt, nor the submitter's ~/.ssh; writes its
workdir; still publishes its events and completes. Without bubblewrap, a sandboxed submit is
refused in one line and nothing is recorded."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from delegate.core.model import JobState

from .helpers import refused_submit, retry_until, run_cli
from .test_monitor import open_state, submit_no_wait

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap here")


@needs_bwrap
def test_a_sandboxed_job_sees_only_its_own(home: Path, tmux_env, tmp_path: Path):
    ssh = Path(tmux_env["HOME"]) / ".ssh"
    ssh.mkdir()
    (ssh / "id_ed25519").write_text("SECRET KEY\n")
    other_work = tmp_path / "other"
    other_work.mkdir()
    other = submit_no_wait(home, tmux_env, other_work, "echo the other job's prompt")
    state = open_state(home)
    retry_until(lambda: state.registry.get(other).status.terminal, timeout=30)
    work = tmp_path / "work"
    work.mkdir()
    registry = home / "jobs" / f"{other}.json"
    prompt = home / "logs" / other / "prompt"
    tries = {
        "registry": f"cat {registry}",
        "listing": f"ls {home / 'jobs'}",
        "prompt": f"cat {prompt}",
        "ssh": f"cat {ssh / 'id_ed25519'}",
        "net": "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9), 1)'",
    }
    lines = [
        f'if {command} > /dev/null 2>&1; then echo "{name} READ"; else echo "{name} refused"; fi'
        for name, command in tries.items()
    ]
    script = "\n".join(
        [
            "exec > results",
            *lines,
            "echo written > made-inside",
            "delegate publish --event progress --detail 'inside the box'",
        ]
    )
    job_id = submit_no_wait(home, tmux_env, work, script, "--sandbox")
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=60)
    job = state.registry.get(job_id)
    assert job.status is JobState.COMPLETED, job.error
    said = (work / "results").read_text().splitlines()
    assert said[: len(tries)] == [f"{name} refused" for name in tries], said
    assert json.loads(said[-1])["event"] == "progress"  # publish's receipt, from inside
    assert (work / "made-inside").read_text() == "written\n"
    progress = [e for e in state.audit.read_events(job_id, "published") if e["event"] == "progress"]
    assert progress and progress[0]["seq"] == 2
    assert job.launch["sandbox"]["network"] == "allowlist"  # the default: only its proxy
    # the same checks without the box read everything: the test itself can fail
    plain = tmp_path / "plain"
    plain.mkdir()
    unboxed = submit_no_wait(home, tmux_env, plain, "\n".join(["exec > results", *lines[:4]]))
    retry_until(lambda: state.registry.get(unboxed).status.terminal, timeout=30)
    assert (plain / "results").read_text().split("\n")[:4] == [f"{n} READ" for n in list(tries)[:4]]


def test_no_bubblewrap_refuses_a_sandboxed_submit_and_records_nothing(
    home: Path, tmux_env, tmp_path: Path
):
    bare = tmp_path / "bin"
    bare.mkdir()
    for shell in ("sh", "bash"):
        os.symlink(f"/bin/{shell}", bare / shell)
    env = {**tmux_env, "PATH": str(bare)}
    refused = refused_submit(home, env, "--sandbox", "--json")
    assert "bubblewrap" in refused.stderr and "apt-get install bubblewrap" in refused.stderr
    (home / "delegate.toml").write_text("[sandbox]\ndefault = true\n")
    also = refused_submit(home, env)
    assert "bubblewrap" in also.stderr  # the default asks for it too
    made = run_cli(
        home, "submit", "-a", "shell", "-p", "true", "--no-sandbox", "--no-wait", "--json",
        env={**env, "PATH": f"{bare}:{os.environ['PATH']}"},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "sandbox" not in open_state(home).registry.get(json.loads(made.stdout)["job_id"]).launch


@pytest.fixture
def web_server():
    """A plain HTTP server of the test's own on 127.0.0.1 (what an allowed host reaches)."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"hello from outside"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@needs_bwrap
def test_a_sandboxed_job_reaches_only_allowed_hosts_through_its_proxy(
    home: Path, tmux_env, tmp_path: Path, web_server: int
):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["localhost", "*.allowed.test"]\n'
    )
    port = web_server
    code = "curl -s -o /dev/null -w '%{http_code}' --max-time 5"
    script = "\n".join(
        [
            f"curl -s --max-time 5 http://localhost:{port}/ > allowed.out",
            f"{code} http://evil.example:{port}/ > refused.out",
            f"{code} --noproxy '*' http://127.0.0.1:{port}/ > direct.out || true",
            f"{code} --noproxy '*' http://192.0.2.1:80/ > direct-out.out || true",
        ]
    )
    work = tmp_path / "work"
    work.mkdir()
    job_id = submit_no_wait(home, tmux_env, work, script, "--sandbox")
    state = open_state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=60)
    assert state.registry.get(job_id).status is JobState.COMPLETED
    assert (work / "allowed.out").read_text() == "hello from outside"
    assert (work / "refused.out").read_text() == "403"
    assert (work / "direct.out").read_text() == "000"  # no route but the proxy
    assert (work / "direct-out.out").read_text() == "000"
    said = state.audit.read_events(job_id, "egress")
    reached = [e for e in said if e["allowed"]]
    assert [(e["host"], e["port"]) for e in reached] == [("localhost", port)]
    assert reached[0]["received"] > len("hello from outside") and reached[0]["sent"] > 0
    refused = [e for e in said if not e["allowed"]]
    assert [(e["host"], e["port"]) for e in refused] == [("evil.example", port)]
    progress = [
        e["envelope"].get("detail")
        for e in state.audit.read_events(job_id, "published")
        if e["event"] == "progress"
    ]
    assert f"refused connection to evil.example:{port}" in progress, progress
    shown = json.loads(run_cli(home, "show", job_id, "--json", env=tmux_env).stdout)
    assert shown["hosts_reached"] == [f"localhost:{port}"]
    assert shown["hosts_refused"] == [f"evil.example:{port}"]


@needs_bwrap
def test_a_profile_s_network_is_its_own(home: Path, tmux_env, tmp_path: Path, web_server: int):
    """`[profiles.NAME] network` over `[sandbox] network`: the same allowed host is reached by
    the shell profile as `[sandbox]` has it, and not once the profile says no network."""
    home.mkdir(parents=True, exist_ok=True)
    sandbox = '[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["localhost"]\n'
    fetch = f"curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 http://localhost:{web_server}/"
    state = open_state(home)
    codes = {}
    for own in ("", "allowlist", "none"):
        profile = f'[profiles.shell]\nnetwork = "{own}"\n' if own else ""
        (home / "delegate.toml").write_text(sandbox + profile)
        work = tmp_path / (own or "default")
        work.mkdir()
        job_id = submit_no_wait(home, tmux_env, work, f"{fetch} > code || true", "--sandbox")
        job = retry_until(
            lambda made=job_id: (job := state.registry.get(made)).status.terminal and job,
            timeout=60,
        )
        assert job.status is JobState.COMPLETED, job.error
        codes[own] = (job.launch["sandbox"]["network"], (work / "code").read_text())
    assert codes == {
        "": ("allowlist", "200"),
        "allowlist": ("allowlist", "200"),
        "none": ("none", "000"),
    }


def test_a_profile_s_network_must_be_one_of_three(home: Path, tmux_env):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text('[profiles.shell]\nnetwork = "everywhere"\n')
    refused = refused_submit(home, tmux_env)
    assert "network must be one of none, allowlist, host" in refused.stderr


def test_doctor_says_whether_sandboxes_can_be_made(home: Path, tmux_env, tmp_path: Path):
    said = json.loads(run_cli(home, "doctor", "--json", env=tmux_env).stdout)["checks"]
    line = next(c for c in said if c["name"] == "sandbox")
    if shutil.which("bwrap", path=tmux_env["PATH"]):
        assert line["status"] == "ok" and line["detail"].startswith("bubblewrap "), line
    bare = tmp_path / "bin"
    bare.mkdir()
    said = json.loads(
        run_cli(home, "doctor", "--json", env={**tmux_env, "PATH": str(bare)}).stdout
    )["checks"]
    line = next(c for c in said if c["name"] == "sandbox")
    assert line["status"] == "warn" and "apt-get install bubblewrap" in line["detail"]


@needs_bwrap
def test_a_sandboxed_job_reaches_an_ipv6_host_it_is_allowed(home: Path, tmux_env, tmp_path: Path):
    """`allow_hosts` may name an IPv6 address; the box's proxy connects to it there."""
    import http.server
    import socket
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"v6")

        def log_message(self, *args):  # quiet
            pass

    class V6Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6

    server = V6Server(("::1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        home.mkdir(parents=True, exist_ok=True)
        (home / "delegate.toml").write_text('[sandbox]\nallow_hosts = ["[::1]"]\n')
        work = tmp_path / "work"
        work.mkdir()
        script = f"curl -s --max-time 5 http://[::1]:{port}/ > v6.out"
        job_id = submit_no_wait(home, tmux_env, work, script, "--sandbox")
        state = open_state(home)
        retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=60)
        assert state.registry.get(job_id).status is JobState.COMPLETED
        assert (work / "v6.out").read_text() == "v6"
        reached = [e for e in state.audit.read_events(job_id, "egress") if e["allowed"]]
        assert [(e["host"], e["port"]) for e in reached] == [("::1", port)]
    finally:
        server.shutdown()
        server.server_close()
