"""Fuzzing the command line: whatever the argv, never a traceback, never an internal error, and
a refused command changes no record."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.__main__ import main
from delegate.services.jobs.publish import publish_event
from delegate.services.state import State

COMMANDS = ["publish", "register", "show", "logs", "cancel", "jobs", "ps", "pick", "doctor"]
FLAGS = [
    "--job",
    "--event",
    "--detail",
    "--data",
    "--json",
    "--status",
    "--agent-session",
    "--cmd",
    "--session",
    "--wall-timeout",
    "--idle-timeout",
    "--idempotency-key",
    "--limit",
    "--all",
    "--nope",
    "-x",
    "--",
]
EVENTS = ["started", "progress", "permission_required", "completed", "error", "bogus", ""]
JUNK = [
    "../../etc/passwd",
    "/etc/shadow",
    "0badc0de",
    "ZZZZZZZZ",
    "",
    "\u00e9t\u00e9",
    "x" * 300,
    "{",
    '{"a": [1, 2, {"b": null}]}',
    "[1, 2]",
    '{"password": "hunter2"}',
    "-1",
    "1e309",
    "nan",
    "bad:name",
    "dlg-ok",
    "\x00",
]


def _records(home: Path) -> dict[str, bytes]:
    jobs = home / "jobs"
    return {p.name: p.read_bytes() for p in sorted(jobs.glob("*.json"))}


def _run(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    out = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exc:  # pragma: no cover - main never exits; say so if it does
            raise AssertionError(f"main() exited with {exc.code} for {argv!r}") from None
    return code, err.getvalue()


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_argv_gives_a_traceback_or_an_internal_error(tmp_path_factory, monkeypatch, data):
    home = tmp_path_factory.getbasetemp() / "fuzz-state"
    monkeypatch.setenv("DELEGATE_HOME", str(home))  # undone after the test, not each example
    monkeypatch.delenv("DELEGATE_JOB_ID", raising=False)
    monkeypatch.delenv("DELEGATE_PUBLISH_SOCKET", raising=False)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    known = home / "known"
    if not known.exists():
        job, _ = state.registry.register(command="true")
        publish_event(state, job.job_id, "started")
        known.write_text(job.job_id)
    token = st.sampled_from([*FLAGS, *EVENTS, *JUNK, "KNOWN"]) | st.text(max_size=20)
    drawn = [data.draw(st.sampled_from(COMMANDS)), *data.draw(st.lists(token, max_size=6))]
    argv = [known.read_text() if t == "KNOWN" else t for t in drawn]  # a real job id
    before = _records(home)
    code, err = _run(argv)
    assert "Traceback" not in err, (argv, err)
    assert code != 70, (argv, err)
    if code != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("delegate: "), (argv, err)
        assert _records(home) == before, argv  # a refused command changed nothing
