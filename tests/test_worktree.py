"""`submit --worktree`, `diff`, `worktree list|clean` with real git repositories made here and
stand-in agents (`--agent shell`) in a real tmux server on an isolated socket."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from delegate.core.errors import GitError
from delegate.core.model import Job
from delegate.services import worktrees
from delegate.services.doctor import worktree_check
from delegate.services.state import State

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli, submit_shell
from .test_git_adapter import make_repo, sh_git


def open_state(home: Path) -> State:
    return State.open(env={"DELEGATE_HOME": str(home)})


def job_record(home: Path, job_id: str) -> Job:
    return open_state(home).registry.get(job_id)


def submit_in_worktree(home: Path, env, repo: Path, script: str, *args: str) -> str:
    """Submit `script` with --worktree (no waiting); the new job's id."""
    result = submit_shell(home, env, repo, script, "--worktree", "--no-wait", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json_lines(result.stdout)[0]["job_id"]


def wait_ended(home: Path, *job_ids: str) -> None:
    state = open_state(home)
    for job_id in job_ids:
        retry_until(lambda j=job_id: state.registry.get(j).status.terminal, timeout=30)


def checkout_state(repo: Path) -> tuple[str, str, str, str]:
    """What the person sees of their checkout and its branches and worktrees."""
    return (
        sh_git(repo, "status", "--porcelain", "--untracked-files=all"),
        sh_git(repo, "rev-parse", "HEAD"),
        sh_git(repo, "branch", "--list"),
        sh_git(repo, "worktree", "list", "--porcelain"),
    )


def job_files(home: Path) -> list[str]:
    jobs = home / "jobs"
    return sorted(p.name for p in jobs.glob("*.json")) if jobs.exists() else []


def test_two_jobs_on_one_repo_never_see_each_other(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    before = checkout_state(repo)
    seen = tmp_path / "seen"
    seen.mkdir()
    script = (
        'echo "edit by {name}" >> f0.txt\n'
        'touch "{seen}/{name}.ready"\n'
        'while [ ! -e "{seen}/a.ready" ] || [ ! -e "{seen}/b.ready" ]; do sleep 0.05; done\n'
        'cat f0.txt > "{seen}/{name}.saw"\n'
    )
    first = submit_in_worktree(home, tmux_env, repo, script.format(name="a", seen=seen))
    second = submit_in_worktree(home, tmux_env, repo, script.format(name="b", seen=seen))
    wait_ended(home, first, second)
    # both edited f0.txt at the same time, each in its own worktree
    assert (seen / "a.saw").read_text() == "line 0\nedit by a\n"
    assert (seen / "b.saw").read_text() == "line 0\nedit by b\n"
    assert checkout_state(repo)[:2] == before[:2]  # the person's checkout is untouched
    assert (repo / "f0.txt").read_text() == "line 0\n"
    for job_id, name, other in ((first, "a", "b"), (second, "b", "a")):
        record = job_record(home, job_id)
        assert record.worktree is not None and record.worktree["created"]
        assert record.workdir == record.worktree["path"]
        assert record.worktree["branch"] == f"delegate/{job_id}"
        assert not record.worktree["path"].startswith(str(repo))
        patch = run_cli(home, "diff", job_id, env=tmux_env)
        assert patch.returncode == 0, patch.stderr
        assert f"+edit by {name}" in patch.stdout and f"edit by {other}" not in patch.stdout
        counts = json_lines(run_cli(home, "diff", job_id, "--json", env=tmux_env).stdout)
        assert counts == [{"path": "f0.txt", "added": 1, "removed": 0}]
        names = run_cli(home, "diff", job_id, "--name-only", env=tmux_env).stdout
        assert names == "f0.txt\n"
    listed = json_lines(run_cli(home, "worktree", "list", "--json", env=tmux_env).stdout)
    assert {r["job_id"]: (r["changed"], r["dirty"]) for r in listed} == {
        first: (1, True),
        second: (1, True),
    }


def test_clean_removes_only_what_holds_nothing_to_lose(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    commit = "echo {0} > {0}.txt && git add {0}.txt && git commit -q -m {0}"
    merged = submit_in_worktree(home, tmux_env, repo, commit.format("merged"))
    unpushed = submit_in_worktree(home, tmux_env, repo, commit.format("unpushed"))
    dirty = submit_in_worktree(home, tmux_env, repo, "echo more >> f0.txt")
    busy = submit_in_worktree(home, tmux_env, repo, "true")
    wait_ended(home, merged, unpushed, dirty, busy)
    sh_git(repo, "merge", "-q", "--ff-only", f"delegate/{merged}")
    unpushed_commit = sh_git(repo, "rev-parse", f"delegate/{unpushed}").strip()
    busy_path = Path(job_record(home, busy).worktree["path"])
    sleeper = subprocess.Popen(["sleep", "60"], cwd=busy_path)
    try:
        young = run_cli(home, "worktree", "clean", "--older-than", "1h", env=tmux_env)
        assert young.returncode == 0, young.stderr
        assert (
            f"{merged} kept: its job ended" in young.stdout
            and "within --older-than" in young.stdout
        )
        assert Path(job_record(home, merged).worktree["path"]).is_dir()
        dry = run_cli(home, "worktree", "clean", "--dry-run", env=tmux_env)
        assert dry.returncode == 0, dry.stderr
        assert f"{merged} would remove" in dry.stdout
        assert Path(job_record(home, merged).worktree["path"]).is_dir()
        result = run_cli(home, "worktree", "clean", env=tmux_env)
        assert result.returncode == 0, result.stderr
        lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    finally:
        sleeper.kill()
        sleeper.wait()
    assert lines[merged].startswith(f"{merged} removed")
    assert not Path(job_record(home, merged).worktree["path"]).exists()
    assert job_record(home, merged).worktree["removed_at"]
    assert f"delegate/{merged}" not in sh_git(repo, "branch", "--list")
    assert "commit(s) on" in lines[unpushed] and "remote-tracking" in lines[unpushed]
    assert "1 uncommitted or untracked file(s)" in lines[dirty]
    assert f"process {sleeper.pid} has its cwd inside it" in lines[busy]
    for kept in (unpushed, dirty, busy):
        assert lines[kept].startswith(f"{kept} kept: ")
        assert Path(job_record(home, kept).worktree["path"]).is_dir()
    sh_git(repo, "cat-file", "-e", unpushed_commit)  # the work is still there
    assert f"delegate/{unpushed}" in sh_git(repo, "branch", "--list")
    # the process gone, that worktree holds nothing to lose any more
    again = run_cli(home, "worktree", "clean", env=tmux_env).stdout
    assert f"{busy} removed" in again and f"{unpushed} kept" in again


def test_bad_input_is_one_line_and_changes_nothing(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    sh_git(repo, "branch", "taken")
    plain = tmp_path / "plain"
    plain.mkdir()
    before = checkout_state(repo)
    for workdir, extra, said in (
        (plain, (), "not inside a git repository"),
        (repo, ("--branch", "taken"), "branch 'taken' already exists"),
        (repo, ("--base", "nosuch"), "base 'nosuch' is not a commit"),
    ):
        result = submit_shell(home, tmux_env, workdir, "true", "--worktree", "--no-wait", *extra)
        assert_one_line_error(result)
        assert said in result.stderr
        assert job_files(home) == []
        assert checkout_state(repo) == before
    assert not (home / "worktrees").exists()
    # a job without a worktree
    registered = run_cli(home, "register", "--cmd", "true", "--json", env=tmux_env)
    no_tree = json.loads(registered.stdout)["job_id"]
    result = run_cli(home, "diff", no_tree, env=tmux_env)
    assert_one_line_error(result)
    assert "has no worktree" in result.stderr
    # a worktree removed by hand
    job_id = submit_in_worktree(home, tmux_env, repo, "echo x > x.txt")
    wait_ended(home, job_id)
    made = checkout_state(repo)
    subprocess.run(["rm", "-rf", job_record(home, job_id).worktree["path"]], check=True)
    result = run_cli(home, "diff", job_id, env=tmux_env)
    assert_one_line_error(result)
    assert "is gone" in result.stderr
    assert checkout_state(repo)[:3] == made[:3]


def test_a_queued_job_gets_its_worktree_at_launch(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    go = tmp_path / "go"
    blocker = submit_shell(
        home,
        tmux_env,
        tmp_path,
        f'while [ ! -e "{go}" ]; do sleep 0.05; done',
        "--no-wait",
        "--json",
        "--max-running",
        "1",
    )
    first = json_lines(blocker.stdout)[0]["job_id"]
    state = open_state(home)
    retry_until(lambda: state.registry.get(first).status.value == "running", timeout=20)
    queued = submit_in_worktree(home, tmux_env, repo, "pwd > where.txt", "--max-running", "1")
    record = job_record(home, queued)
    assert record.status.value == "queued"
    assert record.worktree is not None and not record.worktree["created"]
    path = Path(record.worktree["path"])
    assert not path.exists()
    assert f"delegate/{queued}" not in sh_git(repo, "branch", "--list")
    # queued too; its branch is taken by hand before it launches: it ends, nothing is made
    doomed = submit_in_worktree(
        home, tmux_env, repo, "true", "--max-running", "1", "--branch", "later"
    )
    sh_git(repo, "branch", "later")
    theirs = sh_git(repo, "rev-parse", "later")
    go.touch()
    wait_ended(home, first, queued, doomed)
    record = job_record(home, queued)
    assert record.status.value == "completed", record.error
    assert record.worktree["created"]
    assert (path / "where.txt").read_text().strip() == str(path)
    failed = job_record(home, doomed)
    assert failed.status.value == "error"
    assert "never_launched" in (failed.error or "") and "'later' already exists" in failed.error
    assert not failed.worktree["created"] and not Path(failed.worktree["path"]).exists()
    assert sh_git(repo, "rev-parse", "later") == theirs
    assert failed.worktree["path"] not in sh_git(repo, "worktree", "list", "--porcelain")


def test_delegate_toml_makes_worktrees_the_default(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    (repo / "sub").mkdir()
    (repo / "sub" / "keep.txt").write_text("x\n")
    sh_git(repo, "add", "-A")
    sh_git(repo, "commit", "-q", "-m", "sub")
    home.mkdir(parents=True)
    (home / "delegate.toml").write_text("[worktree]\ndefault = true\n")
    result = submit_shell(home, tmux_env, repo / "sub", "pwd > where.txt", "--no-wait", "--json")
    assert result.returncode == 0, result.stderr
    job_id = json_lines(result.stdout)[0]["job_id"]
    record = job_record(home, job_id)
    assert record.worktree is not None
    inside = Path(record.worktree["path"]) / "sub"  # the same subfolder, in the worktree
    assert record.workdir == str(inside)
    retry_until(lambda: (inside / "where.txt").exists(), timeout=20)
    assert (inside / "where.txt").read_text().strip() == str(inside)
    refused = submit_shell(home, tmux_env, repo, "true", "--no-worktree", "--base", "main")
    assert_one_line_error(refused)
    assert "--branch and --base need --worktree" in refused.stderr
    wait_ended(home, job_id)
    assert worktree_check(open_state(home)).status == "ok"
    # over [worktree] keep_days: reported (doctor, the monitor), never removed
    (home / "delegate.toml").write_text("[worktree]\ndefault = true\nkeep_days = 0\n")
    check = worktree_check(open_state(home))
    assert check.status == "warn" and f"older than 0 days: {job_id}" in check.detail
    assert Path(job_record(home, job_id).worktree["path"]).is_dir()


def test_a_worktree_made_by_a_launcher_that_died_is_adopted(state: State, tmp_path: Path):
    """The launcher made the worktree, then died before recording it: the next launch takes
    it over instead of failing; a folder that is not that worktree is refused."""
    repo = make_repo(tmp_path / "repo")
    job, _ = state.registry.register(agent="shell", workdir=str(repo))
    planned = worktrees.plan(repo, branch=None, base=None)
    made = worktrees.ensure(state, worktrees.record(state, job, planned))
    assert made.worktree is not None and made.worktree["created"]
    lost = state.registry.update(job.job_id, worktree={**made.worktree, "created": False})
    assert worktrees.ensure(state, lost).worktree == made.worktree
    other, _ = state.registry.register(agent="shell", workdir=str(repo))
    recorded = worktrees.record(state, other, planned)
    Path(recorded.worktree["path"]).mkdir(parents=True)  # something else is there
    with pytest.raises(GitError, match="already exists"):
        worktrees.ensure(state, recorded)
    assert f"delegate/{other.job_id}" not in sh_git(repo, "branch", "--list")


def test_a_retried_worktree_job_works_on_in_its_worktree(home: Path, tmux_env, tmp_path: Path):
    """Attempt 2 of a worktree job runs in attempt 1's worktree and branch, and from then on
    the worktree is attempt 2's: `diff` shows both attempts' work, `worktree list` one entry."""
    repo = make_repo(tmp_path / "repo")
    script = (
        'echo "attempt $(ls attempt-* 2>/dev/null | wc -l)" > "attempt-$$"\n'
        "[ $(ls attempt-* | wc -l) -ge 2 ]\n"  # the first attempt fails, the second completes
    )
    first = submit_in_worktree(
        home, tmux_env, repo, script, "--retries", "1", "--retry-on", "error", "--backoff", "1s..1s"
    )
    state = open_state(home)
    second = retry_until(lambda: state.registry.get(first).retried_by, timeout=60)
    wait_ended(home, second)
    one, two = job_record(home, first), job_record(home, second)
    assert (one.status.value, two.status.value) == ("error", "completed")
    assert two.workdir == one.workdir == one.worktree["path"]  # type: ignore[index]
    assert two.worktree is not None and two.worktree["branch"] == f"delegate/{first}"
    assert one.worktree is not None and one.worktree["handed_to"] == second
    counts = json_lines(run_cli(home, "diff", second, "--json", env=tmux_env).stdout)
    assert len(counts) == 2 and all(c["path"].startswith("attempt-") for c in counts)
    listed = json_lines(run_cli(home, "worktree", "list", "--json", env=tmux_env).stdout)
    assert [r["job_id"] for r in listed] == [second]


def test_clean_never_loses_a_detached_commit_or_an_ignored_file(
    home: Path, tmux_env, tmp_path: Path
):
    """Issue 30, item 6: an agent committed on a detached HEAD and wrote an ignored file; its
    branch alone looks merged. `list` says what keeps it and `clean` keeps it; an ignored
    folder a build makes again (`node_modules/`) keeps nothing."""
    repo = make_repo(tmp_path / "repo")
    (repo / ".gitignore").write_text("*.local\nnode_modules/\n")
    sh_git(repo, "add", ".gitignore")
    sh_git(repo, "commit", "-q", "-m", "ignore")
    detached = submit_in_worktree(
        home,
        tmux_env,
        repo,
        "git checkout -q --detach && echo x > x.txt && git add x.txt && git commit -q -m x"
        " && echo mine > notes.local",
    )
    built = submit_in_worktree(
        home, tmux_env, repo, "mkdir node_modules && echo 1 > node_modules/a"
    )
    wait_ended(home, detached, built)
    listed = json_lines(run_cli(home, "worktree", "list", "--json", env=tmux_env).stdout)
    rows = {row["job_id"]: row for row in listed}
    assert rows[detached]["stray"] == 1 and rows[detached]["ignored"] == 1
    assert rows[detached]["kept_by"] == "1 commit(s) at its HEAD only"
    assert (rows[built]["stray"], rows[built]["ignored"], rows[built]["kept_by"]) == (
        0,
        0,
        "merged",
    )
    result = run_cli(home, "worktree", "clean", env=tmux_env)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()}
    assert lines[detached].startswith(f"{detached} kept: ")
    assert "1 commit(s) at its HEAD reachable from no other branch" in lines[detached]
    assert "1 ignored file(s) outside [worktree] disposable" in lines[detached]
    path = Path(job_record(home, detached).worktree["path"])
    assert (path / "notes.local").read_text() == "mine\n"
    assert lines[built].startswith(f"{built} removed")
