"""`delegate merge`, `review`, `submit --fan-out` and `compare`, with real git repositories made
here and stand-in agents in a real tmux server on an isolated socket."""

from __future__ import annotations

import json
from pathlib import Path

from delegate.cli.worktree import _compare_cells
from delegate.services.jobs.compare import CompareRow
from delegate.services.jobs.merge import CheckResult

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli, submit_shell
from .models import AnthropicServer, text
from .real_claude import claude_job_env, claude_profile
from .test_git_adapter import make_repo, sh_git
from .test_worktree import checkout_state, job_record, submit_in_worktree, wait_ended

COMMIT = 'printf "%s\\n" {text} > {file} && git add {file} && git commit -q -m "{file}"'


def committing_job(home: Path, env, repo: Path, file: str, text: str) -> str:
    """A job that commits `text` as `file` on its branch; ended when this returns."""
    job_id = submit_in_worktree(home, env, repo, COMMIT.format(file=file, text=text))
    wait_ended(home, job_id)
    return job_id


def test_a_conflict_leaves_the_checkout_byte_identical_and_names_the_file(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    job_id = committing_job(home, tmux_env, repo, "f0.txt", "theirs")
    (repo / "f0.txt").write_text("ours\n")
    sh_git(repo, "commit", "-q", "-am", "ours")
    (repo / "notes.txt").write_text("untracked, kept\n")
    before = checkout_state(repo)
    result = run_cli(home, "merge", job_id, env=tmux_env)
    assert result.returncode == 1
    assert "conflict in f0.txt" in result.stderr and "main unchanged" in result.stderr
    assert checkout_state(repo) == before  # status, HEAD, branches and worktrees
    assert (repo / "f0.txt").read_text() == "ours\n"
    assert job_record(home, job_id).merged is None


def test_a_failing_check_merges_nothing(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    job_id = committing_job(home, tmux_env, repo, "a.txt", "a")
    before = checkout_state(repo)
    check = "sh -c 'echo first; echo tests failed: 3; exit 3'"
    result = run_cli(home, "merge", job_id, "--check", check, env=tmux_env)
    assert result.returncode == 1
    assert "--check failed (exit 3)" in result.stderr and "tests failed: 3" in result.stderr
    assert checkout_state(repo) == before
    assert not (repo / "a.txt").exists()


def test_queue_merges_three_jobs_in_order_each_checked_on_the_last(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    jobs = [committing_job(home, tmux_env, repo, f"{n}.txt", n) for n in ("a", "b", "c")]
    # the check sees the merged result: the job's file and every file merged before it
    check = 'sh -c \'ls *.txt | tr "\\n" " " >&2; test -e a.txt\''
    result = run_cli(home, "merge", *jobs, "--queue", "--check", check, "--json", env=tmux_env)
    assert result.returncode == 0, result.stderr
    merged = json_lines(result.stdout)
    assert [m["job_id"] for m in merged] == jobs
    assert [m["outcome"] for m in merged] == ["merged"] * 3
    assert "a.txt b.txt c.txt f0.txt" in merged[2]["check"]["tail"][0]
    log = sh_git(repo, "log", "--format=%H %s", "--first-parent", "-3").splitlines()
    assert [line.split(" ", 1)[0] for line in reversed(log)] == [m["commit"] for m in merged]
    assert all(f"Merge job {j}" in line for j, line in zip(jobs, reversed(log), strict=True))
    assert sh_git(repo, "status", "--porcelain") == ""
    assert all((repo / f"{n}.txt").exists() for n in ("a", "b", "c"))
    record = job_record(home, jobs[1])
    assert record.merged is not None and record.merged["commit"] == merged[1]["commit"]
    assert record.merged["into"] == "main"


def test_merge_into_a_branch_not_checked_out_and_squash(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    sh_git(repo, "branch", "release")
    job_id = committing_job(home, tmux_env, repo, "a.txt", "a")
    before = checkout_state(repo)
    result = run_cli(home, "merge", job_id, "--into", "release", "--squash", env=tmux_env)
    assert result.returncode == 0, result.stderr
    assert checkout_state(repo)[:2] == before[:2]  # main, checked out, untouched
    assert sh_git(repo, "show", "release:a.txt") == "a\n"
    parents = sh_git(repo, "rev-list", "--parents", "-1", "release").split()
    assert len(parents) == 2  # a squash: one parent


def test_a_dirty_checkout_is_refused_naming_the_files(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    job_id = committing_job(home, tmux_env, repo, "a.txt", "a")
    (repo / "f0.txt").write_text("half done\n")
    before = checkout_state(repo)
    result = run_cli(home, "merge", job_id, env=tmux_env)
    assert_one_line_error(result)
    assert "uncommitted changes" in result.stderr and "f0.txt" in result.stderr
    assert checkout_state(repo) == before


def test_merge_of_a_job_without_a_worktree_is_one_line(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    plain = submit_shell(home, tmux_env, repo, "true", "--json")
    job_id = json_lines(plain.stdout)[0]["job_id"]
    before = checkout_state(repo)
    result = run_cli(home, "merge", job_id, env=tmux_env)
    assert_one_line_error(result)
    assert f"job {job_id} has no worktree" in result.stderr
    assert checkout_state(repo) == before


def test_fan_out_of_three_and_compare_shows_which_passes_the_check(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    seen = tmp_path / "seen"
    seen.mkdir()
    # the same prompt for all three; each takes the first free number, and writes it
    script = (
        f'for i in 1 2 3; do mkdir "{seen}/$i" 2>/dev/null && break; done\nseq "$i" > answer.txt\n'
    )
    result = submit_shell(
        home, tmux_env, repo, script, "--worktree", "--fan-out", "3", "--no-wait", "--json"
    )
    assert result.returncode == 0, result.stderr
    jobs = [j["job_id"] for j in json_lines(result.stdout)]
    assert len(jobs) == 3
    wait_ended(home, *jobs)
    records = [job_record(home, j) for j in jobs]
    assert {r.fan_out for r in records} == {jobs[0]}
    assert {r.group for r in records} == {None}  # a fan-out is not a queue group
    assert len({r.worktree["path"] for r in records}) == 3
    assert len({r.worktree["base"] for r in records}) == 1
    check = """sh -c 'test "$(cat answer.txt)" = 1'"""
    shown = run_cli(home, "compare", jobs[1], "--check", check, "--json", env=tmux_env)
    assert shown.returncode == 0, shown.stderr
    rows = {r["job_id"]: r for r in json_lines(shown.stdout)}
    assert set(rows) == set(jobs)
    passing = [j for j, r in rows.items() if r["check"]["passed"]]
    one = next(r for r in records if (Path(r.worktree["path"]) / "answer.txt").read_text() == "1\n")
    assert passing == [one.job_id]
    assert all(r["outcome"] == "completed" and r["files"] == 1 for r in rows.values())
    assert sorted(r["added"] for r in rows.values()) == [1, 2, 3]


def test_compare_table_cells_say_pass_or_fail_and_the_changes():
    passed = CheckResult(True, 0, [])
    row = CompareRow("1a2b3c4d", "shell", "completed", 3.0, 0.25, 2, 5, 1, passed)
    assert _compare_cells(row)[3:6] == ["$0.2500", "2 files +5 -1", "pass"]
    failed = row._replace(check=CheckResult(False, 3, ["no"]), problem="folder gone")
    assert _compare_cells(failed)[4:6] == ["folder gone", "fail (3)"]


def test_compare_of_a_job_outside_a_fan_out_is_one_line(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    job_id = submit_in_worktree(home, tmux_env, repo, "true")
    result = run_cli(home, "compare", job_id, env=tmux_env)
    assert_one_line_error(result)
    assert "not part of a fan-out" in result.stderr


def test_review_of_an_ended_job_resumes_its_conversation_in_the_same_worktree(
    home: Path, tmux_env, tmp_path: Path
):
    """The real claude (tests/models' scripted server): `review` continues the job's own
    conversation, in its worktree, with the comments as the next prompt."""
    server = AnthropicServer([text("tidied"), text("renamed")]).start()
    try:
        _review_with_claude(home, tmux_env, tmp_path, server)
    finally:
        server.stop()


def _review_with_claude(home: Path, tmux_env, tmp_path: Path, server: AnthropicServer) -> None:
    claude_profile(home, server)
    env = claude_job_env(tmux_env)
    repo = make_repo(tmp_path / "repo")
    first = run_cli(
        home, "submit", "--wait", "--agent", "claude", "--prompt", "tidy up", "--worktree",
        "--workdir", str(repo), "--json", env=env,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    job_id = json_lines(first.stdout)[0]["job_id"]
    job = job_record(home, job_id)
    assert job.conversation_id
    result = run_cli(
        home, "review", job_id, "--comment", "rename x to count",
        "--line", "f0.txt:1 say why", "--wait", "--json", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"continues conversation {job.conversation_id}" in result.stderr
    new_id = json_lines(result.stdout)[0]["job_id"]
    follow = job_record(home, new_id)
    assert follow.follow_up_of == job_id and follow.status.value == "completed"
    assert follow.workdir == job.workdir and follow.worktree["path"] == job.worktree["path"]
    argv = follow.launch["argv"]
    assert f"--resume={job.conversation_id}" in argv
    # claude ran in the same worktree (its init line says where) and was sent the earlier turns
    log = (home / "logs" / new_id / "agent.log").read_text()
    (init,) = [json.loads(x) for x in log.splitlines() if '"subtype":"init"' in x]
    assert Path(init["cwd"]).resolve() == Path(job.worktree["path"]).resolve()
    said = json.dumps(server.turn_requests[-1].body["messages"])
    assert "tidied" in said and "rename x to count" in said and "say why" in said
    prompt = (home / "logs" / new_id / "prompt").read_text()
    assert "rename x to count" in prompt and "f0.txt, line 1: say why" in prompt
    shown = json_lines(run_cli(home, "show", job_id, "--json", env=env).stdout)[0]
    assert shown["review_chain"] == [job_id, new_id]
    listed = json_lines(run_cli(home, "worktree", "list", "--json", env=env).stdout)
    assert [r["job_id"] for r in listed] == [new_id]  # one worktree, under its latest job
    again = run_cli(home, "review", job_id, "--comment", "more", env=env)
    assert_one_line_error(again)
    assert f"followed up by {new_id}" in again.stderr


def test_review_of_a_running_job_is_typed_into_its_session(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    got = tmp_path / "got"
    reading = tmp_path / "reading"
    script = f'touch "{reading}"; IFS= read -r line; echo "$line" > "{got}"'
    job_id = submit_in_worktree(home, tmux_env, repo, script)
    retry_until(lambda: job_record(home, job_id).status.value == "running", timeout=30)
    retry_until(reading.exists, timeout=30)
    result = run_cli(home, "review", job_id, "--comment", "use a set", env=tmux_env)
    assert result.returncode == 0, result.stderr
    assert "review sent" in result.stderr, job_record(home, job_id)
    wait_ended(home, job_id)
    assert got.read_text() == "Review of your work: use a set\n"


def test_review_from_a_file_of_a_shell_job_starts_afresh_with_the_review_and_the_diff(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    first = committing_job(home, tmux_env, repo, "made.txt", "first")
    notes = tmp_path / "review.md"
    notes.write_text("please also add a README line\n")
    result = run_cli(home, "review", first, "--file", str(notes), "--json", env=tmux_env)
    assert result.returncode == 0, result.stderr
    follow = (job_record(home, first).worktree or {})["handed_to"]
    wait_ended(home, follow)
    again = job_record(home, follow)
    assert again.follow_up_of == first and again.conversation_id is None
    prompt = (home / "logs" / follow / "prompt").read_text()
    assert "please also add a README line" in prompt  # the review
    assert "made.txt" in prompt and "+first" in prompt  # and the job's diff: no conversation
    assert again.workdir == job_record(home, first).workdir  # the same worktree


def test_a_rebase_merge_replays_the_commits_without_a_merge_commit(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    job_id = committing_job(home, tmux_env, repo, "r.txt", "rebased")
    before = sh_git(repo, "rev-parse", "HEAD").strip()
    result = run_cli(home, "merge", job_id, "--rebase", env=tmux_env)
    assert result.returncode == 0, result.stderr
    parents = sh_git(repo, "log", "-1", "--format=%P", "main").split()
    assert len(parents) == 1 and parents[0] == before  # one parent: replayed, no merge commit
    assert sh_git(repo, "show", "main:r.txt").strip() == "rebased"
