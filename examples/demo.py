"""`make demo`: hand a real task to the `shell` agent in tmux, follow it, then report on it.

Runs `delegate submit --agent shell --prompt-file examples/tasks/count-words.sh --wait`: the job
is registered, its subscriber listens, the wrapper starts the example agent in a tmux session,
and every event the agent reports is shown as it arrives (JSON lines when this is piped). Then
`delegate report` reads the audit logs with Spark. State goes to .demo-home/ (ignored by git) and
tmux sessions to the tmux server on socket `delegate-demo`, unless DELEGATE_HOME or
DELEGATE_TMUX_SOCKET say otherwise.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(command: list[str], env: dict[str, str]) -> int:
    print(f"\n$ {shlex.join(command)}", flush=True)
    return subprocess.run(command, env=env, check=False).returncode


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DELEGATE_HOME", str(ROOT / ".demo-home"))
    env.setdefault("DELEGATE_TMUX_SOCKET", "delegate-demo")
    task = ROOT / "examples" / "tasks" / "count-words.sh"
    submit = [
        "delegate",
        "submit",
        "--agent",
        "shell",
        "--prompt-file",
        str(task.relative_to(ROOT)),
    ]
    code = run([*submit, "--workdir", ".", "--idle-timeout", "60", "--wait"], env)
    if code != 0:
        return code
    code = run(["delegate", "ps", "--limit", "3"], env)
    if code != 0:
        return code
    return run(["delegate", "report"], env)


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
