"""`delegate merge`: a job's branch into a branch of the person's checkout, never half-done.

Every merge happens in a temporary worktree (under the state directory) detached at the target
branch's tip: the merge (or squash, or rebase), then the `--check` command on the result. Only
when both succeed does the target move: a fast-forward of the checkout (or other worktree) that
has it checked out, which must have no uncommitted changes, or, when it is checked out nowhere,
a compare-and-swap of the branch ref. A conflict or a failing check is undone in the temporary
worktree, so the person's checkout never sees it: its `git status` and HEAD stay as they were.

The target, unless `--into` says: the branch the job's worktree was made from (its base
branch), else the branch the person's checkout has checked out.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters import git
from delegate.adapters.fsio import FileLock
from delegate.core.errors import GitError, UsageError
from delegate.core.model import Job
from delegate.core.timefmt import record_timestamp
from delegate.services.jobs.submit import split_command
from delegate.services.state import State
from delegate.services.worktrees import chain, worktree_of

CHECK_TIMEOUT_S = 3600.0
CHECK_TAIL_LINES = 15
MERGE_LOCK_WAIT_S = 3600.0  # another merge into the same repository may be running its check


class CheckResult(NamedTuple):
    """One run of a `--check` command: passed or not, its exit code and last lines."""

    passed: bool
    code: int | None  # None: it could not start, or ran out of time
    tail: list[str]

    def to_dict(self) -> dict[str, Any]:
        return self._asdict()


def parse_check(text: str | None) -> list[str] | None:
    """`--check CMD`: split into words as a shell would; never run by one."""
    return split_command(text, "--check")


def run_check(argv: list[str], cwd: Path, env: Mapping[str, str]) -> CheckResult:
    """Run the check in `cwd`, its stdout and stderr together; keep its last lines."""
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=CHECK_TIMEOUT_S,
        )
    except OSError as exc:
        return CheckResult(False, None, [f"{argv[0]}: {exc.strerror}"])
    except subprocess.TimeoutExpired:
        return CheckResult(False, None, [f"{argv[0]} ran over {CHECK_TIMEOUT_S:g} s"])
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    return CheckResult(done.returncode == 0, done.returncode, lines[-CHECK_TAIL_LINES:])


class MergeResult(NamedTuple):
    job_id: str
    outcome: str  # merged, up_to_date, conflict, check_failed
    into: str
    commit: str | None = None
    conflicts: tuple[str, ...] = ()
    check: CheckResult | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in ("merged", "up_to_date")

    def to_dict(self) -> dict[str, Any]:
        data = {**self._asdict(), "conflicts": list(self.conflicts)}
        data["check"] = self.check.to_dict() if self.check else None
        return data


class _Plan(NamedTuple):
    job: Job
    repo: Path
    branch: str  # the job's
    into: str


def _plan(state: State, job_id: str, into: str | None) -> _Plan:
    """Everything checked before anything changes; GitError/UsageError in one line."""
    job = state.registry.get(job_id)
    entry = worktree_of(job)
    jobs = chain(state, job_id)
    for later in jobs[jobs.index(job_id) :]:
        status = state.registry.get(later).status
        if not status.terminal:  # the job, or a follow-up (`review`) in the same worktree
            raise UsageError(f"job {later} is {status.value}; merge once it has ended")
    repo = Path(entry["repo"])
    pending = git.status(Path(entry["path"]))
    if pending:
        raise GitError(
            f"the worktree of job {job_id} has uncommitted changes, which a merge would leave"
            f" out: {_names(e.path for e in pending)}"
        )
    target = into or entry.get("base_ref") or git.current_branch(repo)
    if target is None:
        raise UsageError(f"job {job_id}: its base was no branch; say which with --into BRANCH")
    if not git.branch_exists(repo, target):
        raise GitError(f"no branch {target!r} in {repo}")
    if target == entry["branch"]:
        raise UsageError(f"--into {target} is the job's own branch")
    return _Plan(job, repo, entry["branch"], target)


def _names(paths: Any, most: int = 10) -> str:
    found = list(paths)
    more = f" and {len(found) - most} more" if len(found) > most else ""
    return ", ".join(found[:most]) + more


def _checkout_of(repo: Path, branch: str) -> Path | None:
    """The worktree (the person's checkout or another) that has `branch` checked out."""
    for tree in git.worktree_list(repo):
        if tree.branch == branch:
            return Path(tree.path)
    return None


def _refuse_dirty(checkout: Path | None, into: str) -> None:
    """The checkout the target will fast-forward in must hold no uncommitted change to a
    tracked file (untracked files stay; git refuses itself if one would be overwritten)."""
    if checkout is None:
        return
    changed = [e.path for e in git.status(checkout) if e.code != "??"]
    if changed:
        raise GitError(
            f"{checkout} (on {into}) has uncommitted changes; commit or stash them first:"
            f" {_names(changed)}"
        )


def merge_jobs(
    state: State,
    job_ids: list[str],
    *,
    into: str | None,
    mode: str,
    check: list[str] | None,
    on_result: Callable[[MergeResult], None] = lambda result: None,
) -> list[MergeResult]:
    """Merge each job in turn into one branch, each merged (and checked) on top of the last.
    Every job is checked for what can be known beforehand before the first merge."""
    if mode not in git.MERGE_MODES:
        raise UsageError(f"unknown merge mode {mode!r}")
    plans = [_plan(state, job_id, into) for job_id in job_ids]
    targets = {(str(p.repo), p.into) for p in plans}
    if len(targets) > 1:
        raise UsageError(
            "these jobs merge into different branches or repositories; say one with --into"
        )
    repo, target = plans[0].repo, plans[0].into
    _refuse_dirty(_checkout_of(repo, target), target)
    lock = state.layout.worktree_for(repo, "merge").parent / ".merge.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    results = []
    with FileLock(lock, timeout_s=MERGE_LOCK_WAIT_S):
        for plan in plans:
            result = _merge_one(state, plan, mode=mode, check=check)
            on_result(result)
            results.append(result)
    return results


def _merge_one(state: State, plan: _Plan, *, mode: str, check: list[str] | None) -> MergeResult:
    """Merge and check in a temporary worktree; move the target only when both succeed."""
    repo, job_id = plan.repo, plan.job.job_id
    tip = git.branch_tips(repo)[plan.into]
    branch_tip = git.branch_tips(repo)[plan.branch]
    if git.is_ancestor(repo, branch_tip, tip):
        return MergeResult(job_id, "up_to_date", plan.into, tip)
    scratch = state.layout.worktree_for(repo, f".merge-{job_id}-{os.getpid()}")
    scratch.parent.mkdir(parents=True, exist_ok=True)
    message = f"Merge job {job_id} ({plan.branch}) into {plan.into}"
    try:
        if mode == "rebase":  # replay the job's commits, from its tip, onto the target
            git.worktree_add_detached(repo, scratch, branch_tip)
            attempt = git.merge_here(scratch, tip, mode=mode, message=message)
        else:
            git.worktree_add_detached(repo, scratch, tip)
            attempt = git.merge_here(
                scratch, f"refs/heads/{plan.branch}", mode=mode, message=message
            )
        if attempt.head is None:
            return MergeResult(job_id, "conflict", plan.into, conflicts=tuple(attempt.conflicts))
        checked = run_check(check, scratch, state.env) if check else None
        if checked is not None and not checked.passed:
            return MergeResult(job_id, "check_failed", plan.into, check=checked)
        _advance(repo, plan.into, attempt.head, tip, message)
    finally:
        git.worktree_discard(repo, scratch)
    merged = {"commit": attempt.head, "into": plan.into, "mode": mode, "at": record_timestamp()}
    state.registry.update(job_id, merged=merged)
    return MergeResult(job_id, "merged", plan.into, attempt.head, check=checked)


def _advance(repo: Path, branch: str, new: str, old: str, reason: str) -> None:
    checkout = _checkout_of(repo, branch)
    if checkout is None:
        git.move_branch(repo, branch, new, old, reason)
        return
    _refuse_dirty(checkout, branch)  # it may have changed while the check ran
    git.fast_forward(checkout, new)
