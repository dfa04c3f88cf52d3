"""What `submit --worktree --fan-out N` prints: the fan-out's id, the one `compare` takes, in a
way that keeps scripts working (a pipe: one job id a line on stdout as before, the fan-out on
stderr; `--json`: each job's record with `fan_out`; a terminal: a line saying how to compare),
and `compare --help` saying where to find that id again."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import cli_env, delegate_cmd, json_lines, run_cli, submit_shell
from .pty_run import run_in_pty
from .test_git_adapter import make_repo
from .test_worktree import job_record, wait_ended

FAN_OUT = ("--worktree", "--fan-out", "3", "--no-wait")


def test_piped_it_prints_one_id_a_line_and_names_the_fan_out_on_stderr(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    result = submit_shell(home, tmux_env, repo, "true", *FAN_OUT)
    assert result.returncode == 0, result.stderr
    jobs = result.stdout.split()
    assert result.stdout == "".join(f"{j}\n" for j in jobs) and len(jobs) == 3
    wait_ended(home, *jobs)
    fan_out = job_record(home, jobs[0]).fan_out
    assert fan_out == jobs[0] and {job_record(home, j).fan_out for j in jobs} == {fan_out}
    said = [line for line in result.stderr.splitlines() if "fan-out" in line]
    assert said == [
        f"delegate: fan-out {fan_out}: compare with delegate compare {fan_out} (3 jobs)"
    ]
    compared = run_cli(home, "compare", fan_out, "--json", env=tmux_env)
    assert compared.returncode == 0, compared.stderr
    assert {r["job_id"] for r in json_lines(compared.stdout)} == set(jobs)
    listed = run_cli(home, "ps", "--all", "--json", env=tmux_env)  # and ps says it too
    assert {r["job_id"]: r["fan_out"] for r in json_lines(listed.stdout)} == dict.fromkeys(
        jobs, fan_out
    )


def test_json_records_carry_the_fan_out(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    result = submit_shell(home, tmux_env, repo, "true", *FAN_OUT, "--json")
    assert result.returncode == 0, result.stderr
    records = json_lines(result.stdout)
    assert len(records) == 3
    assert {r["fan_out"] for r in records} == {records[0]["job_id"]}
    wait_ended(home, *(r["job_id"] for r in records))


def test_at_a_terminal_it_says_how_to_compare(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    argv = delegate_cmd(
        "submit", "--agent", "shell", "--workdir", str(repo), "--prompt", "true", *FAN_OUT
    )
    shown = run_in_pty(argv, env=cli_env(home, tmux_env), separate_stderr=True)
    assert shown.returncode == 0, shown.stderr
    lines = shown.output.splitlines()
    jobs, last = lines[:-1], lines[-1]
    assert len(jobs) == 3
    assert last == f"fan-out {jobs[0]}: compare with delegate compare {jobs[0]}"
    assert "fan-out" not in shown.stderr  # said once, where the person looks
    wait_ended(home, *jobs)
    shown_job = run_cli(home, "show", jobs[2], "--json", env=tmux_env)
    assert json.loads(shown_job.stdout)["fan_out"] == jobs[0]


def test_compare_help_says_where_the_id_is(home: Path):
    result = run_cli(home, "compare", "--help", env={"COLUMNS": "200"})
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert "`submit --fan-out` prints it" in text
    assert "`delegate show JOB` of any of its jobs shows it" in text
