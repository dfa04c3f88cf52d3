"""`make demo`: submit a real job to the `shell` agent in tmux and follow it to the end.

Runs `delegate submit --agent shell --prompt-file examples/tasks/count-words.sh --wait`: the job
is registered, its subscriber listens, the wrapper starts the example agent in a tmux session,
and every event the agent reports is printed as it arrives. State goes to .demo-home/ and tmux
sessions to the tmux server on socket `delegate-demo`, unless DELEGATE_HOME or
DELEGATE_TMUX_SOCKET say otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DELEGATE_HOME", str(ROOT / ".demo-home"))
    env.setdefault("DELEGATE_TMUX_SOCKET", "delegate-demo")
    task = ROOT / "examples" / "tasks" / "count-words.sh"
    command = [
        "delegate",
        "submit",
        "--agent",
        "shell",
        "--prompt-file",
        str(task),
        "--workdir",
        str(ROOT),
        "--idle-timeout",
        "60",
        "--wait",
    ]
    print("$ " + " ".join(command[:-1]) + " --wait")
    submit = subprocess.Popen(
        command, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert submit.stdout is not None
    job_id = None
    for line in submit.stdout:
        event = json.loads(line)
        job_id = event["job_id"]
        print(f"  seq {event['seq']:>2}  {event['event']:<10} {event['detail']}")
    code = submit.wait()
    stderr = submit.stderr.read() if submit.stderr else ""
    print(f"submit exited with {code} ({'completed' if code == 0 else 'see below'})")
    if code != 0 and stderr.strip():
        print(stderr.strip())
    if job_id is None:
        return code or 1
    show = subprocess.run(
        ["delegate", "show", job_id, "--json"], env=env, text=True, capture_output=True, check=True
    )
    record = json.loads(show.stdout)
    print(
        f"job {job_id}: {record['status']}, {record['last_seq']} events,"
        f" session {record['session']}"
    )
    print(f"audit log:  {record['audit_log']}")
    print(f"agent log:  {Path(record['audit_log']).parent / 'agent.log'}")
    print(f"look at it: tmux -L {env['DELEGATE_TMUX_SOCKET']} attach -t {record['session']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
