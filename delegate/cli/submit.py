"""`delegate submit` and `delegate retry`: hand a task to an agent, or start a new attempt.

Imported only when one of them is called (cli/app.py's table), so the other commands never
load the launcher, and `submit` loads none of the other commands.
"""

# No `from __future__ import annotations`: typer would compile and eval every option's
# annotation string when it builds the command (~30 of them for submit); real ones cost nothing.

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from delegate.cli.common import (
    IdempotencyOpt,
    IdleTimeoutOpt,
    JobIdArg,
    JsonOpt,
    WallTimeoutOpt,
    event_printer,
    open_state,
    print_submitted,
)
from delegate.core.errors import say

# The root-level commands this module adds to `delegate` (cli/app.py's table).
commands = typer.Typer()


@commands.command()
def submit(
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            "-a",
            help="Agent profile: shell, claude, codex or one of delegate.toml; several with"
            " --worktree: one job each (a fan-out).",
        ),
    ] = None,
    cmd: Annotated[
        str | None,
        typer.Option("--cmd", help="A one-off shell command; the prompt arrives on its stdin."),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="The instructions, or - to read them from stdin."),
    ] = None,
    prompt_file: Annotated[
        Path | None,
        typer.Option("--prompt-file", "-f", help="Read the instructions from this file."),
    ] = None,
    workdir: Annotated[
        Path | None,
        typer.Option("--workdir", "-C", help="Folder the agent works in (default: here)."),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="tmux session name (default: dlg-<job id>)."),
    ] = None,
    wall_timeout: WallTimeoutOpt = None,
    idle_timeout: IdleTimeoutOpt = None,
    bus: Annotated[str | None, typer.Option("--bus", help="Bus URL for this job.")] = None,
    wait: Annotated[
        bool | None,
        typer.Option(
            "--wait/--no-wait",
            "-w",
            help="Stream events and exit with the outcome, or return at once"
            " (default: wait when stdout is a terminal).",
        ),
    ] = None,
    idempotency_key: IdempotencyOpt = None,
    max_running: Annotated[
        int | None,
        typer.Option(
            "--max-running", help="Start only while fewer than N jobs run; else wait queued."
        ),
    ] = None,
    on_event: Annotated[
        str | None,
        typer.Option(
            "--on-event",
            help="Run CMD (split into words, never by a shell) with the event JSON on stdin"
            " for permission_required, completed and error.",
        ),
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option("--from-file", help="Read these settings from a TOML file (flags win)."),
    ] = None,
    host: Annotated[
        str | None,
        typer.Option("--host", help="Run it on this agent host (see `delegate host`)."),
    ] = None,
    after: Annotated[
        str | None,
        typer.Option(
            "--after", help="Start only after these jobs (ID[,ID...]) ended as the rule says."
        ),
    ] = None,
    after_rule: Annotated[
        str | None,
        typer.Option(
            "--after-rule",
            help="succeeded (default), finished (any ending) or failed; a rule that can no"
            " longer hold ends the job dependency_failed.",
        ),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            "--group", "-g", help="Queue group (see `delegate group`): its cap and pause."
        ),
    ] = None,
    max_cost: Annotated[
        float | None,
        typer.Option("--max-cost", help="Stop it once it has spent more than USD dollars."),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", help="Stop it once its agent has used more than N tokens."),
    ] = None,
    max_memory: Annotated[
        str | None,
        typer.Option("--max-memory", help="Memory its whole process tree may hold (512M, 4G)."),
    ] = None,
    max_cpus: Annotated[
        float | None,
        typer.Option("--max-cpus", help="Cores its process tree may use (0.5, 2)."),
    ] = None,
    max_pids: Annotated[
        int | None,
        typer.Option("--max-pids", help="Processes and threads it may have at once."),
    ] = None,
    no_mcp: Annotated[
        bool,
        typer.Option(
            "--no-mcp", help="Do not register `delegate mcp` with a claude or codex agent."
        ),
    ] = False,
    worktree: Annotated[
        bool | None,
        typer.Option(
            "--worktree/--no-worktree",
            help="Run it in its own git worktree of --workdir's repository, on a new branch"
            " (default: as delegate.toml's [worktree] says).",
        ),
    ] = None,
    sandbox: Annotated[
        bool | None,
        typer.Option(
            "--sandbox/--no-sandbox",
            help="Run the agent in a bubblewrap sandbox: only its workdir writable, no home, no"
            " state dir, no network (default: its profile, then delegate.toml's [sandbox]).",
        ),
    ] = None,
    branch: Annotated[
        str | None,
        typer.Option("--branch", help="With --worktree: the new branch (default delegate/<job>)."),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option("--base", help="With --worktree: the commit or branch to start from (HEAD)."),
    ] = None,
    fan_out: Annotated[
        int | None,
        typer.Option(
            "--fan-out",
            help="With --worktree: N jobs on the same prompt, each in its own worktree from"
            " the same base (see `delegate compare`).",
        ),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option("--retries", help="Start up to N more attempts for --retry-on endings."),
    ] = None,
    retry_on: Annotated[
        str | None,
        typer.Option(
            "--retry-on",
            help="Endings that retry (default error): error, agent_exited, idle_timeout,"
            " wall_timeout, launch_failed, host_lost, lost, tmux_gone.",
        ),
    ] = None,
    backoff: Annotated[
        str | None,
        typer.Option(
            "--backoff",
            help="MIN..MAX wait before a retry, doubled each time, like 30s..10m (default 1s..1m).",
        ),
    ] = None,
    on_interrupt: Annotated[
        str | None,
        typer.Option(
            "--on-interrupt",
            help="requeue: a job whose pane, tmux or host vanished is queued again (resuming"
            " its conversation when recorded); fail (default).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> int:
    """Hand a task to an agent in a new tmux session and follow it.

    Exit status with --wait: 0 completed, 1 error, 2 timed out, 3 cancelled.
    Example: delegate submit --agent claude --prompt-file task.md --workdir ~/repo --wait
    """
    # services.jobs.{jobfile,submit} (profiles, the launcher, tmux): only `submit` loads them;
    from delegate.entry.submit import submit_one  # as jobfile
    from delegate.services.jobs.jobfile import merge_job_file  # every other command goes without
    from delegate.services.jobs.submit import SubmitRequest, read_prompt  # as jobfile

    agents = agent or []
    flags = dict(
        agent=agents[0] if len(agents) == 1 else None,
        cmd=cmd,
        prompt=prompt,
        prompt_file=prompt_file,
        workdir=workdir,
        session=session,
        wall_timeout=wall_timeout,
        idle_timeout=idle_timeout,
        bus=bus,
        wait=wait,
        idempotency_key=idempotency_key,
        max_running=max_running,
        on_event=on_event,
        host=host,
        after=after,
        after_rule=after_rule,
        group=group,
        worktree=worktree,
        sandbox=sandbox,
        branch=branch,
        base=base,
        max_cost=max_cost,
        max_tokens=max_tokens,
        max_memory=max_memory,
        max_cpus=max_cpus,
        max_pids=max_pids,
        retries=retries,
        retry_on=retry_on,
        backoff=backoff,
        on_interrupt=on_interrupt,
    )
    if from_file is not None and fan_out is None:
        # cli.plan: only a file declaring several jobs ([[jobs]]) goes there
        from delegate.cli.plan import submit_plan_file

        planned = submit_plan_file(from_file, flags, as_json=as_json, no_mcp=no_mcp)
        if planned is not None:
            return planned
    if fan_out is not None or len(agents) > 1:
        settings = merge_job_file(from_file, **flags)
        if settings["host"] or settings["wait"]:
            raise typer.BadParameter("a fan-out runs here and never waits: drop --host/--wait")
        text = read_prompt(text=settings["prompt"], file=settings["prompt_file"], stdin=sys.stdin)
        request = SubmitRequest.from_settings(settings, text)._replace(no_mcp=no_mcp)
        return _submit_fan_out(request, agents, fan_out, as_json=as_json)
    return submit_one(flags, from_file, no_mcp=no_mcp, as_json=as_json)


def _submit_fan_out(request: Any, agents: list[str], count: int | None, *, as_json: bool) -> int:
    """`submit --fan-out N` / several `--agent`s: start them all, print each job; never waits."""
    from delegate.services.jobs import fanout  # the launcher: only `submit` loads it

    results = fanout.submit_fan_out(
        open_state(), request, fanout.fan_out_agents(agents, count), note=say
    )
    for result in results:
        print_submitted(result, as_json)
    fan_out = results[0].job.fan_out or results[0].job.job_id
    line = f"fan-out {fan_out}: compare with delegate compare {fan_out}"
    if as_json or not sys.stdout.isatty():
        # stdout stays one job a line (its id, or its record with `fan_out`) for scripts
        say(f"{line} ({len(results)} jobs)")
    else:
        print(line)
    return 0


@commands.command()
def retry(
    job_id: JobIdArg,
    prompt: Annotated[
        str | None,
        typer.Option("--prompt", "-p", help="New instructions (default: the attempt's own)."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", "-w", help="Follow the new attempt to its end.")
    ] = False,
    as_json: JsonOpt = False,
) -> int:
    """Start a new attempt of an ended job with the same spec (a new job id, attempt n+1).

    Example: delegate retry 1a2b3c4d --prompt "try again, smaller steps"
    """
    # services.jobs.retry (profiles, the launcher, tmux): only `retry` loads it
    from delegate.services.jobs.retry import follow_attempts
    from delegate.services.jobs.retry import retry as retry_job  # as above
    from delegate.services.jobs.submit import follow_existing  # as above

    state = open_state()
    text = prompt.encode("utf-8", "surrogateescape") if prompt is not None else None
    result = retry_job(state, job_id, prompt=text)
    if wait:
        followed = follow_existing(
            state, result.job, wait=True, emit=event_printer(as_json), note=say
        )
        result = follow_attempts(state, followed, emit=event_printer(as_json), note=say)
    return print_submitted(result, as_json)
