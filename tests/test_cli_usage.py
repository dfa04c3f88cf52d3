"""Bad usage and bad input through the real CLI: one clear line, a non-zero exit, no traceback,
and nothing already recorded is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from delegate.cli import app as cli
from delegate.entry import coord as fastcoord
from delegate.entry import publish as fastcli

from .helpers import assert_one_line_error, json_lines, run_cli

COMMANDS = [
    "register",
    "publish",
    "watch",
    "jobs",
    "show",
    "logs",
    "cancel",
    "pick",
    "doctor",
    "submit",
    "ps",
    "monitor",
    "report",
    "attach",
    "send",
    "peek",
]


@pytest.fixture
def job_id(home: Path) -> str:
    result = run_cli(home, "register", "--cmd", "true")
    assert result.returncode == 0
    return result.stdout.strip()


@pytest.mark.parametrize(
    "args",
    [
        ["watch", "../x"],
        ["show", "ABCDEF12"],
        ["cancel", ""],
        ["logs", "0123456789"],
        ["show", "0badc0de"],
        ["publish", "--job", "../../etc", "--event", "started"],
        ["publish", "--event", "started"],
        ["publish", "--job", "{job}", "--event", "exploded"],
        ["publish", "--job", "{job}", "--event", "started", "--data", "{not json"],
        ["publish", "--job", "{job}", "--event", "started", "--data", "[1, 2]"],
        ["publish", "--job", "{job}", "--event", "started", "--data", '{"hmac_sig": "x"}'],
        [
            "publish",
            "--job",
            "{job}",
            "--event",
            "started",
            "--detail",
            "x" * 10,
            "--data",
            json.dumps({"blob": "y" * 70000}),
        ],
        ["publish", "--job", "{job}", "--event", "progress"],
        ["publish", "--job", "{job}", "--bogus", "1"],
        ["publish", "--job", "{job}", "--event"],
        ["jobs", "--status", "finished"],
        ["register", "--wall-timeout", "soon"],
        ["register", "--idle-timeout", "-3"],
        ["register", "--idempotency-key", "  "],
        ["nonsense"],
        ["watch"],
    ],
    ids=[
        "watch-dotdot",
        "show-upper",
        "cancel-empty",
        "logs-long",
        "show-unknown",
        "publish-path",
        "publish-no-job",
        "publish-bad-event",
        "publish-bad-json",
        "publish-array",
        "publish-reserved",
        "publish-oversized",
        "publish-not-started",
        "publish-bogus-flag",
        "publish-missing-value",
        "jobs-bad-status",
        "register-bad-number",
        "register-negative",
        "register-blank-key",
        "unknown-command",
        "watch-no-id",
    ],
)
def test_bad_input_gives_one_line_and_keeps_records(home: Path, job_id: str, args: list[str]):
    record = (home / "jobs" / f"{job_id}.json").read_bytes()
    result = run_cli(home, *[a.replace("{job}", job_id) for a in args])
    assert_one_line_error(result)
    assert (home / "jobs" / f"{job_id}.json").read_bytes() == record
    assert not (home / "etc").exists()


def test_exit_codes_do_not_collide_with_watch_outcomes(home: Path):
    assert run_cli(home, "watch", "../x").returncode == 64
    assert run_cli(home, "show", "0badc0de").returncode == 66
    assert run_cli(home, "nonsense").returncode == 64


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(home: Path, command: str):
    result = run_cli(home, command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout
    assert "Usage" in result.stdout


def test_top_level_help_lists_every_command(home: Path):
    result = run_cli(home)
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout


def test_fast_publish_parser_matches_the_typer_command():
    command = cli.full_command().commands["publish"]
    typer_options = sorted(opt for p in command.params for opt in p.opts if opt.startswith("--"))
    assert typer_options == sorted(fastcli.PUBLISH_OPTIONS)
    parsed = fastcli.parse_publish_args(
        ["--job=0123abcd", "--event", "progress", "--detail", "a=b"]
    )
    assert parsed == {"job": "0123abcd", "event": "progress", "detail": "a=b", "data": None}


def test_register_idempotency_key_from_the_cli(home: Path):
    first = run_cli(home, "register", "--idempotency-key", "nightly-2026-11-22", "--json")
    second = run_cli(home, "register", "--idempotency-key", "nightly-2026-11-22", "--json")
    assert json.loads(first.stdout)["job_id"] == json.loads(second.stdout)["job_id"]
    listed = json_lines(run_cli(home, "jobs", "--json").stdout)
    assert len(listed) == 1 and "auth_token" not in listed[0]


def test_jobs_show_logs_pick(home: Path, job_id: str):
    table = run_cli(home, "jobs")
    assert table.returncode == 0 and job_id in table.stdout and "pending" in table.stdout
    assert job_id in run_cli(home, "show", job_id).stdout
    picked = run_cli(home, "pick", "--agent-session", "w1", "--json")
    assert picked.returncode == 0 and json.loads(picked.stdout)["picked_by"] == "w1"
    assert run_cli(home, "pick", "--agent-session", "w1").returncode == 1
    logs = json_lines(run_cli(home, "logs", job_id).stdout)
    assert [e["kind"] for e in logs] == ["registered", "status_changed"]
    assert (
        json_lines(run_cli(home, "jobs", "--status", "running", "--json").stdout)[0]["job_id"]
        == job_id
    )


def test_secrets_stay_off_the_wire_and_out_of_the_audit_log(home: Path, job_id: str):
    token = json.loads((home / "jobs" / f"{job_id}.json").read_text())["auth_token"]
    detail = f"token {token} and PASSWORD=hunter2 in /root/private/file.txt"
    assert (
        run_cli(
            home, "publish", "--job", job_id, "--event", "started", "--detail", detail
        ).returncode
        == 0
    )
    watched = run_cli(home, "watch", job_id, "--idle-timeout", "0.3")
    log_text = (home / "logs" / job_id / "events.ndjson").read_text()
    for text in (watched.stdout, log_text, (home / "logs" / job_id / "meta.json").read_text()):
        assert token not in text and "hunter2" not in text and "/root/private" not in text


def test_the_demo_submits_a_real_job_and_reports_on_it(tmp_path: Path, tmux_env):
    """`make demo`'s script at a terminal, from a fresh TMUX_TMPDIR and state: the job's events
    as readable lines, the outcome in words, a `ps` table, then the Spark report."""
    import os
    import sys

    from .pty_run import run_in_pty

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, **tmux_env, "DELEGATE_HOME": str(tmp_path / "demo")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    shown = run_in_pty(
        [sys.executable, str(root / "examples" / "demo.py")],
        env=env,
        columns=100,
        timeout=180,
    )
    assert shown.returncode == 0, shown.output
    assert "{" not in shown.output  # no JSON at a terminal
    events = [
        line.split()[1]
        for line in shown.output.splitlines()
        if line[:2].isdigit() and line[2:3] == ":"  # `14:02:07  progress  ...`
    ]
    assert events == ["started", "progress", "progress", "progress", "progress", "completed"]
    assert "completed in" in shown.output
    assert "$ delegate ps --limit 3" in shown.output and "$ delegate report" in shown.output
    log_path = next(
        line.split(": ", 1)[1].strip()
        for line in shown.output.splitlines()
        if line.startswith("audit log:")
    )
    assert Path(log_path).is_file()
    assert not (root / "examples" / "cron" / "nightly.log").exists()


def test_report_names_what_is_missing_and_exits_69(home: Path, tmp_path: Path):
    shadow = tmp_path / "shadow" / "pyspark"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named pyspark')\n")
    result = run_cli(home, "report", env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 69, result.stderr
    assert_one_line_error(result)
    assert "needs PySpark" in result.stderr
    no_java = run_cli(home, "report", env={"JAVA_HOME": str(tmp_path / "no-java")})
    assert no_java.returncode == 69 and "Java" in no_java.stderr
    assert_one_line_error(no_java)


@pytest.mark.parametrize(
    "module,args,code",
    [
        ("delegate.runtime.wrapper", ["0badc0de"], 66),
        ("delegate.runtime.supervisor", ["--lock-fd", "999"], 64),
        ("delegate.runtime.supervisor", ["0badc0de"], 64),
    ],
)
def test_process_entry_points_fail_in_one_line(home: Path, module: str, args: list, code: int):
    import subprocess
    import sys

    from .helpers import cli_env

    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == code, result.stderr
    assert_one_line_error(result)


@pytest.mark.parametrize(
    "group,sub",
    [
        ("session", "list"),
        ("session", "stop"),
        ("session", "resume"),
        ("cron", "add"),
        ("cron", "list"),
        ("cron", "remove"),
        ("cron", "run"),
    ],
)
def test_grouped_subcommands_have_help_with_an_example(home: Path, group: str, sub: str):
    result = run_cli(home, group, sub, "--help")
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout


COORD_SUBCOMMANDS = {
    "msg": ["send", "recv", "ack", "export"],
    "lock": ["acquire", "renew", "release", "check", "list"],
    "board": ["open", "assess", "discuss", "vote", "resolve", "status"],
    "bb": ["write", "read", "delete", "list", "snapshot", "render"],
    "bus": ["export"],
    "host": ["add", "remove", "list", "serve"],
}


@pytest.mark.parametrize(
    "argv",
    [[g, c] for g, cs in COORD_SUBCOMMANDS.items() for c in cs]
    + [[c] for c in ("claim", "heartbeat", "agents", "block", "unblock", "deadlocks")],
    ids=" ".join,
)
def test_every_coordination_command_has_help_with_an_example(home: Path, argv: list[str]):
    result = run_cli(home, *argv, "--help")
    assert result.returncode == 0, result.stderr
    assert "Example" in result.stdout and "Usage" in result.stdout


def test_fast_lock_parser_matches_the_typer_commands():
    group = cli.full_command().commands["lock"]
    for action, fast in fastcoord.LOCK_OPTIONS.items():
        command = group.commands[action]
        options = sorted(o for p in command.params for o in p.opts if o.startswith("--"))
        assert options == sorted(fast), action
    resource, values = fastcoord.parse_lock_args(
        "acquire", ["src/a.py", "--owner=me", "--ttl", "5", "--break-dead"]
    )
    assert (resource, values) == ("src/a.py", {"--owner": "me", "--ttl": "5", "--break-dead": True})
