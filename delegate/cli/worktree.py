"""`delegate diff|merge|review|compare` and `delegate worktree list|clean`: a job's own git
worktree, its changes, the review handed back to its agent, and its merge."""

# No `from __future__ import annotations`: typer would compile and eval each option's
# annotation string when it builds a command; real annotations cost nothing then.

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.adapters.terminal import Column, print_json, print_listing
from delegate.cli.common import JobIdArg, JsonOpt, event_printer, open_state, print_submitted
from delegate.core.errors import say
from delegate.core.timefmt import human_duration, parse_span
from delegate.services import worktrees
from delegate.services.jobs import compare as comparing
from delegate.services.jobs import merge as merging

# The root-level commands this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()
worktree_app = typer.Typer(
    help="The git worktrees of jobs submitted with --worktree.\n\n"
    "Example: delegate worktree list\n"
    "Example: delegate worktree clean --older-than 7d --dry-run",
    no_args_is_help=True,
)
commands.add_typer(worktree_app, name="worktree")


@commands.command("diff")
def diff(
    job_id: JobIdArg,
    stat: Annotated[bool, typer.Option("--stat", help="A diffstat instead of the patch.")] = False,
    name_only: Annotated[
        bool, typer.Option("--name-only", help="Only the names of the files changed.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """The job's changes against its base: commits, uncommitted and untracked files.

    In git's own format (pipe it to `less -R` or `delta`); --json: one line per file with the
    lines added and removed.
    Example: delegate diff 1a2b3c4d --stat
    """
    state = open_state()
    if as_json:
        for entry in worktrees.diff_counts(state, job_id):
            print_json(entry)
        return 0
    options = [*(["--stat"] if stat else []), *(["--name-only"] if name_only else [])]
    patch = worktrees.diff(state, job_id, options, color=sys.stdout.isatty())
    sys.stdout.buffer.write(patch)
    sys.stdout.flush()
    return 0


# `worktree list`: free text (branch, changes, what keeps it, path) is shortened first; the
# state, base, size and age fold last; the job id never.
LIST_COLUMNS = [
    Column("JOB"),
    Column("STATE", wrap=True),
    Column("BRANCH", free=True),
    Column("VS BASE", wrap=True),  # ahead and behind the base: `+2 -0`
    Column("CHANGES", free=True),
    Column("COMMITS", free=True),
    Column("SIZE", wrap=True),
    Column("AGE", wrap=True),
    Column("PATH", free=True),
]


def _cells(row: worktrees.WorktreeRow) -> list[str]:
    dirty = row.problem or (f"{row.changed} changed" if row.changed else "clean")
    ahead = "-" if row.ahead is None else f"+{row.ahead} -{row.behind}"
    return [
        row.job_id,
        row.state,
        row.branch,
        ahead,
        dirty,
        row.kept_by,
        worktrees.size_words(row.size),
        human_duration(row.age_s),
        row.path,
    ]


@worktree_app.command("list")
def worktree_list(as_json: JsonOpt = False) -> int:
    """Each job's worktree: branch, ahead/behind its base, dirty or clean, merged, pushed or
    unpushed commits, size on disk, age.

    Example: delegate worktree list --json
    """
    print_listing(
        worktrees.listing(open_state()),
        LIST_COLUMNS,
        _cells,
        as_json=as_json,
        to_json=lambda r: r.to_dict(),
        empty="no job worktrees",
    )
    return 0


@worktree_app.command("clean")
def worktree_clean(
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Only jobs that ended longer ago than this (7d, 12h)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Remove the worktrees that hold nothing to lose; say why each other one is kept.

    Removed only when the job ended, nothing is uncommitted or untracked, every commit is on
    the base branch or a remote, and no process works inside it. Its branch is deleted only
    when merged (`git branch -d`). Nothing is ever forced.
    Example: delegate worktree clean --older-than 7d --dry-run
    """
    span = None if older_than is None else parse_span(older_than, "--older-than")
    results = worktrees.clean(open_state(), older_than_s=span, dry_run=dry_run)
    if as_json:  # a report of what was done, as `cancel` prints: text unless asked
        for result in results:
            print_json(result.to_dict())
        return 0
    if not results:
        print("no job worktrees", file=sys.stderr)
    for result in results:
        _say_result(result)
    return 0


def _say_result(result: Any) -> None:
    if result.action == "kept":
        print(f"{result.job_id} kept: {'; '.join(result.reasons)}")
        return
    print(f"{result.job_id} {result.action}: {result.path}")
    if result.branch_note:
        print(f"{result.job_id} {result.branch_note}")


CheckOpt = Annotated[
    str | None,
    typer.Option(
        "--check", help="A command (split into words, never run by a shell) that must pass."
    ),
]


@commands.command("merge")
def merge(
    job_ids: Annotated[list[str], typer.Argument(help="The job id(s); several need --queue.")],
    into: Annotated[
        str | None,
        typer.Option("--into", help="The branch to merge into (default: the job's base branch)."),
    ] = None,
    squash: Annotated[
        bool, typer.Option("--squash", help="One commit with all the job's changes.")
    ] = False,
    rebase: Annotated[
        bool, typer.Option("--rebase", help="Replay the job's commits on top; no merge commit.")
    ] = False,
    check: CheckOpt = None,
    queue: Annotated[
        bool,
        typer.Option("--queue", help="Merge several jobs one at a time, each checked on the last."),
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Merge an ended job's branch into a branch of your checkout, or nothing at all.

    The merge and --check run in a temporary worktree on the target's tip; the target moves
    (a fast-forward of the checkout that has it checked out, which must have no uncommitted
    changes) only when both succeed. A conflict names the files and changes nothing.
    Exit status: 0 when every job merged (or had nothing to merge), 1 otherwise.
    Example: delegate merge 1a2b3c4d 5e6f7a8b --queue --check 'make test'
    """
    if squash and rebase:
        raise typer.BadParameter("give --squash or --rebase, not both")
    if len(job_ids) > 1 and not queue:
        raise typer.BadParameter("several jobs merge one at a time: add --queue")
    mode = "squash" if squash else "rebase" if rebase else "merge"
    results = merging.merge_jobs(
        open_state(),
        job_ids,
        into=into,
        mode=mode,
        check=merging.parse_check(check),
        on_result=lambda r: print_json(r.to_dict()) if as_json else _say_merge(r),
    )
    return 0 if all(r.ok for r in results) else 1


def _say_merge(result: merging.MergeResult) -> None:
    if result.outcome == "merged":
        print(f"{result.job_id} merged into {result.into}: {result.commit}")
    elif result.outcome == "up_to_date":
        print(f"{result.job_id}: nothing to merge, {result.into} already has its commits")
    elif result.outcome == "conflict":
        print(
            f"{result.job_id} not merged: conflict in {', '.join(result.conflicts)};"
            f" {result.into} unchanged",
            file=sys.stderr,
        )
    else:
        check = result.check
        code = "did not finish" if check is None or check.code is None else f"exit {check.code}"
        print(
            f"{result.job_id} not merged: --check failed ({code}); {result.into} unchanged",
            file=sys.stderr,
        )
        for line in check.tail if check else []:
            print(f"  {line}", file=sys.stderr)


def _compare_cells(row: comparing.CompareRow) -> list[str]:
    if row.check is None:
        checked = "-"
    elif row.check.passed:
        checked = "pass"
    else:
        checked = "fail" if row.check.code is None else f"fail ({row.check.code})"
    changed = row.problem or f"{row.files} files +{row.added} -{row.removed}"
    return [
        row.job_id,
        row.agent or "-",
        human_duration(row.duration_s),
        "-" if row.cost_usd is None else f"${row.cost_usd:.4f}",
        changed,
        checked,
        row.outcome,
    ]


@commands.command("compare")
def compare(
    fan_out_id: Annotated[
        str, typer.Argument(help="The fan-out's id (its first job's), or any of its jobs.")
    ],
    check: CheckOpt = None,
    as_json: JsonOpt = False,
) -> int:
    """The jobs of one fan-out side by side: outcome, duration, cost, files and lines changed,
    and whether --check passes in each worktree.

    The fan-out's id is its first job's: `submit --fan-out` prints it (`fan-out ID: ...`).
    `delegate show JOB` of any of its jobs shows it (`fan out`; `fan_out` with --json).
    Any of its job ids works here too.

    Example: delegate compare 1a2b3c4d --check 'make test'
    """
    print_listing(
        comparing.compare(open_state(), fan_out_id, merging.parse_check(check)),
        ["JOB", "AGENT", "TIME", "COST", "CHANGES", "CHECK", Column("OUTCOME", free=True)],
        _compare_cells,
        as_json=as_json,
        to_json=lambda r: r.to_dict(),
        empty="no jobs in that fan-out",
    )
    return 0


@commands.command("review")
def review(
    job_id: JobIdArg,
    comment: Annotated[
        list[str] | None, typer.Option("--comment", help="A review comment (repeatable).")
    ] = None,
    file: Annotated[
        list[Path] | None, typer.Option("--file", help="A file holding the review (repeatable).")
    ] = None,
    line: Annotated[
        list[str] | None,
        typer.Option(
            "--line", help="'FILE:N TEXT' (one argument): a note on one line (repeatable)."
        ),
    ] = None,
    wait: Annotated[
        bool | None,
        typer.Option(
            "--wait/--no-wait",
            "-w",
            help="Follow the follow-up job to its end (default: when stdout is a terminal).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Hand a review back to the job's agent.

    A running job gets it typed into its session, as `send` does. An ended job gets a
    follow-up job in the same worktree and branch, continuing the agent's conversation where
    its profile can (claude, codex), else afresh with the review and the diff in its prompt.
    Example: delegate review 1a2b3c4d --line 'src/app.py:42 may be None' --comment 'add a test'
    """
    # services.jobs.review (the launcher, tmux): only `review` loads it
    from delegate.services.jobs.review import review as review_job
    from delegate.services.jobs.review import review_text  # as review

    text = review_text(comment or [], file or [], line or [])
    waiting = sys.stdout.isatty() if wait is None else wait
    result = review_job(
        open_state(), job_id, text, wait=waiting, emit=event_printer(as_json), note=say
    )
    print(result.how, file=sys.stderr)
    return 0 if result.submitted is None else print_submitted(result.submitted, as_json)
