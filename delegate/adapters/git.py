"""The one module that runs git: argv lists (never a shell), machine formats (`-z`,
`--porcelain`) parsed here, the C locale, and no prompt for credentials.

Every failure is a `GitError` with one line: what was asked and git's own first line of why.
An `index.lock` held by another git is waited on (bounded, with a short backoff), then
reported once; the lock file is never removed here.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from delegate.config.settings import settings
from delegate.core.errors import GitError, GitLockHeld

LOCK_WAIT_S = 10.0
_LOCK_HELD = re.compile(r"Unable to create '([^']*\.lock)': File exists")
_BASE_ENV = {
    "LC_ALL": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_OPTIONAL_LOCKS": "0",  # `status` of a listing never takes the index lock
}


def _git_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    # GIT_DIR and friends a caller may have set (a hook) must not redirect these commands
    env = {k: v for k, v in settings().env.items() if not k.startswith("GIT_")}
    env.update(_BASE_ENV)
    env.update(extra or {})
    return env


def git_exe() -> str:
    found = shutil.which("git")
    if found is None:
        raise GitError("git is not installed (not found on PATH)")
    return found


def run(
    cwd: Path | str,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    lock_wait_s: float = LOCK_WAIT_S,
) -> subprocess.CompletedProcess[bytes]:
    """`git -C cwd ARGS`, its output as bytes. A held index.lock is retried until
    `lock_wait_s` has passed; with `check`, a non-zero exit raises GitError."""
    argv = [git_exe(), "-C", str(cwd), *args]
    deadline = time.monotonic() + lock_wait_s
    pause = 0.02
    while True:
        try:
            done = subprocess.run(
                argv, capture_output=True, env=_git_env(env), stdin=subprocess.DEVNULL
            )
        except OSError as exc:
            raise GitError(f"git {args[0]} could not run in {cwd}: {exc.strerror}") from None
        held = _LOCK_HELD.search(done.stderr.decode("utf-8", "replace"))
        if done.returncode == 0 or held is None:
            break
        if time.monotonic() >= deadline:
            raise GitLockHeld(
                f"git {args[0]}: {held.group(1)} is held by another git process"
                f" (waited {lock_wait_s:g} s)"
            )
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    if check and done.returncode != 0:
        raise GitError(f"git {args[0]} failed in {cwd}: {first_line(done.stderr)}")
    return done


def first_line(stderr: bytes) -> str:
    """git's first meaningful line of complaint (its `fatal:`/`error:` prefix dropped)."""
    for raw in stderr.decode("utf-8", "replace").splitlines():
        line = raw.strip()
        if line and not line.startswith("hint:"):
            return re.sub(r"^(fatal|error):\s*", "", line)
    return "no reason given"


def out(cwd: Path | str, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The command's stdout as text, without its trailing newline."""
    return run(cwd, *args, env=env).stdout.decode("utf-8", "surrogateescape").rstrip("\n")


# --- what a repository is ----------------------------------------------------------------


def toplevel(path: Path) -> Path:
    """The top folder of the checkout `path` is in; GitError when it is in none."""
    done = run(path, "rev-parse", "--show-toplevel", check=False)
    if done.returncode != 0:
        raise GitError(f"{path} is not inside a git repository")
    return Path(done.stdout.decode("utf-8", "surrogateescape").rstrip("\n"))


def resolve_commit(repo: Path, ref: str) -> str:
    """The commit `ref` names (full hex); GitError when it names none."""
    if ref.startswith("-"):
        raise GitError(f"base {ref!r} is not a commit in {repo}")
    done = run(
        repo,
        "rev-parse",
        "--verify",
        "--quiet",
        "--end-of-options",
        f"{ref}^{{commit}}",
        check=False,
    )
    if done.returncode != 0:
        raise GitError(f"base {ref!r} is not a commit in {repo}")
    return done.stdout.decode().strip()


def current_branch(repo: Path) -> str | None:
    """The branch checked out in `repo`, or None on a detached HEAD."""
    done = run(repo, "symbolic-ref", "--quiet", "--short", "HEAD", check=False)
    return done.stdout.decode("utf-8", "surrogateescape").strip() or None


def branch_tips(repo: Path) -> dict[str, str]:
    """Every local branch (short name) and the commit it points at, in one call."""
    data = run(repo, "for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/").stdout
    tips = {}
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        commit, _, ref = line.partition(" ")
        tips[ref.removeprefix("refs/heads/")] = commit
    return tips


def branch_exists(repo: Path, branch: str) -> bool:
    done = run(repo, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", check=False)
    return done.returncode == 0


def check_branch_name(repo: Path, branch: str) -> None:
    done = run(repo, "check-ref-format", "--branch", branch, check=False)
    if done.returncode != 0 or branch.startswith("-"):
        raise GitError(f"{branch!r} is not a valid branch name")


# --- worktrees ---------------------------------------------------------------------------


class Worktree(NamedTuple):
    """One entry of `git worktree list --porcelain -z`."""

    path: str
    head: str | None
    branch: str | None  # short name; None when detached or bare
    locked: bool = False
    prunable: bool = False


# One `git worktree` command at a time per repository: git writes a new worktree's entry under
# .git/worktrees/ in several steps, and another git reading the list meanwhile fails ("failed to
# read .git/worktrees/<id>/commondir"). Ours take the repository's lock (a file in its common
# git folder, flock); a failure of that kind from someone else's git is tried again.
WORKTREES_LOCK = "delegate-worktrees.lock"
WORKTREES_LOCK_WAIT_S = 120.0
_HALF_WRITTEN = re.compile(r"failed to read .*worktrees/|is not a valid worktree|commondir")
HALF_WRITTEN_TRIES = 5


@contextlib.contextmanager
def worktrees_locked(repo: Path) -> Iterator[None]:
    """Hold `repo`'s worktree lock (waiting for it, bounded)."""
    common = Path(out(repo, "rev-parse", "--git-common-dir"))
    if not common.is_absolute():
        common = Path(repo) / common
    fd = os.open(common / WORKTREES_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + WORKTREES_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise GitLockHeld(
                        f"another worktree change in {repo} took over {WORKTREES_LOCK_WAIT_S:g} s"
                    ) from None
                time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def _worktree(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """`git worktree ARGS` under the repository's lock; tried again when another git left an
    entry half written."""
    with worktrees_locked(repo):
        for attempt in range(HALF_WRITTEN_TRIES):
            done = run(repo, "worktree", *args, check=False)
            half = _HALF_WRITTEN.search(done.stderr.decode("utf-8", "replace"))
            if done.returncode == 0 or half is None or attempt + 1 == HALF_WRITTEN_TRIES:
                break
            time.sleep(0.05 * (attempt + 1))
    if check and done.returncode != 0:
        raise GitError(f"git worktree failed in {repo}: {first_line(done.stderr)}")
    return done


def worktree_add(repo: Path, path: Path, branch: str, base: str) -> None:
    """A new worktree at `path` on the new branch `branch`, made from commit `base`."""
    _worktree(repo, "add", "--quiet", "-b", branch, "--", str(path), base)


def worktree_list(repo: Path) -> list[Worktree]:
    return parse_worktrees(_worktree(repo, "list", "--porcelain", "-z").stdout)


def parse_worktrees(data: bytes) -> list[Worktree]:
    """Records are NUL-terminated lines, a worktree ending with an empty one."""
    found: list[Worktree] = []
    fields: dict[str, str] = {}
    for raw in data.split(b"\0"):
        line = raw.decode("utf-8", "surrogateescape")
        if line:
            key, _, value = line.partition(" ")
            fields[key] = value
            continue
        if "worktree" in fields:
            branch = fields.get("branch")
            found.append(
                Worktree(
                    path=fields["worktree"],
                    head=fields.get("HEAD"),
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    locked="locked" in fields,
                    prunable="prunable" in fields,
                )
            )
        fields = {}
    return found


def worktree_remove(repo: Path, path: Path) -> None:
    """Remove a clean worktree; git itself refuses a dirty one (never --force)."""
    _worktree(repo, "remove", "--", str(path))


def branch_delete_merged(repo: Path, branch: str) -> str | None:
    """`git branch -d` (never -D): None when deleted, else git's reason for keeping it."""
    done = run(repo, "branch", "-d", "--", branch, check=False)
    return None if done.returncode == 0 else first_line(done.stderr)


# --- what a worktree holds ---------------------------------------------------------------


class StatusEntry(NamedTuple):
    code: str  # the two XY letters, "??" for untracked
    path: str


def status(path: Path) -> list[StatusEntry]:
    """Uncommitted and untracked changes (`status --porcelain -z`), renames' origins dropped."""
    data = run(path, "status", "--porcelain", "-z", "--untracked-files=all").stdout
    return parse_status(data)


def parse_status(data: bytes) -> list[StatusEntry]:
    entries: list[StatusEntry] = []
    parts = data.split(b"\0")
    i = 0
    while i < len(parts):
        item = parts[i].decode("utf-8", "surrogateescape")
        i += 1
        if len(item) < 4:
            continue
        code = item[:2]
        entries.append(StatusEntry(code, item[3:]))
        if "R" in code or "C" in code:
            i += 1  # the origin path of a rename or copy follows
    return entries


def stray_commits(worktree: Path, branch: str) -> list[str]:
    """Commits the worktree's HEAD holds (detached or not) that no branch but its own
    `branch`, and no remote-tracking ref, reaches: what removing the worktree and its branch
    would leave dangling."""
    text = out(
        worktree, "rev-list", "HEAD", "--not", f"--exclude={branch}", "--branches", "--remotes"
    )
    return text.split()


def ignored(path: Path) -> list[str]:
    """The ignored files and folders in the worktree at `path` (a folder wholly ignored is one
    entry, `node_modules/`)."""
    data = run(path, "status", "--porcelain", "-z", "--ignored", "--untracked-files=all").stdout
    return [entry.path for entry in parse_status(data) if entry.code == "!!"]


def unreachable_commits(repo: Path, branch: str, base: str) -> list[str]:
    """Commits on `branch` reachable neither from `base` nor from any remote-tracking ref:
    the work only this branch holds."""
    text = out(repo, "rev-list", f"refs/heads/{branch}", "--not", base, "--remotes", "--")
    return text.split()


def ahead_behind(repo: Path, branch: str, base: str) -> tuple[int, int]:
    """(commits on `branch` not on `base`, commits on `base` not on `branch`)."""
    text = out(repo, "rev-list", "--left-right", "--count", f"refs/heads/{branch}...{base}", "--")
    ahead, behind = text.split()
    return int(ahead), int(behind)


def _with_temp_index(path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the worktree's index with every change staged (`add -A`), in a temporary
    folder; the worktree's own index is only read (its stat data spares rehashing)."""
    own_index = Path(out(path, "rev-parse", "--path-format=absolute", "--git-path", "index"))
    import tempfile  # tempfile (random, weakref): only a diff of uncommitted changes needs it

    folder = Path(tempfile.mkdtemp(prefix="delegate-index-"))
    index = folder / "index"
    if own_index.exists():
        shutil.copyfile(own_index, index)
    env = {"GIT_INDEX_FILE": str(index)}
    run(path, "add", "-A", "--", ".", env=env)
    return folder, env


def diff_against(path: Path, base: str, options: Sequence[str], *, color: bool) -> bytes:
    """`git diff` of `base` against everything in the worktree at `path`: commits,
    uncommitted and untracked files alike, in git's own format."""
    folder, env = _with_temp_index(path)
    try:
        colour = "--color=always" if color else "--color=never"
        return run(path, "diff", "--cached", colour, *options, base, "--", env=env).stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class FileCount(NamedTuple):
    path: str
    added: int | None  # None for a binary file
    removed: int | None


def numstat(path: Path, base: str) -> list[FileCount]:
    folder, env = _with_temp_index(path)
    try:
        data = run(path, "diff", "--cached", "--numstat", "-z", base, "--", env=env).stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return parse_numstat(data)


def parse_numstat(data: bytes) -> list[FileCount]:
    """`--numstat -z`: `ADDED\\tREMOVED\\tPATH\\0`, or for a rename `A\\tR\\t\\0FROM\\0TO\\0`."""
    counts: list[FileCount] = []
    parts = data.split(b"\0")
    i = 0
    while i < len(parts):
        item = parts[i].decode("utf-8", "surrogateescape")
        i += 1
        if not item:
            continue
        added, removed, name = item.split("\t", 2)
        if not name:  # a rename: the new name is the second path
            name = parts[i + 1].decode("utf-8", "surrogateescape")
            i += 2
        counts.append(
            FileCount(
                name,
                None if added == "-" else int(added),
                None if removed == "-" else int(removed),
            )
        )
    return counts


def size_on_disk(path: Path) -> int:
    """Bytes the folder's files take (allocated blocks), symlinks not followed."""
    total = 0
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += info.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


# --- merging: always in a temporary worktree; the person's checkout only fast-forwards ----


def worktree_add_detached(repo: Path, path: Path, commit: str) -> None:
    """A temporary worktree at `path` on a detached HEAD at `commit` (no branch is made)."""
    _worktree(repo, "add", "--quiet", "--detach", "--", str(path), commit)


def worktree_discard(repo: Path, path: Path) -> None:
    """Remove a temporary merge worktree this toolkit made, whatever it holds (an aborted
    merge, a check's build output). The one `--force`: only ever for these, never a job's."""
    _worktree(repo, "remove", "--force", "--", str(path), check=False)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    _worktree(repo, "prune", check=False)


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    """`older` is reachable from `newer` (every commit of it is already there)."""
    done = run(repo, "merge-base", "--is-ancestor", older, newer, check=False)
    return done.returncode == 0


def conflicted(path: Path) -> list[str]:
    """The files left unmerged (`diff --diff-filter=U`) in the worktree at `path`."""
    data = run(path, "diff", "--name-only", "--diff-filter=U", "-z").stdout
    return [p.decode("utf-8", "surrogateescape") for p in data.split(b"\0") if p]


class MergeAttempt(NamedTuple):
    """What one merge in a temporary worktree gave: the new HEAD, or the conflicting files
    (the attempt already undone)."""

    head: str | None
    conflicts: list[str]


MERGE_MODES = ("merge", "squash", "rebase")


def merge_here(path: Path, onto: str, *, mode: str, message: str) -> MergeAttempt:
    """In the temporary worktree at `path`: merge (`--no-ff`) or squash `onto`'s commits
    into HEAD, or (`rebase`) replay HEAD's onto `onto`. On conflict the operation is
    aborted and the files named; any other failure is a GitError."""
    undo: tuple[str, ...]
    if mode == "rebase":
        done = run(path, "rebase", "--quiet", onto, check=False)
        undo = ("rebase", "--abort")
    elif mode == "squash":
        done = run(path, "merge", "--squash", "--quiet", onto, check=False)
        undo = ("reset", "--hard", "--quiet")  # a squash leaves no MERGE_HEAD to abort
    else:
        done = run(
            path, "merge", "--no-ff", "--no-edit", "--quiet", "-m", message, onto, check=False
        )
        undo = ("merge", "--abort")
    if done.returncode != 0:
        conflicts = conflicted(path)
        run(path, *undo, check=False)
        if conflicts:
            return MergeAttempt(None, conflicts)
        raise GitError(f"git {mode} failed in {path}: {first_line(done.stderr + done.stdout)}")
    if mode == "squash":
        run(path, "commit", "--quiet", "--no-edit", "-m", message)
    return MergeAttempt(out(path, "rev-parse", "HEAD"), [])


def fast_forward(checkout: Path, commit: str) -> None:
    """Move the branch checked out at `checkout` to `commit`, its files with it; git refuses
    (changing nothing) unless it is a fast-forward that overwrites nothing."""
    run(checkout, "merge", "--ff-only", "--quiet", commit)


def move_branch(repo: Path, branch: str, new: str, old: str, reason: str) -> None:
    """Point `branch` (checked out nowhere) at `new`, only if it still points at `old`."""
    run(repo, "update-ref", "-m", reason, f"refs/heads/{branch}", new, old)
