"""A git worktree per job: planned at submit, made at launch, shown, diffed and cleaned up.

`plan` checks everything before a job exists (a repository, a base that resolves, a branch that
is free), `record` writes the intent into the job, `ensure` makes the worktree when the job
launches (at once, or later for a queued job). `clean` removes a worktree only when no work can
be lost: the job ended, nothing uncommitted or untracked, every commit reachable from the base
branch or a remote-tracking ref, and no live process inside it. git itself is asked through
`adapters/git` only; nothing here ever forces.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from delegate.adapters import git, procfs
from delegate.config.profiles import DISPOSABLE, ConfigFile, read_config, worktree_config
from delegate.core.errors import GitError, UsageError
from delegate.core.model import Job
from delegate.core.timefmt import parse_timestamp, record_timestamp
from delegate.services.state import State

LIST_THREADS = 8  # git processes at once for a listing: they mostly wait on the disk


class WorktreePlan(NamedTuple):
    """What `submit --worktree` will make, checked before the job is registered."""

    repo: Path  # the person's checkout (its top folder)
    subdir: str  # where --workdir was inside it, kept inside the worktree too
    base: str  # the commit
    base_ref: str | None  # the branch the base came from, for "merged" later
    branch: str | None  # None: `delegate/<job id>`, known once the job is


def plan_for(
    flag: bool | None,
    *,
    branch: str | None,
    base: str | None,
    config: ConfigFile,
    profile: str,
    workdir: Path,
) -> WorktreePlan | None:
    """The worktree submit should make: `--worktree/--no-worktree`, else `[worktree] default`
    or the profile's `worktree`; None for none. Checked now, before any job exists."""
    asked = (
        flag if flag is not None else worktree_config(config.tables, config.path).wanted(profile)
    )
    if not asked:
        if branch is not None or base is not None:
            raise UsageError("--branch and --base need --worktree")
        return None
    return plan(workdir, branch=branch, base=base)


def plan(workdir: Path, *, branch: str | None, base: str | None) -> WorktreePlan:
    """Check the request; GitError (one line) when it cannot be honoured. Creates nothing."""
    repo = git.toplevel(workdir)
    subdir = str(workdir.resolve().relative_to(repo.resolve()))
    commit = git.resolve_commit(repo, base or "HEAD")
    if base is None:
        base_ref = git.current_branch(repo)
    else:
        base_ref = base if git.branch_exists(repo, base) else None
    if branch is not None:
        git.check_branch_name(repo, branch)
        if git.branch_exists(repo, branch):
            raise GitError(f"branch {branch!r} already exists in {repo}")
    return WorktreePlan(repo, "" if subdir == "." else subdir, commit, base_ref, branch)


def record(state: State, job: Job, wanted_tree: WorktreePlan) -> Job:
    """Write the worktree the job will run in into its record; its workdir becomes that."""
    return state.registry.update(job.job_id, **fields_for(state, job.job_id, wanted_tree))


def fields_for(state: State, job_id: str, wanted_tree: WorktreePlan) -> dict[str, Any]:
    """The record's `worktree` (not yet made) and `workdir` (in it) for a job's worktree."""
    path = state.layout.worktree_for(wanted_tree.repo, job_id)
    branch = wanted_tree.branch or f"delegate/{job_id}"
    entry = {
        "repo": str(wanted_tree.repo),
        "base": wanted_tree.base,
        "base_ref": wanted_tree.base_ref,
        "branch": branch,
        "path": str(path),
        "created": False,
    }
    workdir = path / wanted_tree.subdir if wanted_tree.subdir else path
    return {"worktree": entry, "workdir": str(workdir)}


def ensure(state: State, job: Job) -> Job:
    """Make the job's worktree if it has one not yet made (at launch). A failure leaves no
    branch behind: only a branch still at the base, used by no worktree, is deleted."""
    entry = job.worktree
    if not entry or entry.get("created"):
        return job
    repo, path, branch, base = (
        Path(entry["repo"]),
        Path(entry["path"]),
        entry["branch"],
        entry["base"],
    )
    if path.exists():
        if _made_by_us(repo, path, branch):  # a launcher that died after making it
            return state.registry.update(job.job_id, worktree={**entry, "created": True})
        raise GitError(f"{path} already exists; the worktree of job {job.job_id} was not made")
    if git.branch_exists(repo, branch):  # taken since submit (a queued job waits)
        raise GitError(f"branch {branch!r} already exists in {repo}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        git.worktree_add(repo, path, branch, base)
    except GitError:
        _undo_branch(repo, branch, base)
        raise
    return state.registry.update(job.job_id, worktree={**entry, "created": True})


def _made_by_us(repo: Path, path: Path, branch: str) -> bool:
    """`path` is a worktree of `repo` on `branch`."""
    real = os.path.realpath(path)
    return any(
        os.path.realpath(w.path) == real and w.branch == branch for w in git.worktree_list(repo)
    )


def _undo_branch(repo: Path, branch: str, base: str) -> None:
    """Delete `branch` only while it still points at `base` (it holds no work)."""
    if git.branch_exists(repo, branch) and not any(
        w.branch == branch for w in git.worktree_list(repo)
    ):
        git.run(repo, "update-ref", "-d", f"refs/heads/{branch}", base, check=False)


# --- one job's worktree ------------------------------------------------------------------


def worktree_of(job: Job) -> dict[str, Any]:
    """The job's worktree entry; GitError when it has none, or it is gone."""
    entry = job.worktree
    if not entry:
        raise GitError(f"job {job.job_id} has no worktree (it was not submitted with --worktree)")
    if entry.get("removed_at"):
        raise GitError(f"the worktree of job {job.job_id} was removed by `worktree clean`")
    if not entry.get("created"):
        raise GitError(f"the worktree of job {job.job_id} has not been made yet (job queued)")
    if not (Path(entry["path"]) / ".git").exists():
        raise GitError(f"the worktree of job {job.job_id} is gone: {entry['path']}")
    return entry


def chain(state: State, job_id: str) -> list[str]:
    """The review chain the job is part of, first job first (`follow_up_of` back, then each
    worktree's `handed_to` forward); just the job when it has none."""
    job = state.registry.get(job_id)
    seen = [job.job_id]
    while job.follow_up_of and job.follow_up_of not in seen:
        job = state.registry.get(job.follow_up_of)
        seen.insert(0, job.job_id)
    later = (state.registry.get(job_id).worktree or {}).get("handed_to")
    while later and later not in seen:
        seen.append(later)
        later = (state.registry.get(later).worktree or {}).get("handed_to")
    return seen


def diff(state: State, job_id: str, options: list[str], *, color: bool) -> bytes:
    """The job's changes against its base, in git's own format."""
    entry = worktree_of(state.registry.get(job_id))
    return git.diff_against(Path(entry["path"]), entry["base"], options, color=color)


def diff_counts(state: State, job_id: str) -> list[dict[str, Any]]:
    entry = worktree_of(state.registry.get(job_id))
    return [c._asdict() for c in git.numstat(Path(entry["path"]), entry["base"])]


def _compare_base(entry: dict[str, Any], tips: dict[str, str]) -> tuple[str, str]:
    """The base to compare with (its name for git, its commit): the base branch while it
    exists (merges into it count), else the base commit."""
    ref = entry.get("base_ref")
    if ref and ref in tips:
        return f"refs/heads/{ref}", tips[ref]
    return str(entry["base"]), str(entry["base"])


# --- listing -----------------------------------------------------------------------------


class WorktreeRow(NamedTuple):
    """One job's worktree as `worktree list` shows it; None where git could not say."""

    job_id: str
    state: str
    branch: str
    path: str
    repo: str
    present: bool
    ahead: int | None = None
    behind: int | None = None
    changed: int | None = None  # uncommitted or untracked files
    unpushed: int | None = None  # commits on neither the base branch nor a remote
    stray: int | None = None  # commits at its HEAD no other branch nor remote reaches
    ignored: int | None = None  # ignored files outside `[worktree] disposable`
    size: int | None = None
    age_s: float | None = None
    problem: str | None = None

    @property
    def kept_by(self) -> str:
        """merged, pushed, or how many commits only this branch (or its HEAD) holds."""
        if self.stray:
            return f"{self.stray} commit(s) at its HEAD only"
        if self.ahead == 0:
            return "merged"
        if self.unpushed == 0:
            return "pushed"
        return "-" if self.unpushed is None else f"{self.unpushed} unpushed"

    def to_dict(self) -> dict[str, Any]:
        return {**self._asdict(), "dirty": bool(self.changed), "kept_by": self.kept_by}


def jobs_with_worktrees(state: State) -> list[Job]:
    """Jobs whose worktree was made and not yet cleaned up, oldest first; a worktree handed to
    a follow-up job (`review`) is listed once, under the latest job."""
    return [
        j
        for j in state.registry.list(None)
        if j.worktree
        and j.worktree.get("created")
        and not j.worktree.get("removed_at")
        and not j.worktree.get("handed_to")
    ]


def _row(
    job: Job,
    now: datetime,
    tips: dict[str, str] | None,
    *,
    sizes: bool,
    disposable: tuple[str, ...] = DISPOSABLE,
) -> WorktreeRow:
    """One worktree's facts; `tips` are its repository's branches (None: git could not say)."""
    entry = job.worktree or {}
    repo, path, branch = Path(entry["repo"]), Path(entry["path"]), entry["branch"]
    age = (now - parse_timestamp(job.created_at)).total_seconds()
    row = WorktreeRow(job.job_id, job.status.value, branch, str(path), str(repo), path.is_dir())
    row = row._replace(age_s=age)
    if not row.present:
        return row._replace(problem="folder gone")
    try:
        if tips is None:
            raise GitError(f"cannot read the branches of {repo}")
        base, base_tip = _compare_base(entry, tips)
        if branch not in tips:
            raise GitError(f"its branch {branch} is gone")
        # the same commit: nothing ahead or behind, and no need to ask git
        same = tips[branch] == base_tip
        ahead, behind = (0, 0) if same else git.ahead_behind(repo, branch, base)
        unpushed = len(git.unreachable_commits(repo, branch, base)) if ahead else 0
        changed = len(git.status(path))
        # a detached HEAD's commits, and ignored files: what the branch alone does not show
        stray = len(git.stray_commits(path, branch))
        kept = [name for name in git.ignored(path) if not _disposable(name, disposable)]
    except GitError as exc:
        return row._replace(problem=str(exc))
    size = git.size_on_disk(path) if sizes else None
    return row._replace(
        ahead=ahead,
        behind=behind,
        changed=changed,
        unpushed=unpushed,
        stray=stray,
        ignored=len(kept),
        size=size,
    )


def _disposable(name: str, disposable: tuple[str, ...]) -> bool:
    """Whether ignored `name` lies in a folder made again by a build (`node_modules/...`)."""
    return any(part in disposable for part in name.rstrip("/").split("/"))


def listing(
    state: State, *, sizes: bool = True, jobs: Iterable[Job] | None = None
) -> list[WorktreeRow]:
    """Every live worktree of a job, each asked of git in parallel (they are independent)."""
    found = list(jobs_with_worktrees(state) if jobs is None else jobs)
    now = datetime.now(UTC)
    config = read_config(state.layout.home, state.env)
    disposable = worktree_config(config.tables, config.path).disposable
    repos = sorted({(job.worktree or {})["repo"] for job in found})
    # concurrent.futures loads logging, threading and traceback: only listings need it, and
    # every submit imports this module
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=LIST_THREADS) as pool:
        tips = dict(zip(repos, pool.map(_tips_or_none, repos), strict=True))
        return list(
            pool.map(
                lambda j: _row(
                    j, now, tips[(j.worktree or {})["repo"]], sizes=sizes, disposable=disposable
                ),
                found,
            )
        )


def _tips_or_none(repo: str) -> dict[str, str] | None:
    try:
        return git.branch_tips(Path(repo))
    except GitError:
        return None


# --- clean-up ----------------------------------------------------------------------------


class CleanResult(NamedTuple):
    job_id: str
    path: str
    action: str  # "removed", "would remove" or "kept"
    reasons: tuple[str, ...] = ()  # why it was kept
    branch_note: str | None = None  # the branch kept (not merged), or None

    def to_dict(self) -> dict[str, Any]:
        return {**self._asdict(), "reasons": list(self.reasons)}


def _why_kept(
    row: WorktreeRow, job: Job, uses: list[procfs.Use], older_than_s: float | None
) -> list[str]:
    """Every reason this worktree must stay; none: nothing in it can be lost."""
    reasons = []
    if not job.status.terminal:
        reasons.append(f"its job is {job.status.value}")
    elif older_than_s is not None:
        ended = (datetime.now(UTC) - parse_timestamp(job.updated_at)).total_seconds()
        if ended < older_than_s:
            reasons.append(f"its job ended {ended:.0f} s ago, within --older-than")
    if not row.present:
        reasons.append(f"its folder is gone; `git -C {row.repo} worktree prune` forgets it")
    elif row.problem:
        reasons.append(f"git could not tell what it holds: {row.problem}")
    if row.changed:
        reasons.append(f"{row.changed} uncommitted or untracked file(s)")
    if row.ignored:
        reasons.append(f"{row.ignored} ignored file(s) outside [worktree] disposable")
    if row.stray:
        reasons.append(
            f"{row.stray} commit(s) at its HEAD reachable from no other branch"
            " nor remote-tracking ref"
        )
    if row.unpushed:
        reasons.append(
            f"{row.unpushed} commit(s) on {row.branch} reachable neither from its base"
            " nor from a remote-tracking ref"
        )
    reasons += [f"process {use.pid} has its {use.how} inside it" for use in uses]
    return reasons


def clean(state: State, *, older_than_s: float | None, dry_run: bool) -> list[CleanResult]:
    """Remove each job's worktree that holds nothing that could be lost; say why for the rest."""
    jobs = {job.job_id: job for job in jobs_with_worktrees(state)}
    rows = listing(state, sizes=False, jobs=jobs.values())
    uses = procfs.processes_using([Path(r.path) for r in rows])
    results = []
    for row in rows:
        job = jobs[row.job_id]
        reasons = _why_kept(row, job, uses[Path(row.path)], older_than_s)
        if reasons:
            results.append(CleanResult(row.job_id, row.path, "kept", tuple(reasons)))
        elif dry_run:
            results.append(CleanResult(row.job_id, row.path, "would remove"))
        else:
            results.append(_remove(state, job, row))
    return results


def _remove(state: State, job: Job, row: WorktreeRow) -> CleanResult:
    """git removes the worktree (it refuses a dirty one itself); the branch goes only when
    `git branch -d` agrees it is merged."""
    repo = Path(row.repo)
    try:
        git.worktree_remove(repo, Path(row.path))
    except GitError as exc:
        return CleanResult(row.job_id, row.path, "kept", (str(exc),))
    refused = git.branch_delete_merged(repo, row.branch)
    note = None if refused is None else f"branch {row.branch} kept: {refused}"
    entry = {**(job.worktree or {}), "removed_at": record_timestamp()}
    state.registry.update(job.job_id, worktree=entry)
    return CleanResult(row.job_id, row.path, "removed", (), note)


def over_limits(state: State, config: ConfigFile) -> list[str]:
    """`[worktree] keep_max_gb` / `keep_days`: what is over them (reported, never removed)."""
    limits = worktree_config(config.tables, config.path)
    if limits.keep_max_gb is None and limits.keep_days is None:
        return []
    rows = listing(state, sizes=limits.keep_max_gb is not None)
    found = []
    if limits.keep_days is not None:
        old = [r.job_id for r in rows if (r.age_s or 0) > limits.keep_days * 86400]
        if old:
            found.append(
                f"{len(old)} worktree(s) older than {limits.keep_days:g} days: {', '.join(old[:5])}"
            )
    if limits.keep_max_gb is not None:
        found += _over_size(rows, limits.keep_max_gb)
    return found


NAMED_OVER = 10  # worktrees named in a keep_max_gb report; the rest are counted


def _over_size(rows: list[WorktreeRow], keep_max_gb: float) -> list[str]:
    """`keep_max_gb` passed: the total, and each worktree by its size, biggest first."""
    total = sum(r.size or 0 for r in rows)
    if total <= keep_max_gb * 1e9:
        return []
    biggest = sorted((r for r in rows if r.size), key=lambda r: (-(r.size or 0), r.job_id))
    named = ", ".join(f"{r.job_id} {size_words(r.size)}" for r in biggest[:NAMED_OVER])
    more = f" and {len(biggest) - NAMED_OVER} more" if len(biggest) > NAMED_OVER else ""
    limit = size_words(round(keep_max_gb * 1e9))
    return [
        f"worktrees take {size_words(total)}, over keep_max_gb {keep_max_gb:g} ({limit}):"
        f" {named}{more}"
    ]


def size_words(size: int | None) -> str:
    """A size on disk in the units `keep_max_gb` counts in (1 GB = 10^9 bytes): `512 B`,
    `8.1 KB`, `340.2 MB`, `1.3 GB`; `-` when unknown."""
    if size is None:
        return "-"
    if size < 1000:
        return f"{size} B"
    for unit, scale in (("KB", 1e3), ("MB", 1e6)):
        if round(size / scale, 1) < 1000:  # (999,950 B is 1.0 MB, not 1000.0 KB)
            return f"{size / scale:.1f} {unit}"
    return f"{size / 1e9:.1f} GB"
