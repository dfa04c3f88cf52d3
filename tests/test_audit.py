from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from delegate.adapters.audit import AuditLog, parse_line
from delegate.services.jobs.finish import end_job
from delegate.services.logs import follow_log
from delegate.services.state import State

from .helpers import run_cli

JOB = "0123abcd"

APPEND_MANY = """
    import sys
    from pathlib import Path
    from delegate.adapters.audit import AuditLog
    log = AuditLog(Path(sys.argv[1]))
    for i in range(300):
        log.append("0123abcd", "progress", writer=sys.argv[2], i=i, pad="z" * (i * 37 % 5000))
"""


def test_concurrent_appenders_never_interleave(tmp_path: Path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(APPEND_MANY), str(tmp_path), str(w)]
        )
        for w in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    lines = (tmp_path / JOB / "events.ndjson").read_bytes().splitlines(keepends=True)
    assert len(lines) == 1200
    entries = [json.loads(line) for line in lines]
    for writer in "0123":
        assert [e["i"] for e in entries if e["writer"] == writer] == list(range(300))


def test_reader_skips_a_torn_last_line(tmp_path: Path):
    log = AuditLog(tmp_path)
    log.append(JOB, "registered")
    with (tmp_path / JOB / "events.ndjson").open("ab") as handle:
        handle.write(b'{"kind": "published", "seq": 1')  # a crash mid-line, no newline
    assert [e["kind"] for e in log.read_events(JOB)] == ["registered"]
    assert parse_line(b"not json\n") is None
    assert parse_line(b"[1]\n") is None


def test_status_and_meta_follow_the_registry(state: State):
    job, _ = state.registry.register(command="make test", idempotency_key="k")
    status = state.audit.read_status(job.job_id)
    meta = state.audit.read_meta(job.job_id)
    assert status is not None and status["status"] == "pending"
    assert meta is not None and meta["command"] == "make test" and "auth_token" not in meta
    assert job.auth_token not in (state.audit.job_dir(job.job_id) / "meta.json").read_text()
    from delegate.core.model import JobState

    state.registry.transition(job.job_id, JobState.RUNNING)
    end_job(state, job.job_id, JobState.ERROR, reason="launch_failed")
    status = state.audit.read_status(job.job_id)
    assert status is not None and status["status"] == "error" and status["error"] == "launch_failed"


def test_follow_prints_until_the_job_ends(state: State):
    from delegate.services.jobs.publish import publish_event

    job, _ = state.registry.register()
    seen: list[dict] = []
    done = threading.Event()

    def follow() -> None:
        follow_log(
            state, job.job_id, lambda line: seen.append(json.loads(line)), follow=True, poll_s=0.02
        )
        done.set()

    thread = threading.Thread(target=follow)
    thread.start()
    publish_event(state, job.job_id, "started")
    assert not done.wait(0.2)  # still following: the job has not ended
    publish_event(state, job.job_id, "completed")
    thread.join(timeout=10)
    assert done.is_set()
    kinds = [e["kind"] for e in seen]
    assert kinds[0] == "registered" and kinds.count("published") == 2
    assert kinds[-1] == "status_changed" and seen[-1]["status"] == "completed"


def test_doctor_reports_quarantined_records(home: Path):
    ok = run_cli(home, "register")
    assert ok.returncode == 0
    healthy = run_cli(home, "doctor", "--json")
    assert healthy.returncode == 0 and json.loads(healthy.stdout)["healthy"] is True
    (home / "jobs" / "0badc0de.json").write_text('{"job_id": "0badc0de", "stat')
    report = run_cli(home, "doctor", "--json")
    assert report.returncode == 1
    checks = json.loads(report.stdout)["checks"]
    assert any(
        c["name"] == "registry" and c["status"] == "warn" and "quarantined" in c["detail"]
        for c in checks
    )
    again = json.loads(run_cli(home, "doctor", "--json").stdout)["checks"]
    quarantine = next(c for c in again if c["name"] == "quarantine")
    assert quarantine["status"] == "warn" and "0badc0de.json" in quarantine["detail"]
    assert list((home / "jobs" / "quarantine").iterdir())  # kept, not deleted


def test_doctor_reports_a_broken_bus(home: Path):
    result = run_cli(home, "doctor", "--json", env={"DELEGATE_BUS": "sqlite://relative.db"})
    assert result.returncode == 1
    bus = next(c for c in json.loads(result.stdout)["checks"] if c["name"] == "bus")
    assert bus["status"] == "fail" and "absolute path" in bus["detail"]
    assert os.path.exists(home)
