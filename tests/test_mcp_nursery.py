"""The state dir's MCP nursery (entry/mcp_nursery): the first claude job's wrapper starts it, and
the next job's warm `delegate mcp` is forked from it (the SDK loaded already), serving the real
claude; it is that job's alone (its folder, its pipe) and ends with it; an idle nursery ends."""

from __future__ import annotations

import json
import os
from pathlib import Path

from delegate.runtime.mcp_warm import nursery_socket

from .helpers import json_lines, retry_until, run_cli
from .models import AnthropicServer, claude_mcp, slow
from .real_claude import claude_job_env, claude_profile

NURSERY = "delegate.entry.mcp_nursery"


def _processes_of(module: str, home: Path) -> dict[int, Path]:
    """The processes of state dir `home` running `python -m module` (forks included: they keep
    its cmdline and first environment), with their working folders."""
    found = {}
    mine = f"DELEGATE_HOME={home}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            if module.encode() in argv and mine in environ:
                found[int(name)] = Path(os.readlink(f"/proc/{name}/cwd"))
        except OSError:
            continue
    return found


def _submit(home: Path, env: dict[str, str], work: Path, wait: bool) -> str:
    work.mkdir(parents=True, exist_ok=True)
    args = ["submit", "--agent", "claude", "--prompt", "Put it up.", "--workdir", str(work)]
    result = run_cli(home, *args, "--wait" if wait else "--no-wait", "--json", env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return str(json_lines(result.stdout)[0]["job_id"])


def test_the_second_jobs_warm_mcp_server_is_forked_from_the_nursery(home, tmux_env, tmp_path):
    server = AnthropicServer(
        [
            claude_mcp("delegate", "bb_put", key="result:first", value=1),
            slow("first done", delay=0.05, pieces=2),
            claude_mcp("delegate", "bb_put", key="result:second", value=2),
            slow("second done", delay=0.5, pieces=6),  # it lives on while we look
        ]
    ).start()
    try:
        claude_profile(home, server)
        env = claude_job_env(tmux_env, DELEGATE_MCP_WARM_S="30")
        _submit(home, env, tmp_path / "one", wait=True)
        path = nursery_socket(str(home))
        assert path is not None
        retry_until(lambda: Path(path).exists(), timeout=30)  # the first job's wrapper started it
        (nursery,) = _processes_of(NURSERY, home)
        second_work = tmp_path / "two"
        job_id = _submit(home, env, second_work, wait=False)

        def forked() -> list[int]:
            return [p for p, cwd in _processes_of(NURSERY, home).items() if cwd == second_work]

        (zygote,) = retry_until(forked, timeout=30)
        assert zygote != nursery
        assert Path(f"/proc/{zygote}/stat").read_text().split()[3] == str(nursery)  # its child
        done = run_cli(home, "watch", job_id, env=env, timeout=60)
        assert done.returncode == 0, done.stderr + done.stdout
        read = run_cli(home, "bb", "read", "result:second", env=env)
        assert json.loads(read.stdout) == 2  # the forked server served the real claude
        retry_until(lambda: not forked(), timeout=10)  # it ended with its job
        assert nursery in _processes_of(NURSERY, home)  # the nursery stays for the next job
    finally:
        server.stop()


def test_an_idle_nursery_ends(home, tmux_env, tmp_path):
    server = AnthropicServer([claude_mcp("delegate", "bb_put", key="k", value=1)]).start()
    try:
        claude_profile(home, server)
        # (idle 3 s: `--wait` returns once the supervisor settled the session, a pass away)
        env = claude_job_env(tmux_env, DELEGATE_MCP_WARM_S="3")
        _submit(home, env, tmp_path / "one", wait=True)
        path = nursery_socket(str(home))
        assert path is not None
        retry_until(lambda: Path(path).exists(), timeout=30)
        retry_until(lambda: not Path(path).exists(), timeout=30)  # idle 3 s: it ended
        retry_until(lambda: not _processes_of(NURSERY, home), timeout=5)
    finally:
        server.stop()
