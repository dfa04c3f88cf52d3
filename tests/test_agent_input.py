"""What an agent says about its conversation cannot become a flag of its own resume (issue 30,
item 2). A stand-in `--cmd` agent calls the real `delegate hook` as Claude Code's SessionStart
would, with an id that reads as an option: nothing is recorded, and a
plain id that follows is kept. (The gate: `core.channels.conversation_id`, which
`services.jobs.publish.record_conversation` applies again, auditing what it refuses.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from delegate.core.channels import conversation_id
from delegate.core.model import JobState

from .helpers import retry_until
from .test_monitor import open_state, submit_no_wait

DELEGATE = str(Path(sys.executable).parent / "delegate")


def _session_start(session_id: str) -> str:
    payload = {"hook_event_name": "SessionStart", "source": "startup", "session_id": session_id}
    return f"echo '{json.dumps(payload)}' | {DELEGATE} hook"


def test_a_conversation_id_that_reads_as_a_flag_is_never_recorded(home, tmux_env, tmp_path):
    script = "\n".join(
        [_session_start("--dangerously-skip-permissions"), _session_start("3f2a-conv_1")]
    )
    job_id = submit_no_wait(home, tmux_env, tmp_path, script)
    state = open_state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    job = state.registry.get(job_id)
    assert job.status is JobState.COMPLETED
    assert job.conversation_id == "3f2a-conv_1"  # the plain one, kept
    named = [e["conversation_id"] for e in state.audit.read_events(job_id, kind="conversation")]
    assert named == ["3f2a-conv_1"]  # the flag never was


@given(st.text(max_size=300))
def test_no_accepted_conversation_id_is_an_option_or_leaves_its_word(text: str):
    accepted = conversation_id(text)
    if accepted is not None:
        assert accepted == text and not accepted.startswith("-")
        assert 1 <= len(accepted) <= 128
        assert all(c.isascii() and (c.isalnum() or c in "._:-") for c in accepted)


def test_the_record_refuses_and_audits_an_id_that_reads_as_a_flag(state):
    from delegate.services.jobs.publish import record_conversation

    job, _ = state.registry.register(agent="claude")
    record_conversation(state, job.job_id, "--dangerously-bypass-approvals-and-sandbox")
    assert state.registry.get(job.job_id).conversation_id is None
    (refused,) = state.audit.read_events(job.job_id, kind="conversation_refused")
    assert refused["given"] == "--dangerously-bypass-approvals-and-sandbox"


def test_an_agent_cannot_declare_an_ending_only_the_wrapper_reports(home, tmux_env, tmp_path):
    """`rate_limited: ...` (a fresh attempt at the reset, with a fresh budget), `tmux_gone:`
    (a requeue) and `budget_exceeded:` come from what the wrapper saw, never from an agent's
    own `delegate publish` (issue 30, item 2): refused in one line, nothing recorded."""
    lines = []
    for n, detail in enumerate(
        ["rate_limited: resets at 2030-01-01T00:00:00Z", "tmux_gone: gone", "budget_exceeded: x"]
    ):
        lines.append(
            f"{DELEGATE} publish --event error --detail '{detail}' 2> err{n}; echo $? > rc{n}"
        )
    job_id = submit_no_wait(home, tmux_env, tmp_path, "\n".join(lines), "--on-interrupt", "requeue")
    state = open_state(home)
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    for n in range(3):
        assert (tmp_path / f"rc{n}").read_text().strip() == "64"
        said = (tmp_path / f"err{n}").read_text().strip().splitlines()
        assert len(said) == 1 and "the wrapper's to report" in said[0], said
    job = state.registry.get(job_id)
    assert job.status is JobState.COMPLETED and job.retried_by is None  # its own exit status
