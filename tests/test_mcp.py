"""`delegate mcp` driven by the MCP SDK's own stdio client, as a real subprocess on a fresh
DELEGATE_HOME: every tool listed with a schema, each tool's round trip, a lock held by job A
refused to job B, a sub-job that shows its parent in `delegate show`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters  # `make test` installs the `mcp` extra
from mcp.client.stdio import stdio_client

from delegate.adapters import mcp_handover
from delegate.core.model import Job
from delegate.runtime.mcp_warm import WarmServer
from delegate.services.jobs import mcp_config
from delegate.services.jobs.publish import publish_event
from delegate.services.jobs.register import register_job
from delegate.services.state import State
from tests.helpers import cli_env, json_lines, run_cli

TOOLS = {
    "msg_send", "msg_inbox", "msg_ack",
    "lock_acquire", "lock_renew", "lock_release", "lock_check",
    "claim_acquire", "claim_renew", "claim_release", "heartbeat",
    "bb_get", "bb_put", "bb_list", "bb_snapshot",
    "board_propose", "board_assess", "board_vote", "board_status",
    "job_submit", "job_status", "job_wait", "progress",
}  # fmt: skip


def new_job(state: State, *, started: bool = False) -> Job:
    job, _ = register_job(state, command="true", workdir=str(state.layout.home))
    if started:
        publish_event(state, job.job_id, "started")
    return job


@asynccontextmanager
async def served(
    home: Path, job_id: str, extra: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    env = cli_env(home, {"DELEGATE_JOB_ID": job_id, **(extra or {})})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "delegate", "mcp"], env=env, cwd=str(home.parent)
    )
    with open(home.parent / f"mcp-{job_id}.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    assert not result.is_error, text
    return json.loads(text)


async def refused(session: ClientSession, tool: str, **arguments: Any) -> str:
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    text = result.content[0].text  # type: ignore[union-attr]
    assert "\n" not in text
    return text


def test_every_tool_is_listed_with_a_schema_and_a_description(state: State, home: Path) -> None:
    job = new_job(state)

    async def main() -> None:
        async with served(home, job.job_id) as session:
            listed = (await session.list_tools()).tools
            assert {t.name for t in listed} == TOOLS
            for tool in listed:
                assert tool.description, tool.name
                assert tool.input_schema["type"] == "object", tool.name
                for name, prop in tool.input_schema.get("properties", {}).items():
                    assert prop.get("description"), (tool.name, name)
            lock = next(t for t in listed if t.name == "lock_acquire")
            # the owner is the job's, never the model's to choose
            assert set(lock.input_schema["properties"]) == {"resource", "ttl", "wait", "break_dead"}

    anyio.run(main)


def test_messages_blackboard_heartbeat_and_board_round_trip(state: State, home: Path) -> None:
    a, b = new_job(state), new_job(state)

    async def main() -> None:
        async with served(home, a.job_id) as sa, served(home, b.job_id) as sb:
            sent = await call(sa, "msg_send", type="task", to=b.job_id, data={"file": "a.py"})
            inbox = await call(sb, "msg_inbox")
            assert [m["data"] for m in inbox["messages"]] == [{"file": "a.py"}]
            assert inbox["messages"][0]["from"] == a.job_id
            await call(sb, "msg_ack", seq=sent["seq"])
            assert (await call(sb, "msg_inbox"))["messages"] == []

            put = await call(sa, "bb_put", key="task:q4", value={"status": "pending"})
            assert put["version"] == 1 and put["source_agent"] == a.job_id
            got = await call(sb, "bb_get", key="task:q4")
            assert got["entry"]["value"] == {"status": "pending"}
            stale = await refused(sb, "bb_put", key="task:q4", value=1, if_version=0)
            assert stale.endswith("(exit 75)")
            assert [e["key"] for e in (await call(sb, "bb_list", prefix="task:"))["entries"]] == [
                "task:q4"
            ]
            assert set((await call(sb, "bb_snapshot"))["snapshot"]) == {"task:q4"}

            beat = await call(sa, "heartbeat", status="working", task="q4", progress=40)
            assert beat["agent"] == a.job_id

            opened = await call(sa, "board_propose", voters=[a.job_id], proposal="x", rounds=0)
            await call(sa, "board_assess", verdict="approve")
            voted = await call(sa, "board_vote", verdict="approve", board=opened["board"])
            assert voted["phase"] == "resolve"
            assert (await call(sb, "board_status"))["board"] == opened["board"]
            not_voter = await refused(sb, "board_vote", verdict="approve")
            assert "is not a voter" in not_voter

    anyio.run(main)
    shown = run_cli(home, "agents", "--json")
    assert a.job_id in shown.stdout


def test_a_lock_held_by_job_a_is_refused_to_job_b(state: State, home: Path) -> None:
    a, b = new_job(state), new_job(state)

    async def main() -> None:
        async with served(home, a.job_id) as sa, served(home, b.job_id) as sb:
            grant = await call(sa, "lock_acquire", resource="src/app.py", ttl=60)
            assert grant["owner"] == a.job_id and grant["token"] >= 1
            held = await refused(sb, "lock_acquire", resource="src/app.py")
            assert held.endswith("(exit 75)"), held
            not_holder = await refused(sb, "lock_release", resource="src/app.py")
            assert f"held by {a.job_id}, not {b.job_id} (exit 77)" in not_holder
            assert "(exit 77)" in await refused(sb, "lock_renew", resource="src/app.py")
            assert (await call(sb, "lock_check", resource="src/app.py", token=grant["token"]))[
                "current"
            ]
            renewed = await call(sa, "lock_renew", resource="src/app.py", ttl=120)
            assert renewed["token"] == grant["token"]
            await call(sa, "lock_release", resource="src/app.py")

            claim = await call(sb, "claim_acquire", task="build-docs", lease=30)
            assert "(exit 75)" in await refused(sa, "claim_acquire", task="build-docs")
            assert "(exit 77)" in await refused(sa, "claim_release", task="build-docs")
            assert (await call(sb, "claim_renew", task="build-docs"))["token"] == claim["token"]
            await call(sb, "claim_release", task="build-docs")

    anyio.run(main)
    # the CLI sees the same store: B's claim is gone, A holds no lock
    assert run_cli(home, "lock", "list", "--json").stdout.strip() in ("", "[]")


def test_a_waiting_acquire_leaves_the_servers_other_calls_free(state: State, home: Path) -> None:
    """B waits for A's lock; meanwhile B's other calls are answered, and A's release grants it
    (a wait that blocked the server's loop would answer nothing until its 30 s ran out)."""
    a, b = new_job(state), new_job(state)
    order: list[str] = []

    async def main() -> None:
        async with served(home, a.job_id) as sa, served(home, b.job_id) as sb:
            await call(sa, "lock_acquire", resource="shared", ttl=60)

            async def wait_for_it() -> None:
                grant = await call(sb, "lock_acquire", resource="shared", ttl=60, wait=30)
                order.append(f"granted to {grant['owner']}")

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(wait_for_it)
                await anyio.sleep(0.3)  # B's acquire is in flight, waiting
                inbox = await call(sb, "msg_inbox", wait=0.2)
                order.append(f"inbox of {inbox['agent']}")
                await call(sa, "lock_release", resource="shared")

    anyio.run(main)
    assert order == [f"inbox of {b.job_id}", f"granted to {b.job_id}"]


def test_progress_is_an_event_of_the_servers_own_job(state: State, home: Path) -> None:
    job = new_job(state, started=True)

    async def main() -> None:
        async with served(home, job.job_id) as session:
            sent = await call(session, "progress", detail="half way", percent=50)
            assert sent == {"job_id": job.job_id, "event": "progress", "detail": "half way"}
            status = await call(session, "job_status", job_id=job.job_id)
            assert status["last_seq"] == 2 and "auth_token" not in status

    anyio.run(main)
    events = json_lines(run_cli(home, "logs", job.job_id, "--json").stdout)
    progress = [e for e in events if e.get("event") == "progress"]
    assert progress and progress[-1]["envelope"]["detail"] == "half way"
    assert progress[-1]["envelope"]["data"]["percent"] == 50


def test_a_sub_job_records_its_parent_and_can_be_waited_for(
    state: State, home: Path, tmux_env: dict[str, str]
) -> None:
    parent = new_job(state, started=True)

    async def main() -> str:
        async with served(home, parent.job_id, tmux_env) as session:
            child = await call(session, "job_submit", prompt="echo hi", agent="shell")
            assert child["parent"] == parent.job_id
            done = await call(session, "job_wait", job_id=child["job_id"], timeout=60)
            assert done["ended"] and done["job"]["status"] == "completed", done
            return str(child["job_id"])

    child_id = anyio.run(main)
    shown = json.loads(run_cli(home, "show", child_id, "--json", env=tmux_env).stdout)
    assert shown["parent"] == parent.job_id


def test_sub_jobs_stop_at_the_depth_limit(state: State, home: Path) -> None:
    job = new_job(state)
    for _ in range(3):  # three levels of parents above the server's job
        below, _ = state.registry.register(command="true", parent=job.job_id)
        job = below

    async def main() -> None:
        async with served(home, job.job_id) as session:
            text = await refused(session, "job_submit", prompt="x", cmd="true")
            assert "depth 3" in text and text.endswith("(exit 64)")

    anyio.run(main)


def test_the_server_refuses_a_process_outside_a_job_in_one_line(home: Path) -> None:
    result = run_cli(home, "mcp")
    assert result.returncode == 64
    assert result.stderr.strip().splitlines() == [
        "delegate: delegate mcp serves one job: run it inside a job (DELEGATE_JOB_ID is unset)"
    ]


def test_without_the_sdk_it_says_how_to_install_it(home: Path, tmp_path: Path) -> None:
    hide = tmp_path / "nomcp"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mcp' or name.startswith('mcp.'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Hide())\n"
    )
    env = {"PYTHONPATH": str(hide), "DELEGATE_JOB_ID": "0a1b2c3d"}
    result = run_cli(home, "mcp", env=env)
    assert result.returncode == 69
    assert result.stderr.strip().splitlines() == [
        "delegate: delegate mcp needs the MCP SDK: pip install 'delegate[mcp]'"
    ]


CLAUDE = Path(__file__).resolve().parents[1] / ".cache/agents/node_modules/.bin/claude"


def test_claude_and_codex_get_the_server_and_nothing_secret(state: State, tmp_path: Path) -> None:
    job = new_job(state)
    env = {"DELEGATE_JOB_ID": job.job_id, "DELEGATE_HOME": str(state.layout.home)}
    job_dir = state.audit.job_dir(job.job_id, create=True)
    claude = mcp_config.register("claude", ["claude", "-p"], job_dir, env)
    config_file = job_dir / "mcp.json"
    # our own tools allowed (print mode refuses an MCP call no one allowed), as one word each
    assert claude == ["claude", "-p", "--allowedTools=mcp__delegate", f"--mcp-config={config_file}"]
    assert config_file.stat().st_mode & 0o777 == 0o600
    server = json.loads(config_file.read_text())["mcpServers"]["delegate"]
    assert server["args"] == ["-m", "delegate.entry.mcp"] and server["env"] == env
    codex = mcp_config.register("codex", ["codex", "exec", "--json", "-"], job_dir, env)
    assert codex[:2] == ["codex", "exec"] and codex[-2:] == ["--json", "-"]
    assert f'mcp_servers.delegate.env.DELEGATE_JOB_ID="{job.job_id}"' in codex
    assert job.auth_token not in " ".join(codex) + config_file.read_text()
    assert mcp_config.register("shell", ["bash", "x"], job_dir, env) == ["bash", "x"]


def test_the_pinned_claude_cli_lists_the_generated_server(state: State, tmp_path: Path) -> None:
    """`claude mcp list` ignores --mcp-config; it reads a project's .mcp.json, which has the
    same format: the generated file there is listed (pending approval, nothing started)."""
    claude = (
        CLAUDE if CLAUDE.exists() else Path("/work/main") / CLAUDE.relative_to(CLAUDE.parents[4])
    )
    if not claude.exists():
        pytest.skip("the pinned claude CLI is not installed (make installs it under .cache/agents)")
    job = new_job(state)
    job_dir = state.audit.job_dir(job.job_id, create=True)
    mcp_config.register("claude", ["claude"], job_dir, {"DELEGATE_JOB_ID": job.job_id})
    project = tmp_path / "project"
    project.mkdir()
    (project / ".mcp.json").write_bytes((job_dir / "mcp.json").read_bytes())
    (tmp_path / "claudehome").mkdir()
    listed = subprocess.run(
        [str(claude), "mcp", "get", "delegate"],
        cwd=project,
        env={"HOME": str(tmp_path / "claudehome"), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert f"{sys.executable}" in listed.stdout and "-m delegate.entry.mcp" in listed.stdout
    assert f"DELEGATE_JOB_ID={job.job_id}" in listed.stdout


# --- the warm server (runtime/mcp_warm, entry/mcp_zygote) -----------------------------------


@contextmanager
def warm_server(state: State, job: Job) -> Iterator[WarmServer]:
    """A zygote started as the wrapper starts it: the job's environment, its log folder."""
    env = cli_env(state.layout.home, {"DELEGATE_JOB_ID": job.job_id})
    job_dir = state.audit.job_dir(job.job_id, create=True)
    warm = WarmServer.start(job_dir, env)
    try:
        yield warm
    finally:
        warm.stop()


def wait_ready(state: State, job: Job) -> None:
    log = state.audit.job_dir(job.job_id) / "mcp-warm.log"
    deadline = time.monotonic() + 60
    while " ready (pid " not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)


def children_of(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def test_a_warm_server_serves_the_jobs_agent_on_its_own_pipes(state: State, home: Path) -> None:
    job = new_job(state)

    async def main(warm: WarmServer) -> None:
        async with served(home, job.job_id) as session:
            assert len(children_of(warm.pid)) == 1  # the forked child serves this session
            grant = await call(session, "lock_acquire", resource="src/app.py", ttl=60)
            assert grant["owner"] == job.job_id  # the job's identity, from its environment
            await call(session, "lock_release", resource="src/app.py")

    with warm_server(state, job) as warm:
        anyio.run(main, warm)
    log = (state.audit.job_dir(job.job_id) / "mcp-warm.log").read_text()  # written after fork
    assert "serving a client in process" in log
    assert not (state.audit.job_dir(job.job_id) / "mcp.sock").exists()
    assert warm.proc.returncode is not None


def test_the_warm_servers_child_says_why_it_stopped_and_its_status_is_the_clients(
    state: State, home: Path
) -> None:
    job = new_job(state, started=True)
    with warm_server(state, job):
        wait_ready(state, job)
        publish_event(state, job.job_id, "completed")  # an ended job is served by no one
        env = cli_env(home, {"DELEGATE_JOB_ID": job.job_id})
        result = subprocess.run(
            [sys.executable, "-m", "delegate.entry.mcp"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    log = (state.audit.job_dir(job.job_id) / "mcp-warm.log").read_text()  # written after fork
    assert "serving a client in process" in log  # the refusal came from the warm child
    assert result.returncode == 64, result
    assert result.stderr.strip().splitlines() == [
        f"delegate: job {job.job_id} has ended (completed)"
    ]


def test_a_served_client_ends_on_sigint_as_claude_ends_its_mcp_servers(
    state: State, home: Path
) -> None:
    """Claude Code ends an MCP server with SIGINT and sends SIGTERM only 100 ms later: the
    client hands SIGINT to the child serving it, which ends at once, stdin still open (a
    stdio server blocked reading it once ignored KeyboardInterrupt until SIGTERM came)."""
    job = new_job(state, started=True)
    with warm_server(state, job) as warm:
        wait_ready(state, job)
        env = cli_env(home, {"DELEGATE_JOB_ID": job.job_id})
        client = subprocess.Popen(
            [sys.executable, "-m", "delegate.entry.mcp"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert client.stdin is not None and client.stdout is not None
        hello = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        }
        client.stdin.write(json.dumps(hello).encode() + b"\n")
        client.stdin.flush()
        assert json.loads(client.stdout.readline())["id"] == 0  # served, by the warm child
        (child,) = children_of(warm.pid)
        client.send_signal(signal.SIGINT)
        try:
            assert client.wait(timeout=30) == 128 + signal.SIGINT
        finally:
            client.kill()
            client.stdin.close()
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not Path(f"/proc/{child}").exists()


def test_a_stale_socket_or_another_jobs_server_means_serving_in_process(
    state: State, home: Path
) -> None:
    a, b = new_job(state), new_job(state)
    state.audit.job_dir(a.job_id, create=True)
    # where A's client looks: its log folder, or the temp folder when that path is too long
    stale = mcp_handover.socket_path(str(home), a.job_id)
    assert stale is not None
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)  # a socket nobody listens on: a zygote killed with SIGKILL
    dead.close()

    async def main() -> None:
        async with served(home, a.job_id) as session:
            assert (await call(session, "heartbeat", task="x"))["agent"] == a.job_id

    anyio.run(main)
    with warm_server(state, b) as warm:
        path = mcp_handover.socket_path(str(home), b.job_id)
        assert path is not None
        wait_ready(state, b)
        assert mcp_handover.hand_over(path, a.job_id) is None  # B's server refuses A
        assert children_of(warm.pid) == []


def test_a_jobs_warm_server_lives_as_long_as_its_agent(home: Path, tmux_env, tmp_path: Path):
    """A real job in real tmux whose (stand-in) claude agent uses `delegate mcp` from the
    config its profile registered: the job's warm server serves it, and is gone after."""
    home.mkdir(parents=True, exist_ok=True)
    agent = [sys.executable, str(Path(__file__).parent / "agents" / "mcp_agent.py")]
    (home / "delegate.toml").write_text(
        f'[profiles.claude]\ncommand = {json.dumps(agent)}\nprompt = "stdin"\npreamble = false\n'
    )
    result = run_cli(
        home, "submit", "--wait", "--agent", "claude", "--prompt", "lock it",
        "--workdir", str(tmp_path), env=tmux_env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[-1]["job_id"]
    taken = json.loads((tmp_path / "mcp_result.json").read_text())
    assert not taken["is_error"] and taken["result"]["owner"] == job_id
    job_dir = home / "logs" / job_id
    log = (job_dir / "mcp-warm.log").read_text()
    assert "serving a client in process" in log
    pid = int(log.split("(pid ")[1].split(")")[0])
    deadline = time.monotonic() + 15
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()
    assert not (job_dir / "mcp.sock").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another user needs root")
def test_a_warm_server_refuses_another_user(tmp_path: Path) -> None:
    """Even through a socket others may open (0666 here; the real one is 0600 in 0700
    folders), the warm server serves its own user only (SO_PEERCRED)."""
    top = Path(tempfile.mkdtemp(prefix="dlg-mcp-"))  # tmp_path's parents are closed to others
    try:
        state = State.open(env={"DELEGATE_HOME": str(top / "state")})
        job = new_job(state)
        with warm_server(state, job):
            wait_ready(state, job)
            path = mcp_handover.socket_path(str(state.layout.home), job.job_id)
            assert path is not None
            for folder in (top, state.layout.home, state.layout.logs, Path(path).parent):
                os.chmod(folder, 0o711)
            os.chmod(path, 0o666)
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the other user: nobody
                try:
                    os.setgid(65534)
                    os.setuid(65534)
                    os.write(write, repr(mcp_handover.hand_over(path, job.job_id)).encode())
                finally:
                    os._exit(0)
            os.close(write)
            answer = os.read(read, 100)
            os.waitpid(pid, 0)
            log = (state.audit.job_dir(job.job_id) / "mcp-warm.log").read_text()
        assert answer == b"None"
        assert "refused a connection from uid 65534" in log
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_handover_reads_both_answers_when_they_come_in_one_read() -> None:
    """A child that ends at once: "S<pid>" and its status arrive together, and the status must
    not be taken for garbage (the client would then serve a second time, in process)."""
    import _socket

    ours, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        theirs.sendall(b"S4242\n64\n")
        theirs.close()
        lines = mcp_handover._Lines(ours)
        assert lines.next() == b"S4242"
        assert mcp_handover._exit_status(lines, []) == 64
    finally:
        ours.close()
