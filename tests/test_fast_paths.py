"""What scripts and agents call most stays light: `delegate publish`, `delegate hook` and a
`cron run` whose window's job exists load none of the heavy libraries, checked in a fresh
process through the real entry point (its `sys.modules` after the call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from delegate.services.state import State

from .helpers import cli_env, retry_until, run_cli
from .test_cron import job_file

HEAVY = ("typer", "click", "rich", "paho", "libtmux", "pyspark", "croniter", "networkx")

# Runs `delegate ARGV...` through the console entry point in this process, then reports which
# heavy modules the call loaded, on stderr's last line.
PROBE = f"""
import json, sys
from delegate.__main__ import main
code = main(sys.argv[1:])
heavy = sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r}))
sys.stderr.write("\\nLOADED " + json.dumps(heavy) + "\\n")
sys.exit(code)
"""


def _probe(
    home: Path, *argv: str, env: dict[str, str] | None = None, stdin: str = ""
) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        env=cli_env(home, env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("LOADED "), done.stderr
    return done.returncode, json.loads(last.removeprefix("LOADED ")), done.stdout


def test_publish_and_hook_load_nothing_heavy(home: Path):
    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    code, loaded, out = _probe(home, "publish", "--job", job_id, "--event", "started")
    assert code == 0 and json.loads(out)["seq"] == 1
    assert loaded == []
    code, loaded, _ = _probe(
        home,
        "hook",
        env={"DELEGATE_JOB_ID": job_id},
        stdin=json.dumps({"hook_event_name": "Stop"}),
    )
    assert code == 0 and loaded == []
    published = State.open(env=cli_env(home)).audit.read_events(job_id, "published")
    assert [e["event"] for e in published] == ["started", "progress"]  # the hook's Stop


def test_a_cron_run_whose_job_exists_loads_nothing_heavy(home: Path, tmux_env, tmp_path: Path):
    path = job_file(tmp_path)
    tab = tmp_path / "tab"
    # once a year: both runs fall in the same window whatever the clock does meanwhile
    added = run_cli(home, "cron", "add", "0 0 1 1 *", str(path), "--file", str(tab), env=tmux_env)
    assert added.returncode == 0, added.stderr
    first = run_cli(home, "cron", "run", "nightly", env=tmux_env)  # the full path submits
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.split()[0]
    state = State.open(env=cli_env(home, tmux_env))
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    code, loaded, out = _probe(home, "cron", "run", "nightly", env=tmux_env)
    assert code == 0 and out.split()[0] == job_id and "already submitted" in out
    assert loaded == []
