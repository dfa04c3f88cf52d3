"""Approvals for a job on an agent host (issue 22): a real Mosquitto broker, a delegator and a
host with state dirs of their own, the host's job in a real tmux pane whose stand-in agent asks
for permission through the real `delegate hook`; `delegate approve` runs on the delegator and
its decision travels over the broker to the host, which hands it to the waiting wrapper."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from delegate.core import hostproto
from delegate.core.model import JobState
from delegate.services.state import State

from . import test_hosts
from .helpers import (
    assert_one_line_error,
    cli_env,
    delegate_cmd,
    json_lines,
    retry_until,
    run_cli,
)
from .pty_run import run_in_pty
from .test_approvals import _answer, _asking
from .test_hosts import Sides, _publish
from .test_listings import ANSI

sides = test_hosts.sides  # the fixture: a delegator, and host h1 served from its own state dir


def _waiting_here(sides: Sides, job_id: str, *, besides: str = "") -> dict[str, Any]:
    """The oldest request of job `job_id` that `delegate approvals` on the delegator lists
    (other than request `besides`)."""

    def listed() -> dict[str, Any] | None:
        rows = json_lines(run_cli(sides.home, "approvals", "--json", env=sides.env).stdout)
        mine = [r for r in rows if r["job_id"] == job_id and r["request_id"] != besides]
        return mine[0] if mine else None

    return retry_until(listed, timeout=60, interval=0.2)


def _submitted(sides: Sides, script: str) -> str:
    submitted = sides.submit(script, "--no-wait")
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip()


def _completed(sides: Sides, job_id: str) -> None:
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    retry_until(lambda: here.registry.get(job_id).status.terminal, timeout=60)
    assert here.registry.get(job_id).status is JobState.COMPLETED


def _answered(tmp_path: Path, name: str, i: int) -> dict[str, object]:
    """What the stand-in's hook printed for its request `i`, once it has printed it."""
    out = tmp_path / f"{name}.{i}"
    retry_until(lambda: out.exists() and out.read_text().strip(), timeout=30)
    return _answer(tmp_path, name, i)


def _approvals_on_host(sides: Sides) -> list[dict[str, Any]]:
    return [a for a in sides.host_audit() if a["kind"] == "approval"]


def test_approve_and_deny_on_the_delegator_release_a_job_on_a_host(sides: Sides, tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    job_id = _submitted(sides, _asking(tmp_path, "asks", "git push", times=2))
    first = _waiting_here(sides, job_id)
    assert (first["tool"], first["summary"], first["host"]) == ("Bash", "git push", "h1")
    approved = run_cli(sides.home, "approve", job_id, env=sides.env)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.strip() == f"allowed: Bash git push (job {job_id}, confirmed by host h1)"
    assert _answered(tmp_path, "asks", 0) == {"behavior": "allow"}
    # the second request; the first, answered, is listed no more
    second = _waiting_here(sides, job_id)
    assert second["request_id"] != first["request_id"]
    # at a terminal, the table names the host
    table = run_in_pty(delegate_cmd("approvals"), env=cli_env(sides.home, sides.env))
    header, row = ANSI.sub("", table.output).strip().splitlines()[:2]
    assert header.split()[:3] == ["JOB", "HOST", "REQUEST"], table.output
    assert row.split()[:3] == [job_id, "h1", second["request_id"]], table.output
    denied = run_cli(
        sides.home, "approve", job_id, "--deny", "--reason", "not today", env=sides.env
    )
    assert denied.returncode == 0, denied.stderr
    assert _answered(tmp_path, "asks", 1) == {"behavior": "deny", "message": "not today"}
    _completed(sides, job_id)
    nothing = run_cli(sides.home, "approve", job_id, env=sides.env)
    assert nothing.returncode == 64 and "no permission request waiting" in nothing.stderr
    assert_one_line_error(nothing)
    # audited on both sides with who decided
    here = State.open(env={"DELEGATE_HOME": str(sides.home)})
    sent = here.audit.read_events(job_id, "approval_sent")
    maker = sent[0]["maker"]
    assert "@" in maker and [s["host"] for s in sent] == ["h1", "h1"]
    answered = here.audit.read_events(job_id, "approval_answered")
    assert [(a["outcome"], a["maker"]) for a in answered] == [("taken", maker)] * 2
    decided = sides.host_state().audit.read_events(job_id, "permission_decided")
    assert [(d["behavior"], d["reason"], d["maker"]) for d in decided] == [
        ("allow", f"allowed by {maker}", maker),
        ("deny", "not today", maker),
    ]
    on_host = _approvals_on_host(sides)
    assert [(a["behavior"], a["maker"], a["outcome"]) for a in on_host] == [
        ("allow", maker, "taken"),
        ("deny", maker, "taken"),
    ]


def _forged_decision(job_id: str, request_id: str) -> bytes:
    """A decision for the host signed with a key that is not the delegator's."""
    message = hostproto.approval_request(
        host="h1",
        request_id=uuid.uuid4().hex,
        issued_ms=int(time.time() * 1000),
        job_id=job_id,
        decision={
            "job_id": job_id,
            "request_id": request_id,
            "behavior": "allow",
            "reason": "trust me",
            "maker": "mallory@elsewhere",
            "remember": False,
        },
    )
    return hostproto.sign(os.urandom(32), message)


# the host is stopped longer than the default 4 s after which its jobs count as lost
@pytest.mark.parametrize("sides", [60], indirect=True)
def test_forged_stale_and_unconfirmed_decisions_for_a_job_on_a_host(
    sides: Sides, broker, tmp_path: Path
):
    work = tmp_path / "work"
    work.mkdir()
    sides.serve(work)
    job_id = _submitted(sides, _asking(tmp_path, "f", "git push --force", times=2))
    first = _waiting_here(sides, job_id)
    _publish(
        broker.port, "delegate/hosts/h1/approve", _forged_decision(job_id, first["request_id"])
    )
    refused = retry_until(
        lambda: [a for a in sides.host_audit() if a["kind"] == "refused"], timeout=30
    )
    assert [(r["request"], r["reason"]) for r in refused] == [("approve", "bad_signature")]
    there = sides.host_state()
    assert not there.audit.read_events(job_id, "permission_decided")  # it still waits
    # answered on the host itself meanwhile: the delegator's decision comes too late
    on_host = run_cli(sides.host_home, "approve", job_id, env=sides.host_env)
    assert on_host.returncode == 0, on_host.stderr
    assert _answered(tmp_path, "f", 0) == {"behavior": "allow"}
    second = _waiting_here(sides, job_id, besides=first["request_id"])  # its second request
    # the delegator still lists the first: it has not heard that it was answered
    assert _waiting_here(sides, job_id)["request_id"] == first["request_id"]
    late = run_cli(sides.home, "approve", job_id, "--request", first["request_id"], env=sides.env)
    assert late.returncode == 64 and "no longer waiting on host h1" in late.stderr
    assert_one_line_error(late)
    assert _waiting_here(sides, job_id)["request_id"] == second["request_id"]
    # a host that does not answer in time: sent, not confirmed, non-zero; taken once it wakes
    assert sides.server is not None
    sides.server.send_signal(signal.SIGSTOP)
    try:
        unconfirmed = run_cli(
            sides.home, "approve", job_id, "--deny", "--reason", "late", env=sides.env
        )
    finally:
        sides.server.send_signal(signal.SIGCONT)
    assert unconfirmed.returncode == 4 and "not confirmed" in unconfirmed.stderr
    assert_one_line_error(unconfirmed)
    assert _answered(tmp_path, "f", 1) == {"behavior": "deny", "message": "late"}
    _completed(sides, job_id)
    makers = [d["maker"] for d in there.audit.read_events(job_id, "permission_decided")]
    assert "mallory@elsewhere" not in makers and len(makers) == 2
    assert json.dumps(refused).count("trust me") == 0
