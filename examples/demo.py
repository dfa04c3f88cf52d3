"""`make demo`: a real register / watch / publish round trip on the embedded SQLite bus.

Registers a job, starts `delegate watch` in the background, runs the example agent
(examples/agents/word-count.sh), which reports through `delegate publish`, and shows what the
watcher received and where the audit log is. State goes to .demo-home/ unless DELEGATE_HOME is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def delegate(*args: str, env: dict[str, str], **kwargs):  # type: ignore[no-untyped-def]
    return subprocess.run(["delegate", *args], env=env, text=True, check=True, **kwargs)


def main() -> int:
    env = dict(os.environ)
    env.setdefault("DELEGATE_HOME", str(ROOT / ".demo-home"))
    files = sorted(str(p) for p in (ROOT / "delegate").glob("*.py"))[:5]
    agent = ROOT / "examples" / "agents" / "word-count.sh"

    job_id = delegate(
        "register",
        "--cmd",
        f"{agent.name} <{len(files)} files>",
        "--idle-timeout",
        "30",
        "--wall-timeout",
        "120",
        env=env,
        capture_output=True,
    ).stdout.strip()
    print(f"registered job {job_id} (state in {env['DELEGATE_HOME']})")

    watcher = subprocess.Popen(
        ["delegate", "watch", job_id], env=env, text=True, stdout=subprocess.PIPE
    )
    agent_run = subprocess.run([str(agent), *files], env={**env, "DELEGATE_JOB_ID": job_id})
    print(f"agent exited with {agent_run.returncode}; events seen by the watcher:")
    assert watcher.stdout is not None
    for line in watcher.stdout:
        event = json.loads(line)
        print(f"  seq {event['seq']:>2}  {event['event']:<10} {event['detail']}")
    code = watcher.wait()
    print(f"watch exited with {code} ({'completed' if code == 0 else 'not completed'})")

    record = json.loads(delegate("show", job_id, "--json", env=env, capture_output=True).stdout)
    print(f"job status: {record['status']}, last seq {record['last_seq']}")
    print(f"audit log: {record['audit_log']}")
    kinds: dict[str, int] = {}
    for line in Path(record["audit_log"]).read_text().splitlines():
        kind = json.loads(line)["kind"]
        kinds[kind] = kinds.get(kind, 0) + 1
    print("audit entries: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    return code


if __name__ == "__main__":
    sys.exit(main())
