"""adapters/git: its parsers (pure), and against real repositories made here: a held
index.lock is waited on then refused in one line, and a diff never touches the real index."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest

from delegate.adapters import git, procfs
from delegate.core.errors import GitError, GitLockHeld, UsageError
from delegate.core.timefmt import parse_span


def sh_git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_repo(folder: Path, files: int = 1) -> Path:
    """A repository with one commit of `files` files, its own identity (HOME is not ours)."""
    folder.mkdir(parents=True, exist_ok=True)
    sh_git(folder, "init", "-q", "-b", "main")
    sh_git(folder, "config", "user.email", "test@example.invalid")
    sh_git(folder, "config", "user.name", "Test")
    for i in range(files):
        (folder / f"f{i}.txt").write_text(f"line {i}\n")
    sh_git(folder, "add", "-A")
    sh_git(folder, "commit", "-q", "-m", "init")
    return folder


def test_parse_worktrees_porcelain_z():
    data = (
        b"worktree /r\0HEAD abc\0branch refs/heads/main\0\0"
        b"worktree /w 1\0HEAD def\0detached\0\0"
        b"worktree /w2\0HEAD 123\0branch refs/heads/delegate/x\0locked\0prunable gone\0\0"
    )
    found = git.parse_worktrees(data)
    assert [(w.path, w.branch) for w in found] == [
        ("/r", "main"),
        ("/w 1", None),
        ("/w2", "delegate/x"),
    ]
    assert found[2].locked and found[2].prunable and not found[0].locked


def test_parse_status_z_keeps_names_with_spaces_and_skips_rename_origins():
    data = b" M a b.txt\0?? new\nline\0R  to.txt\0from.txt\0A  c\0"
    assert git.parse_status(data) == [
        (" M", "a b.txt"),
        ("??", "new\nline"),
        ("R ", "to.txt"),
        ("A ", "c"),
    ]


def test_parse_numstat_z_with_binary_and_rename():
    data = b"3\t1\ta.txt\x00-\t-\tpic.png\x000\t0\t\x00old.txt\x00new.txt\x00"
    assert git.parse_numstat(data) == [
        ("a.txt", 3, 1),
        ("pic.png", None, None),
        ("new.txt", 0, 0),
    ]


def test_not_a_repository_and_unknown_base_are_one_line(tmp_path: Path):
    with pytest.raises(GitError, match="not inside a git repository") as caught:
        git.toplevel(tmp_path)
    assert "\n" not in str(caught.value)
    repo = make_repo(tmp_path / "repo")
    with pytest.raises(GitError, match="'nosuch' is not a commit"):
        git.resolve_commit(repo, "nosuch")
    with pytest.raises(GitError):
        git.resolve_commit(repo, "--output=/tmp/x")  # never taken for an option


def test_held_index_lock_is_waited_on_then_refused(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    (repo / "f0.txt").write_text("changed\n")
    lock = repo / ".git" / "index.lock"
    lock.write_text("")
    started = time.monotonic()
    with pytest.raises(GitLockHeld, match=r"index\.lock is held by another git process"):
        git.run(repo, "add", "f0.txt", lock_wait_s=0.4)
    assert time.monotonic() - started >= 0.4
    assert lock.exists()  # never removed by us
    # released while we wait: the command goes through
    threading.Timer(0.3, lock.unlink).start()
    git.run(repo, "add", "f0.txt", lock_wait_s=5)
    assert "M  f0.txt" in sh_git(repo, "status", "--porcelain")


def test_diff_includes_commits_changes_and_untracked_without_touching_the_index(tmp_path: Path):
    repo = make_repo(tmp_path / "repo", files=2)
    base = sh_git(repo, "rev-parse", "HEAD").strip()
    (repo / "f0.txt").write_text("committed\n")
    sh_git(repo, "commit", "-q", "-am", "one")
    (repo / "f1.txt").write_text("uncommitted\n")
    (repo / "untracked.txt").write_text("new\n")
    status_before = sh_git(repo, "status", "--porcelain")  # (it may refresh the index)
    index = repo / ".git" / "index"
    before = (index.read_bytes(), index.stat().st_mtime_ns)
    patch = git.diff_against(repo, base, [], color=False).decode()
    assert "+committed" in patch and "+uncommitted" in patch and "+new" in patch
    counts = {c.path: (c.added, c.removed) for c in git.numstat(repo, base)}
    assert counts == {"f0.txt": (1, 1), "f1.txt": (1, 1), "untracked.txt": (1, 0)}
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    assert sh_git(repo, "status", "--porcelain") == status_before


def test_unreachable_commits_counts_what_only_the_branch_holds(tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    sh_git(repo, "checkout", "-q", "-b", "work")
    (repo / "f0.txt").write_text("work\n")
    sh_git(repo, "commit", "-q", "-am", "work")
    assert len(git.unreachable_commits(repo, "work", "main")) == 1
    assert git.ahead_behind(repo, "work", "main") == (1, 0)
    # a remote-tracking ref holding it makes it safe
    sh_git(repo, "update-ref", "refs/remotes/origin/work", "work")
    assert git.unreachable_commits(repo, "work", "main") == []


def test_processes_using_sees_a_cwd_inside(tmp_path: Path):
    inside = tmp_path / "inside"
    inside.mkdir()
    sleeper = subprocess.Popen(["sleep", "30"], cwd=inside)
    try:
        uses = procfs.processes_using([inside, tmp_path / "elsewhere"])
        assert (sleeper.pid, "cwd") in uses[inside]
        assert uses[tmp_path / "elsewhere"] == []
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("30s", 30.0), ("10m", 600.0), ("12h", 43200.0), ("7d", 604800.0)],
)
def test_parse_span(text: str, seconds: float):
    assert parse_span(text) == seconds


@pytest.mark.parametrize("text", ["", "d", "soon", "-1h", "nan"])
def test_parse_span_refuses(text: str):
    with pytest.raises(UsageError, match="--older-than"):
        parse_span(text, "--older-than")
