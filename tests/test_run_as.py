"""`run_as`: an agent started as another OS user cannot read the registry, and reports only for
its own job, through its wrapper. Needs root (the test creates, and removes, its own user)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import json_lines, run_cli

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creating a user needs root")


@pytest.fixture
def agent_user() -> Iterator[str]:
    name = f"dlg{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def readable_toolkit() -> Iterator[Path]:
    """A copy of the toolkit's source other users can read (a checkout may sit in a 0700
    folder): what a system-wide install gives an agent's user."""
    folder = Path(tempfile.mkdtemp(prefix="dlg-toolkit-"))
    os.chmod(folder, 0o755)
    shutil.copytree(ROOT / "delegate", folder / "delegate", ignore=shutil.ignore_patterns("*.pyc"))
    for path in folder.rglob("*"):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def shared_workdir(agent_user: str) -> Iterator[Path]:
    """A workdir the agent's user owns (the test's tmp_path is closed to other users)."""
    folder = Path(tempfile.mkdtemp(prefix="dlg-run-as-"))
    shutil.chown(folder, agent_user, agent_user)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# The agent reports with the system Python and a readable copy of the toolkit's source (the
# venv's interpreter lives under /root, and a checkout may sit in a 0700 folder).
AGENT = """
cat "$DELEGATE_HOME/jobs/$DELEGATE_JOB_ID.json" > /dev/null 2> denied.txt; echo $? > denied.code
id -u > uid.txt
report() {{ /usr/bin/python3 -m delegate publish "$@"; }}
report --event progress --detail "as another user"
report --job {other} --event progress --detail "not mine" 2> other.err; echo $? > other.code
/usr/bin/python3 -c "
from delegate.adapters.publish_socket import request; import os, json
print(json.dumps(request(os.environ['DELEGATE_PUBLISH_SOCKET'],
      {{'job': '{other}', 'event': 'progress'}})))" > socket-other.json
report --event completed --detail done
"""


def confined(agent_user: str, toolkit: Path, more: str = "") -> str:
    """The profile these tests run: a shell agent as `agent_user`, reporting with the system
    Python and a readable copy of the toolkit."""
    return textwrap.dedent(f"""
        [profiles.confined]
        command = ["/bin/sh", "-s"]
        prompt = "stdin"
        preamble = false
        run_as = "{agent_user}"
        env = {{ PYTHONPATH = "{toolkit}" }}
    """) + textwrap.dedent(more)


def submit_confined(home: Path, tmux_env, workdir: Path, prompt: str, *extra: str):
    return run_cli(
        home,
        "submit",
        "--wait",
        "--agent",
        "confined",
        "--workdir",
        str(workdir),
        "--prompt",
        prompt,
        "--idle-timeout",
        "60",
        *extra,
        env=tmux_env,
    )


def test_an_agent_run_as_another_user(
    home: Path, tmux_env, agent_user: str, shared_workdir, readable_toolkit
):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(confined(agent_user, readable_toolkit))
    state = State.open(env={"DELEGATE_HOME": str(home)})
    other, _ = state.registry.register(command="someone else's")
    result = submit_confined(home, tmux_env, shared_workdir, AGENT.format(other=other.job_id))
    assert result.returncode == 0, result.stderr + (shared_workdir / "other.err").read_text()
    events = json_lines(result.stdout)
    assert [(e["event"], e["detail"]) for e in events] == [
        ("started", "confined starting"),
        ("progress", "as another user"),
        ("completed", "done"),
    ]
    import pwd

    assert int((shared_workdir / "uid.txt").read_text()) == pwd.getpwnam(agent_user).pw_uid
    assert (shared_workdir / "denied.code").read_text().strip() != "0"
    assert "Permission denied" in (shared_workdir / "denied.txt").read_text()
    assert (shared_workdir / "other.code").read_text().strip() == "74"
    assert "Permission denied" in (shared_workdir / "other.err").read_text()
    refused = (shared_workdir / "socket-other.json").read_text()
    assert '"ok": false' in refused and "reports for job" in refused
    untouched = state.registry.get(other.job_id)
    assert untouched.status is JobState.PENDING and untouched.last_seq == 0
    assert not list(Path(tempfile.gettempdir()).glob(f"delegate-{events[0]['job_id']}-*"))


def test_run_as_an_unknown_user_is_refused_at_submit(home: Path, tmux_env, tmp_path: Path):
    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        '[profiles.nobody-here]\ncommand = ["true"]\nrun_as = "no-such-user-x"\n'
    )
    result = run_cli(home, "submit", "--agent", "nobody-here", "--prompt", "x", env=tmux_env)
    assert result.returncode == 64 and "no user 'no-such-user-x'" in result.stderr
    assert State.open(env={"DELEGATE_HOME": str(home)}).registry.list() == []


BOXED = """
exec > results 2>&1
id -u
tell() {{ if "$@" > /dev/null 2>&1; then echo "READ"; else echo "refused"; fi; }}
tell cat "$DELEGATE_HOME/jobs/$DELEGATE_JOB_ID.json"
tell cat {note}
tell /usr/bin/python3 -c 'import socket; socket.create_connection(("127.0.0.1", {port}), 5)'
echo written > made-inside
/usr/bin/python3 -m delegate publish --event progress --detail "boxed, as another user"
"""


def test_run_as_with_a_sandbox_runs_the_agent_boxed_as_its_user(
    home: Path, tmux_env, agent_user: str, shared_workdir: Path, readable_toolkit: Path
):
    """bubblewrap runs as the agent's user: the box binds in only what that user may read (its
    publish socket's folder, not the job's log folder), and the agent, as that user, cannot
    read the registry nor a file its user could read outside the box, has no network, writes
    its workdir, reports through its socket and completes. The same script unboxed reads the
    file and reaches the port: the checks can fail."""
    import pwd
    import socket

    shared = Path(tempfile.mkdtemp(prefix="dlg-visible-"))  # readable by every user
    os.chmod(shared, 0o755)
    (shared / "note").write_text("readable outside the box\n")
    os.chmod(shared / "note", 0o644)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.listen(8)
    home.mkdir(parents=True, exist_ok=True)
    boxed = """
        sandbox = true
        network = "none"

        [sandbox]
        read = ["{toolkit}"]
    """
    more = boxed.format(toolkit=readable_toolkit)
    (home / "delegate.toml").write_text(confined(agent_user, readable_toolkit, more))
    script = BOXED.format(note=shared / "note", port=listener.getsockname()[1])

    def run(*extra: str) -> tuple[list[str], list[dict]]:
        result = submit_confined(home, tmux_env, shared_workdir, script, *extra)
        results = shared_workdir / "results"
        said = results.read_text().splitlines() if results.exists() else []
        assert result.returncode == 0, result.stderr + "\n".join(said)
        return said, json_lines(result.stdout)

    try:
        said, events = run()
        unboxed, _ = run("--no-sandbox")
    finally:
        listener.close()
        shutil.rmtree(shared, ignore_errors=True)
    uid = str(pwd.getpwnam(agent_user).pw_uid)
    assert said[:4] == [uid, "refused", "refused", "refused"], said  # registry, note, port
    assert unboxed[:4] == [uid, "refused", "READ", "READ"], unboxed
    assert json.loads(said[-1])["event"] == "progress"  # its receipt, through the socket
    assert (shared_workdir / "made-inside").read_text() == "written\n"
    assert [e["event"] for e in events] == ["started", "progress", "completed"]
    job = State.open(env={"DELEGATE_HOME": str(home)}).registry.get(events[0]["job_id"])
    assert job.launch["sandbox"]["network"] == "none" and job.launch["run_as"] == agent_user


def test_run_as_with_an_egress_allowlist_is_refused_in_one_line(
    home: Path, tmux_env, agent_user: str
):
    """Not supported yet (the egress relay in the box is this toolkit's Python, which the
    agent's user may not run): refused at submit, naming both and the way out; nothing is
    recorded. A sandbox with no network, or the host's, runs (above)."""
    from .helpers import refused_submit

    home.mkdir(parents=True, exist_ok=True)
    (home / "delegate.toml").write_text(
        f'[profiles.shell]\nrun_as = "{agent_user}"\nsandbox = true\n'
    )
    refused = refused_submit(home, tmux_env)  # the default network: the allowlist
    assert f"runs as {agent_user!r}" in refused.stderr and 'network = "none"' in refused.stderr
    also = refused_submit(home, tmux_env, "--sandbox")
    assert "allowlist together with run_as is not supported yet" in also.stderr
