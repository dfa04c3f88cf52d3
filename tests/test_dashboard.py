"""`delegate dashboard` with real parts: the server as a subprocess on a free port over a real
state directory and a private tmux server, driven by headless Chromium (Playwright) and by
plain HTTP requests for what a browser would not send."""

from __future__ import annotations

import http.client
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

import pytest

from delegate.adapters.tmux import Tmux
from delegate.core.model import JobState
from delegate.runtime.dashboard import snapshot
from delegate.services import worktrees
from delegate.services.jobs.approvals import operator, waiting_requests
from delegate.services.jobs.register import register_job
from delegate.services.state import State

from .browser import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS
from .helpers import cli_env, delegate_cmd, retry_until, run_cli, submit_shell
from .test_approvals import _answer, _asking
from .test_git_adapter import make_repo
from .test_worktree import submit_in_worktree

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("sse_starlette")


class Server(NamedTuple):
    proc: subprocess.Popen[str]
    url: str  # as printed: with the token
    port: int
    token: str


def open_state(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


def start_server(home: Path, env: dict[str, str], *args: str) -> Server:
    proc = subprocess.Popen(
        delegate_cmd("dashboard", "--port", "0", *args),
        env=cli_env(home, env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    assert url.startswith(("http://127.0.0.1:", "http://0.0.0.0:")), (url, proc.poll())
    parts = urlsplit(url)
    assert parts.port is not None
    return Server(proc, url, parts.port, parts.query.removeprefix("token="))


def stop_server(server: Server) -> tuple[str, str]:
    """Stop it with SIGTERM (as a person's Ctrl-C would) and return what it wrote."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        out, err = server.proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        out, err = server.proc.communicate()
    return out, err


@pytest.fixture
def served(home: Path, tmux_env: dict[str, str]) -> Iterator[Server]:
    server = start_server(home, tmux_env)
    yield server
    if server.proc.poll() is None:
        stop_server(server)


def request(
    server: Server,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def session_cookie(server: Server) -> str:
    """The cookie a first visit with the token sets (and check how it is set)."""
    status, headers, _ = request(server, "GET", f"/?token={server.token}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert server.token not in cookie  # a value derived from the token, never the token
    return cookie.split(";", 1)[0]


def save_artifact(shot: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / shot.name)
    print(f"screenshot: {shot}\nscreenshot: {ARTIFACTS / shot.name}")


def row_state(page, job_id: str) -> str | None:
    cell = page.query_selector(f'#jobs tr[data-job="{job_id}"] td.state')
    return cell.inner_text() if cell else None


@pytest.mark.timeout(120)
def test_the_page_shows_jobs_live_and_cancels_one(
    home: Path, tmux_env: dict[str, str], tmp_path: Path
):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    playwright = pytest.importorskip("playwright.sync_api")
    state = open_state(home)
    registered = {register_job(state, command=f"echo {i}")[0].job_id for i in range(50)}
    server = start_server(home, tmux_env)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("dialog", lambda dialog: dialog.accept())
            page.goto(server.url)
            assert page.url == f"http://127.0.0.1:{server.port}/"  # the token left the URL
            page.wait_for_selector("#jobs tbody tr:nth-child(50)")
            shown = set(
                page.eval_on_selector_all("#jobs tbody tr", "r => r.map(x => x.dataset.job)")
            )
            assert shown == registered
            for width in (1280, 800):
                page.set_viewport_size({"width": width, "height": 900})
                shot = tmp_path / f"dashboard-{width}px.png"
                page.screenshot(path=str(shot), full_page=False)
                save_artifact(shot)
                assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
            page.evaluate("window.notReloaded = true")

            # a job started now appears, and its `completed` changes its row, without reload
            done = submit_shell(home, tmux_env, tmp_path, "sleep 1", "--no-wait", "--json")
            assert done.returncode == 0, done.stderr
            quick = json.loads(done.stdout)["job_id"]
            page.wait_for_selector(f'#jobs tr[data-job="{quick}"]', timeout=15_000)
            page.wait_for_selector(
                f'#jobs tr[data-job="{quick}"][data-state="completed"]', timeout=30_000
            )
            assert "completed" in page.inner_text(f'#jobs tr[data-job="{quick}"] td.event')
            assert page.evaluate("window.notReloaded") is True

            # Cancel on a running job ends it: the registry says cancelled, the pane is gone
            hang = submit_shell(home, tmux_env, tmp_path, "sleep 300", "--no-wait", "--json")
            assert hang.returncode == 0, hang.stderr
            running = json.loads(hang.stdout)["job_id"]
            retry_until(lambda: state.registry.get(running).status is JobState.RUNNING, timeout=30)
            page.wait_for_selector(
                f'#jobs tr[data-job="{running}"][data-state="running"]', timeout=10_000
            )
            page.click(f'#jobs tr[data-job="{running}"] button[data-action="cancel"]')
            page.wait_for_selector(
                f'#jobs tr[data-job="{running}"][data-state="cancelled"]', timeout=15_000
            )
            assert state.registry.get(running).status is JobState.CANCELLED
            tmux = Tmux(tmux_env["DELEGATE_TMUX_SOCKET"])
            retry_until(
                lambda: all(pane.session != f"dlg-{running}" for pane in tmux.panes()), timeout=10
            )

            # the detail of a job: its timeline from the audit log
            page.click(f'#jobs tr[data-job="{quick}"] td.id')
            page.wait_for_selector("#detail:not([hidden])")
            assert "completed" in page.inner_text("#timeline")
            shot = tmp_path / "dashboard-detail-1280px.png"
            page.set_viewport_size({"width": 1280, "height": 900})
            page.screenshot(path=str(shot))
            save_artifact(shot)
            browser.close()
    finally:
        _out, err = stop_server(server)
    assert server.token not in err


def asked_ids(state: State, job_id: str) -> list[str]:
    return [r.request_id for r in waiting_requests(state, [job_id])]


def said(page) -> str:
    return page.inner_text("#detail-said")


LONG_CALL = "git push origin main; echo " + "x" * 220 + "; rm -rf ./build-tail"


@pytest.mark.timeout(180)
def test_detail_approves_denies_retries_and_shows_a_worktree_diff(
    home: Path, tmux_env: dict[str, str], tmp_path: Path
):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    playwright = pytest.importorskip("playwright.sync_api")
    state = open_state(home)
    # a stand-in agent in a worktree of a real repository: it writes a file, then asks twice
    # through the real `delegate hook` and its wrapper waits for a person
    repo = make_repo(tmp_path / "repo")
    script = "printf '%s\\n' '<b>from-the-agent</b>' > notes.txt\n"
    script += _asking(tmp_path, "asked", LONG_CALL, 2)
    asker = submit_in_worktree(home, tmux_env, repo, script)
    # and a job that ended (failed), to be retried
    plain = tmp_path / "plain"
    plain.mkdir()
    assert submit_shell(home, tmux_env, plain, "echo ran >> log.txt; exit 4").returncode == 1
    [ended] = [j.job_id for j in state.registry.list() if j.job_id != asker]
    [first] = retry_until(lambda: asked_ids(state, asker), timeout=30)
    server = start_server(home, tmux_env)
    try:
        # approve, deny and retry without the token (or with the cookie, without the page's
        # CSRF value) are refused and change nothing
        json_body = {"content-type": "application/json"}
        cookie = session_cookie(server)
        for headers in (json_body, {**json_body, "Cookie": cookie}):
            for path in (f"{asker}/approve", f"{asker}/deny", f"{ended}/retry"):
                status, _, _ = request(
                    server, "POST", f"/api/jobs/{path}", headers=headers, body=b"{}"
                )
                assert status == 403, (path, headers)
        time.sleep(0.3)  # a decision would be taken within milliseconds
        assert asked_ids(state, asker) == [first]
        assert not (tmp_path / "asked.0").read_text()  # the hook has no answer yet
        assert not state.audit.read_events(asker, kind="approval_sent")
        assert state.registry.get(ended).retried_by is None and len(state.registry.list()) == 2

        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "dialog",
                lambda d: d.accept("not today") if d.type == "prompt" else d.accept(),
            )
            blocked: list[str] = []  # what the page's policy refused (nothing may be)
            page.on("console", lambda m: blocked.append(m.text) if "Policy" in m.text else None)
            page.goto(server.url)
            page.click(f'#jobs tr[data-job="{asker}"] td.id')
            page.wait_for_selector(f'#requests li[data-request="{first}"]')
            # the whole call, past the 200 characters of its summary: never cut
            assert f"Bash: {LONG_CALL}" in page.inner_text("#requests")
            # the worktree's diff: the --stat summary and the patch
            page.wait_for_selector("#diff:not([hidden])")
            assert "notes.txt" in page.inner_text("#diff-stat")
            assert "+<b>from-the-agent</b>" in page.inner_text("#diff-patch")  # as text
            assert page.query_selector("#detail b") is None  # escaped, never markup
            cut = snapshot.worktree_diff(state, state.registry.get(asker), limit=20)
            assert cut["truncated"] and len(cut["patch"]) == 20  # bounded in size
            # one git run gives what `delegate diff --stat` and `delegate diff` give apart
            whole = snapshot.worktree_diff(state, state.registry.get(asker))
            apart = [worktrees.diff(state, asker, o, color=False) for o in (["--stat"], [])]
            assert [whole["stat"].encode(), whole["patch"].encode()] == apart
            shot = tmp_path / "dashboard-approve-diff-1280px.png"
            page.screenshot(path=str(shot))
            save_artifact(shot)

            # Approve releases the request: the hook answers allow
            page.click(f'#requests li[data-request="{first}"] button[data-action="approve"]')
            page.wait_for_selector("#detail-said:not(:empty)")
            assert said(page).startswith("allowed: Bash git push origin")
            assert _answer(tmp_path, "asked", 0) == {"behavior": "allow"}
            # the second request: Deny, with the reason typed into the prompt
            [second] = retry_until(lambda: [r for r in asked_ids(state, asker) if r != first])
            page.click(f'#jobs tr[data-job="{asker}"] td.id')
            page.wait_for_selector(f'#requests li[data-request="{second}"]')
            page.click(f'#requests li[data-request="{second}"] button[data-action="deny"]')
            page.wait_for_selector("#detail-said:text-matches('^denied')")
            assert said(page).startswith("denied: Bash git push origin")
            retry_until(lambda: state.registry.get(asker).status.terminal, timeout=30)
            assert _answer(tmp_path, "asked", 1) == {"behavior": "deny", "message": "not today"}
            made = state.audit.read_events(asker, kind="permission_decided")
            assert [(d["behavior"], d["maker"]) for d in made] == [
                ("allow", operator()),
                ("deny", operator()),
            ]

            # Retry on the ended job: attempt 2, with the same prompt, appears in the table
            page.click(f'#jobs tr[data-job="{ended}"] td.id')
            page.wait_for_selector(f'#detail[data-job="{ended}"]')
            page.click('#detail-actions button[data-action="retry"]')
            page.wait_for_selector("#detail-said:text-matches('^attempt')")
            again = state.registry.get(ended).retried_by
            assert again and said(page) == f"attempt 2 started as job {again}"
            attempt = state.registry.get(again)
            assert (attempt.attempt, attempt.retry_of) == (2, ended)
            page.wait_for_selector(f'#jobs tr[data-job="{again}"]', timeout=15_000)
            assert page.query_selector('#detail-actions button[data-action="retry"]') is None
            retry_until(lambda: (plain / "log.txt").read_text() == "ran\nran\n", timeout=30)
            page.set_viewport_size({"width": 800, "height": 900})
            shot = tmp_path / "dashboard-retried-800px.png"
            page.screenshot(path=str(shot))
            save_artifact(shot)
            assert not blocked, blocked
            browser.close()
    finally:
        _out, err = stop_server(server)
    assert server.token not in err


def test_without_the_token_nothing_is_shown_nor_changed(home: Path, tmux_env, served: Server):
    state = open_state(home)
    job = register_job(state, command="echo hi")[0]
    for path in ("/", "/api/jobs", f"/api/jobs/{job.job_id}", "/events", "/static/app.js"):
        status, _, body = request(served, "GET", path)
        assert status == 403, path
        assert job.job_id.encode() not in body
    wrong = request(served, "GET", "/?token=" + "x" * len(served.token))
    assert wrong[0] == 403 and "set-cookie" not in wrong[1]

    # a POST without the token (cookie) changes nothing; nor one with the cookie but no CSRF
    # header (another site's form), nor one from another origin
    cancel = f"/api/jobs/{job.job_id}/cancel"
    assert request(served, "POST", cancel)[0] == 403
    cookie = session_cookie(served)
    assert request(served, "POST", cancel, headers={"Cookie": cookie})[0] == 403
    page = request(served, "GET", "/", headers={"Cookie": cookie})[2].decode()
    csrf = page.split('name="csrf" content="', 1)[1].split('"', 1)[0]
    foreign = {"Cookie": cookie, "x-delegate-csrf": csrf, "Origin": "http://evil.example"}
    assert request(served, "POST", cancel, headers=foreign)[0] == 403
    assert state.registry.get(job.job_id).status is JobState.PENDING

    # with all of them: a decision too long is refused, and the services' one-line errors come
    # back (nothing waits for a decision; only an ended job is retried)
    allowed = {"Cookie": cookie, "x-delegate-csrf": csrf, "content-type": "application/json"}
    jobs = f"/api/jobs/{job.job_id}"
    long_reason = json.dumps({"reason": "x" * 5000}).encode()
    assert request(served, "POST", f"{jobs}/deny", headers=allowed, body=long_reason)[0] == 400
    status, _, body = request(served, "POST", f"{jobs}/approve", headers=allowed, body=b"{}")
    assert status == 409 and b"no permission request waiting" in body
    status, _, body = request(served, "POST", f"{jobs}/retry", headers=allowed)
    assert status == 409 and b"only an ended job is retried" in body
    assert state.registry.get(job.job_id).status is JobState.PENDING

    # with all of them it is cancelled
    status, _, body = request(
        served, "POST", cancel, headers={"Cookie": cookie, "x-delegate-csrf": csrf}
    )
    assert status == 200, body
    assert state.registry.get(job.job_id).status is JobState.CANCELLED


def test_token_never_logged_nor_in_argv_and_foreign_hosts_refused(served: Server):
    cmdline = Path(f"/proc/{served.proc.pid}/cmdline").read_bytes()
    assert served.token.encode() not in cmdline
    cookie = session_cookie(served)  # a request carrying the token in its query string
    assert request(served, "GET", "/api/jobs", headers={"Cookie": cookie})[0] == 200
    for host in ("evil.example", "evil.example:80", "127.0.0.1.nip.io"):
        status, _, body = request(
            served, "GET", "/api/jobs", headers={"Cookie": cookie, "Host": host}
        )
        assert status == 400, host
        assert b"rows" not in body
    assert (
        request(served, "GET", "/api/jobs", headers={"Cookie": cookie, "Host": "localhost:1"})[0]
        == 200
    )
    out, err = stop_server(served)
    assert served.token not in err
    assert served.token in served.url and served.token not in out  # printed once, in the URL


def test_read_only_refuses_actions(home: Path, tmux_env):
    state = open_state(home)
    job = register_job(state, command="echo hi")[0]
    server = start_server(home, tmux_env, "--read-only")
    try:
        cookie = session_cookie(server)
        page = request(server, "GET", "/", headers={"Cookie": cookie})[2].decode()
        assert '<meta name="read-only" content="true">' in page
        csrf = page.split('name="csrf" content="', 1)[1].split('"', 1)[0]
        headers = {"Cookie": cookie, "x-delegate-csrf": csrf}
        for action in ("cancel", "send", "approve", "deny", "retry"):
            path = f"/api/jobs/{job.job_id}/{action}"
            assert request(server, "POST", path, headers=headers)[0] == 403, action
        assert state.registry.get(job.job_id).status is JobState.PENDING
    finally:
        stop_server(server)


def test_binding_beyond_loopback_needs_tls_or_insecure(home: Path):
    refused = run_cli(home, "dashboard", "--bind", "0.0.0.0", "--port", "0", timeout=30)
    assert refused.returncode != 0
    [line] = refused.stderr.strip().splitlines()
    assert "--tls-cert" in line and "--insecure" in line
    half = run_cli(home, "dashboard", "--tls-cert", "c.pem", timeout=30)
    assert half.returncode != 0 and "--tls-key" in half.stderr


BLOCK_WEB = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "uvicorn", "sse_starlette"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Blocker())
from delegate.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_the_web_extra_it_says_how_to_install_it(home: Path):
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_WEB, "dashboard", "--port", "0"],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode != 0
    [line] = done.stderr.strip().splitlines()
    assert "pip install 'delegate[web]'" in line
    assert done.stdout == ""


def test_the_rest_of_the_toolkit_never_loads_the_web_extra(home: Path):
    probe = (
        "import sys\nfrom delegate.__main__ import main\ncode = main(sys.argv[1:])\n"
        "web = {'starlette', 'uvicorn', 'sse_starlette'}\n"
        "loaded = {n.split('.')[0] for n in sys.modules} & web\n"
        "sys.stderr.write('\\nLOADED ' + repr(sorted(loaded)))\nsys.exit(code)\n"
    )
    for argv in (["ps"], ["--help"]):
        done = subprocess.run(
            [sys.executable, "-c", probe, *argv], env=cli_env(home), capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip().splitlines()[-1] == "LOADED []", argv


def test_no_other_page_may_frame_the_dashboard(served: Server):
    """An agent's dev server on another localhost port cannot frame the page and have a person
    click Approve through it (issue 30): every answer, a refusal too, says so."""
    cookie = session_cookie(served)
    for headers in ({"Cookie": cookie}, {}):
        status, got, _ = request(served, "GET", "/", headers=headers)
        assert status in (200, 403)
        assert got["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in got["content-security-policy"]


def test_the_page_runs_no_inline_script(served: Server):
    """A strict policy (issue 30): script only from the dashboard's own file, never inline, so
    text an agent wrote (a detail, a call) can never run as script; the page has none inline
    (the table it carries is a JSON data block, never run)."""
    cookie = session_cookie(served)
    status, got, body = request(served, "GET", "/", headers={"Cookie": cookie})
    assert status == 200
    policy = dict(p.strip().split(" ", 1) for p in got["content-security-policy"].split(";"))
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
    assert "unsafe" not in got["content-security-policy"]
    page = body.decode()
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, flags=re.S)
    assert scripts
    for attributes, text in scripts:
        assert 'src="/static/' in attributes or 'type="application/json"' in attributes
        assert "src=" not in attributes or not text.strip()
    [src] = re.findall(r'<script src="([^"]+)"', page)
    status, got, body = request(served, "GET", src, headers={"Cookie": cookie})
    assert status == 200 and b"EventSource" in body
    assert "immutable" in got["cache-control"]  # its URL names its content: fetched once


def test_a_dashboard_on_every_interface_answers_a_request_by_ip(home: Path, tmux_env):
    """Bound to 0.0.0.0, a request naming the address it came in on is served (issue 30: it
    was refused as an unknown Host); a name, or an address it did not come in on, still is
    not (DNS rebinding)."""
    server = start_server(home, tmux_env, "--bind", "0.0.0.0", "--insecure")
    try:

        def asks(host: str, via: str = "127.0.0.2") -> int:
            conn = http.client.HTTPConnection(via, server.port, timeout=10)
            try:
                conn.request("GET", f"/?token={server.token}", headers={"Host": host})
                return conn.getresponse().status
            finally:
                conn.close()

        assert asks(f"127.0.0.2:{server.port}") == 303  # its token taken: on to the page
        assert asks(f"evil.example:{server.port}") == 400
        assert asks(f"127.0.0.3:{server.port}") == 400
    finally:
        stop_server(server)


def test_the_report_page_is_never_a_link(home: Path, tmux_env, tmp_path: Path):
    """`/report` serves the newest regular report file, never one a link stands in for
    (issue 30: a link to a secret was served)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's own secret\n")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "zz-latest.html").symlink_to(secret)
    server = start_server(home, tmux_env, "--report-dir", str(reports))
    try:
        cookie = session_cookie(server)
        status, _, body = request(server, "GET", "/report", headers={"Cookie": cookie})
        assert status == 404 and b"secret" not in body
        (reports / "report.html").write_text("<p>the report</p>")
        status, got, body = request(server, "GET", "/report", headers={"Cookie": cookie})
        assert status == 200 and body == b"<p>the report</p>"
        policy = got["content-security-policy"]  # its style and charts; never a script
        assert "sandbox" in policy and "script-src" not in policy and "default-src 'none'" in policy
    finally:
        stop_server(server)


def test_the_report_comes_from_the_state_dirs_report_folder(home: Path, served: Server):
    """By default `/report` looks where `delegate report --format html` writes: the state
    dir's `reports` folder, never a folder of the dashboard's working directory (issue 30)."""
    cookie = session_cookie(served)
    status, _, body = request(served, "GET", "/api/report", headers={"Cookie": cookie})
    assert status == 200
    assert json.loads(body) == {"available": False, "folder": str(home / "reports")}


def test_two_dashboards_on_one_host_keep_their_own_sessions(home: Path, tmux_env):
    """A browser keeps cookies by host, not port: each dashboard's cookie is named for its
    port, so opening a second one does not make the first answer 403 (issue 30)."""
    first = start_server(home, tmux_env)
    second = start_server(home, tmux_env)
    try:
        one, two = session_cookie(first), session_cookie(second)
        assert one.split("=")[0] != two.split("=")[0]
        both = f"{one}; {two}"  # what the browser sends each of them now
        assert request(first, "GET", "/api/jobs", headers={"Cookie": both})[0] == 200
        assert request(second, "GET", "/api/jobs", headers={"Cookie": both})[0] == 200
    finally:
        stop_server(first)
        stop_server(second)
