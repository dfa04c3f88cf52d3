"""A job's own git worktree (issue 19), each figure against its goal, in one run.

- `create`: the service path a launch takes for `submit --worktree` (services/worktrees: `plan`
  checks the repository, base and branch, `record` writes the job, `ensure` makes the worktree
  and records it), timed in-process on a repository of 10,000 files, interleaved with a bare
  `git worktree add -b` of the same repository (which goes first alternates, and dirty pages
  are flushed before each, so neither pays for the other's writes); goal: ratio of medians
  <= 1.5. `--dir /dev/shm` takes the disk out of the figure (what is left is our overhead).
- `list_100`: `delegate worktree list --json` (a fresh process) with 100 job worktrees;
  goal p50 < 1 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import bench_env, delegate_exe, emit, precompile, summary_ms

from delegate.services import worktrees
from delegate.services.state import State

GOALS = {"create": ("ratio", 1.5), "list_100": ("p50_ms", 1000.0)}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def make_repo(folder: Path, files: int) -> Path:
    """One commit of `files` small files in 100 folders."""
    git(folder.parent, "init", "-q", "-b", "main", folder.name)
    for i in range(files):
        sub = folder / f"d{i % 100:02d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{i}.txt").write_text(f"file {i}\n")
    git(folder, "add", "-A")
    git(folder, "-c", "user.email=b@x", "-c", "user.name=b", "commit", "-q", "-m", "init")
    return folder


def drop(repo: Path, path: Path, branch: str) -> None:
    """Benchmark tidy-up only (the toolkit itself never forces)."""
    git(repo, "worktree", "remove", "--force", str(path))
    git(repo, "branch", "-D", branch)


def bench_create(tmp: Path, runs: int, files: int) -> dict[str, object]:
    repo = make_repo(tmp / "big", files)
    state = State.open(env={"DELEGATE_HOME": str(tmp / "state")})
    bare: list[float] = []
    ours: list[float] = []

    def run_bare(i: int) -> None:
        path = tmp / "bare" / str(i)
        os.sync()
        started = time.perf_counter()
        git(repo, "worktree", "add", "--quiet", "-b", f"bare/{i}", str(path), "HEAD")
        bare.append(time.perf_counter() - started)
        drop(repo, path, f"bare/{i}")

    def run_ours(_i: int) -> None:
        job, _ = state.registry.register(agent="shell", workdir=str(repo))
        os.sync()
        started = time.perf_counter()
        planned = worktrees.plan(repo, branch=None, base=None)
        made = worktrees.ensure(state, worktrees.record(state, job, planned))
        ours.append(time.perf_counter() - started)
        assert made.worktree is not None
        drop(repo, Path(made.worktree["path"]), made.worktree["branch"])

    for i in range(runs):
        for step in (run_bare, run_ours) if i % 2 == 0 else (run_ours, run_bare):
            step(i)
    ratio = statistics.median(ours) / statistics.median(bare)
    return {
        "files": files,
        "bare_git_worktree_add": summary_ms(bare),
        "service": summary_ms(ours),
        "ratio": round(ratio, 3),
    }


def bench_list(tmp: Path, runs: int, count: int) -> dict[str, object]:
    repo = make_repo(tmp / "small", 50)
    home = tmp / "list-state"
    state = State.open(env={"DELEGATE_HOME": str(home)})
    planned = worktrees.plan(repo, branch=None, base=None)
    for _ in range(count):
        job, _ = state.registry.register(agent="shell", workdir=str(repo))
        worktrees.ensure(state, worktrees.record(state, job, planned))
    cmd = [delegate_exe(), "worktree", "list", "--json"]
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(cmd, env=bench_env(home), capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    assert len(done.stdout.splitlines()) == count, done.stderr
    return {"worktrees": count, **summary_ms(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--worktrees", type=int, default=100)
    parser.add_argument("--dir", default=None, help="Make the repositories here (e.g. /dev/shm).")
    args = parser.parse_args()
    precompile()
    tmp = Path(tempfile.mkdtemp(prefix="delegate-bench-wt-", dir=args.dir))
    try:
        # the listing first: the 10,000-file checkouts leave the disk busy writing back
        listed = bench_list(tmp, max(3, args.runs // 2), args.worktrees)
        create = bench_create(tmp, args.runs, args.files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    figures = {"create": create["ratio"], "list_100": listed["p50_ms"]}
    emit(
        {
            "benchmark": "worktree",
            "dir": str(tmp.parent),
            "create": create,
            "list_100": listed,
            "goals": {
                name: {
                    "measure": measure,
                    "goal": goal,
                    "value": figures[name],
                    "met": figures[name] <= goal,
                }
                for name, (measure, goal) in GOALS.items()
            },
        }
    )


if __name__ == "__main__":
    main()
