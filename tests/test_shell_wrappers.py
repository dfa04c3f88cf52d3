"""Every script in shell/ is run here: --help, and the flow it wraps against real tmux."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from delegate.core.model import JobState
from delegate.services.state import State

from .helpers import cli_env, retry_until

SHELL = Path(__file__).resolve().parent.parent / "shell"
WRAPPERS = [
    "delegate-job",
    "delegate-monitor",
    "delegate-session-create",
    "delegate-session-stop",
    "delegate-session-resume",
]


def sh(home: Path, env, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run a wrapper the way a user would: `delegate` on PATH (this installation's)."""
    import os
    import sys

    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    return subprocess.run(
        [str(SHELL / argv[0]), *argv[1:]],
        env=cli_env(home, {**env, "PATH": path}),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=home.parent,
    )


@pytest.mark.parametrize("script", WRAPPERS)
def test_every_wrapper_has_help_and_refuses_nothing_silently(home: Path, script: str):
    shown = sh(home, {}, script, "--help")
    assert shown.returncode == 0 and "usage:" in shown.stdout
    if script != "delegate-monitor":
        missing = sh(home, {}, script)
        assert missing.returncode == 64 and "usage:" in missing.stderr


def test_the_wrapped_flows_run(home: Path, tmux_env, tmp_path: Path):
    task = tmp_path / "task.sh"
    task.write_text("echo done > job.txt\n")
    job = sh(home, tmux_env, "delegate-job", "shell", str(task), str(tmp_path))
    assert job.returncode == 0, job.stderr
    assert (tmp_path / "job.txt").read_text() == "done\n"
    assert [json.loads(line)["event"] for line in job.stdout.splitlines()][-1] == "completed"

    waiting = tmp_path / "wait.sh"
    waiting.write_text("trap 'exit 0' INT\ntouch up\nsleep 300\n")
    created = sh(
        home, tmux_env, "delegate-session-create", "wrapped", "shell", str(waiting), str(tmp_path)
    )
    assert created.returncode == 0, created.stderr
    job_id = created.stdout.strip()
    retry_until((tmp_path / "up").exists, timeout=30)
    stopped = sh(home, tmux_env, "delegate-session-stop", "wrapped", "graceful", "10")
    assert stopped.returncode == 0, stopped.stderr
    state = State.open(env={"DELEGATE_HOME": str(home)})
    assert state.registry.get(job_id).status is JobState.CANCELLED
    again = tmp_path / "again.sh"
    again.write_text("echo again > again.txt\n")
    resumed = sh(home, tmux_env, "delegate-session-resume", "wrapped", str(again))
    assert resumed.returncode == 0, resumed.stderr
    retry_until(lambda: (tmp_path / "again.txt").exists(), timeout=30)
    monitor = sh(home, tmux_env, "delegate-monitor", "--once", "--json")
    assert monitor.returncode == 0, monitor.stderr


def test_the_report_helper_reports_from_a_job(home: Path, tmux_env, tmp_path: Path):
    task = tmp_path / "report.sh"
    task.write_text(
        f'. "{SHELL / "delegate-report.sh"}"\nreport progress "half way"\n'
        'report completed "all done"\n'
    )
    job = sh(home, tmux_env, "delegate-job", "shell", str(task), str(tmp_path))
    assert job.returncode == 0, job.stderr
    events = [json.loads(line) for line in job.stdout.splitlines()]
    assert [(e["event"], e["detail"]) for e in events[1:]] == [
        ("progress", "half way"),
        ("completed", "all done"),
    ]
