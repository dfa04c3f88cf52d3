"""Git worktrees are made one at a time per repository (issue 31, item 6): of about 90
back-to-back `submit --worktree` jobs on one repository, one ended `launch_failed: git worktree
failed ... failed to read .git/worktrees/<id>/commondir` (one git read the worktree list while
another was still writing an entry). Here 100 such submits run 4 at a time on one repository:
every job gets its own worktree and completes there."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from delegate.core.model import JobState

from .helpers import cli_env, delegate_cmd, json_lines, retry_until
from .test_git_adapter import make_repo, sh_git
from .test_monitor import open_state

JOBS = 100
AT_ONCE = 4


@pytest.mark.timeout(600)
def test_a_hundred_worktree_jobs_four_at_a_time_each_get_their_worktree(
    home: Path, tmux_env, tmp_path: Path
):
    repo = make_repo(tmp_path / "repo")
    env = cli_env(home, tmux_env)

    def submit(n: int) -> subprocess.CompletedProcess[str]:
        argv = delegate_cmd(
            "submit", "--agent", "shell", "--workdir", str(repo), "--worktree", "--no-wait",
            "--json", "--prompt", f"echo {n} > made-{n}.txt",
        )  # fmt: skip
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        done = list(pool.map(submit, range(JOBS)))
    failed = [d.stderr.strip() for d in done if d.returncode != 0]
    assert not failed, failed[:3]
    ids = [json_lines(d.stdout)[0]["job_id"] for d in done]
    state = open_state(home)
    retry_until(lambda: all(state.registry.get(j).status.terminal for j in ids), timeout=300)
    jobs = [state.registry.get(j) for j in ids]
    assert [j.error for j in jobs if j.status is not JobState.COMPLETED] == []
    paths = {j.worktree["path"] for j in jobs if j.worktree}
    assert len(paths) == JOBS  # each its own
    for n, job in enumerate(jobs):
        assert (Path(job.worktree["path"]) / f"made-{n}.txt").read_text() == f"{n}\n"
    listed = sh_git(repo, "worktree", "list", "--porcelain").count("worktree ")
    assert listed == JOBS + 1  # theirs and the person's checkout
