"""No decision comes from inside a job (issue 30, item 4): `delegate approve` run by an agent,
in its pane or by whatever it starts, even with DELEGATE_JOB_ID removed from its environment,
is refused in one line and audited on the job it tried to answer; the request still waits for a
person, who answers it from a shell of their own."""

from __future__ import annotations

import sys
from pathlib import Path

from .helpers import cli_env, delegate_cmd, json_lines, retry_until, run_cli
from .pty_run import run_in_pty
from .test_approvals import _answer, _asking, _waiting
from .test_monitor import open_state, submit_no_wait

DELEGATE = str(Path(sys.executable).parent / "delegate")


def test_an_agent_cannot_approve_a_request_even_without_its_job_variable(
    home: Path, tmux_env, tmp_path: Path
):
    long_call = "rm -rf build && " + "echo " + "z" * 300  # longer than any summary line
    asking = submit_no_wait(home, tmux_env, tmp_path, _asking(tmp_path, "asked", long_call))
    (waiting,) = _waiting(home, tmux_env, asking)
    assert waiting["call"] == long_call  # `approvals --json` carries the whole call
    shown = run_in_pty(delegate_cmd("approvals"), env=cli_env(home, tmux_env), columns=80)
    folded = "".join(line.strip() for line in shown.output.splitlines())
    assert "z" * 300 in folded and "…" not in shown.output  # and a person reads it whole
    script = "\n".join(
        [
            f"{DELEGATE} approve {asking} --remember 2> {tmp_path}/err1; echo $? > {tmp_path}/rc1",
            f"env -u DELEGATE_JOB_ID {DELEGATE} approve {asking} 2> {tmp_path}/err2;"
            f" echo $? > {tmp_path}/rc2",
        ]
    )
    inside = submit_no_wait(home, tmux_env, tmp_path, script)
    retry_until(lambda: (tmp_path / "rc2").exists(), timeout=30)
    for n in (1, 2):
        assert (tmp_path / f"rc{n}").read_text().strip() == "64"
        said = (tmp_path / f"err{n}").read_text().strip().splitlines()
        assert len(said) == 1 and f"refuses to run inside job {inside}" in said[0], said
    # still waiting, for a person; the attempts are on its record
    assert [r["request_id"] for r in _waiting(home, tmux_env, asking)]
    refused = open_state(home).audit.read_events(asking, kind="approval_refused")
    assert [(r["reason"], r["inside"]) for r in refused] == [("inside_a_job", inside)] * 2
    answered = run_cli(home, "approve", asking, "--json", env=tmux_env)  # a person's shell
    assert answered.returncode == 0, answered.stderr
    assert json_lines(answered.stdout)[0]["behavior"] == "allow"
    retry_until(lambda: (tmp_path / "asked.0").exists() and (tmp_path / "asked.0").read_text())
    assert _answer(tmp_path, "asked") == {"behavior": "allow"}
