"""What scripts and agents call most stays light: `delegate publish`, `delegate hook` and a
`cron run` whose window's job exists load none of the heavy libraries, checked in a fresh
process through the real entry point (its `sys.modules` after the call)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from delegate.services.jobs import warm_publish
from delegate.services.state import State

from .helpers import cli_env, retry_until, run_cli
from .test_cron import job_file

HEAVY = (
    "typer",
    "click",
    "rich",
    "paho",
    "libtmux",
    "pyspark",
    "croniter",
    "networkx",
    "mcp",
    "textual",
)

# Runs `delegate ARGV...` through the console entry point in this process, then reports which
# heavy modules the call loaded, on stderr's last line.
PROBE = f"""
import json, sys
from delegate.__main__ import main
code = main(sys.argv[1:])
heavy = sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r}))
sys.stderr.write("\\nLOADED " + json.dumps(heavy) + "\\n")
sys.exit(code)
"""


def _run_code(
    code: str, home: Path, argv: tuple[str, ...], env: dict[str, str] | None, stdin: str
) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter with `argv`, in `home`'s environment (plus `env`)."""
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=cli_env(home, env),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _probe(
    home: Path, *argv: str, env: dict[str, str] | None = None, stdin: str = ""
) -> tuple[int, list[str], str]:
    done = _run_code(PROBE, home, argv, env, stdin)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("LOADED "), done.stderr
    return done.returncode, json.loads(last.removeprefix("LOADED ")), done.stdout


def test_publish_and_hook_load_nothing_heavy(home: Path):
    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    code, loaded, out = _probe(home, "publish", "--job", job_id, "--event", "started")
    assert code == 0 and json.loads(out)["seq"] == 1
    assert loaded == []
    code, loaded, _ = _probe(
        home,
        "hook",
        env={"DELEGATE_JOB_ID": job_id},
        stdin=json.dumps({"hook_event_name": "Stop"}),
    )
    assert code == 0 and loaded == []
    published = State.open(env=cli_env(home)).audit.read_events(job_id, "published")
    assert [e["event"] for e in published] == ["started", "progress"]  # the hook's Stop


# Modules a direct progress publish does without (each cost it milliseconds): json (fastjson
# writes the record and the audit line), the ending path and the retry rules (only for
# terminal events, dependency checks). It signs with the standard library's hmac.
NOT_FOR_A_PUBLISH = (
    "json",
    "delegate.services.jobs.finish",
    "delegate.core.caps",
    "delegate.core.retry",
)
LIGHT_PROBE = f"""
import json as _json_for_the_report, sys
del sys.modules["json"]  # this probe's own, not the call's
for name in [n for n in sys.modules if n.startswith("json.")]:
    del sys.modules[name]
from delegate.__main__ import main
code = main(sys.argv[1:])
loaded = sorted(set(sys.modules) & set({NOT_FOR_A_PUBLISH!r}))
sys.stderr.write("\\nLOADED " + _json_for_the_report.dumps(loaded) + "\\n")
sys.exit(code)
"""


# A publish in its own process, with no warm server (services/jobs/warm_publish) to hand it to.
DIRECT = {"DELEGATE_PUBLISH_WARM_S": "0"}


def test_a_direct_publish_loads_neither_json_nor_openssl_nor_the_ending_path(home: Path):
    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    run_cli(home, "publish", "--job", job_id, "--event", "started", env=DIRECT)  # the bus exists
    done = subprocess.run(
        [sys.executable, "-c", LIGHT_PROBE, "publish", "--job", job_id, "--event", "progress"],
        env=cli_env(home, DIRECT),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["seq"] == 2
    assert json.loads(done.stderr.strip().splitlines()[-1].removeprefix("LOADED ")) == []
    # a terminal event loads the ending path, and the job ends
    run_cli(home, "publish", "--job", job_id, "--event", "completed", env=DIRECT)
    assert State.open(env=cli_env(home)).registry.get(job_id).status.value == "completed"
    assert not Path(str(warm_publish.server_socket(str(home)))).exists()  # no server started


def test_a_cron_run_whose_job_exists_loads_nothing_heavy(home: Path, tmux_env, tmp_path: Path):
    path = job_file(tmp_path)
    tab = tmp_path / "tab"
    # once a year: both runs fall in the same window whatever the clock does meanwhile
    added = run_cli(home, "cron", "add", "0 0 1 1 *", str(path), "--file", str(tab), env=tmux_env)
    assert added.returncode == 0, added.stderr
    first = run_cli(home, "cron", "run", "nightly", env=tmux_env)  # the full path submits
    assert first.returncode == 0, first.stderr
    job_id = first.stdout.split()[0]
    state = State.open(env=cli_env(home, tmux_env))
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    code, loaded, out = _probe(home, "cron", "run", "nightly", env=tmux_env)
    assert code == 0 and out.split()[0] == job_id and "already submitted" in out
    assert loaded == []


# `ps` as JSON: answered without typer, the same as the typer command says it.
TYPER_RUN = """
import sys
from delegate.config import logsetup
from delegate.cli.app import run
logsetup.configure()
sys.exit(run(sys.argv[1:]))
"""


def _typer_run(home: Path, *argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", TYPER_RUN, *argv],
        env=cli_env(home, env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _without_age(text: str) -> list[dict[str, object]]:
    """The JSON lines without `age_s`, which grows between two runs."""
    return [
        {k: v for k, v in json.loads(line).items() if k != "age_s"} for line in text.splitlines()
    ]


def test_the_fast_ps_parser_matches_the_typer_command():
    from delegate.cli import app as cli
    from delegate.entry import ps as fastps

    command = cli.full_command().commands["ps"]
    options = {o: not p.is_flag for p in command.params for o in p.opts if o.startswith("--")}
    assert options == fastps.PS_OPTIONS
    [limit] = [p for p in command.params if p.name == "limit"]
    assert limit.default == fastps.DEFAULT_LIMIT


def test_ps_json_fast_path_says_what_the_typer_path_says(home: Path, tmux_env, tmp_path: Path):
    from .test_monitor import submit_no_wait, wait_running

    empty = [
        _probe(home, "ps", "--json", env=tmux_env),
        _typer_run(home, "ps", "--json", env=tmux_env),
    ]
    assert empty[0][0] == empty[1].returncode == 0 and empty[0][2] == empty[1].stdout == ""
    running = submit_no_wait(home, tmux_env, tmp_path, "sleep 60")
    done = submit_no_wait(home, tmux_env, tmp_path, "echo done")
    wait_running(home, running)
    state = State.open(env=cli_env(home, tmux_env))
    retry_until(lambda: state.registry.get(done).status.terminal, timeout=30)
    pending = run_cli(home, "register", "--cmd", "true").stdout.strip()
    run_cli(home, "cancel", run_cli(home, "register").stdout.strip())
    for argv in (
        ["ps", "--json"],
        ["ps"],  # piped: JSON by the output rule
        ["ps", "--json", "--all", "--wide"],
        ["ps", "--limit=1", "--json"],
        ["ps", "--limit", "0", "--json"],
    ):
        code, loaded, fast_out = _probe(home, *argv, env=tmux_env)
        slow = _typer_run(home, *argv, env=tmux_env)
        assert loaded == [], argv  # answered without typer
        assert code == slow.returncode == 0, (argv, slow.stderr)
        assert _without_age(fast_out) == _without_age(slow.stdout), argv
        ids = {str(r["job_id"]) for r in _without_age(fast_out)}
        assert {running, pending} <= ids, argv  # open jobs are always listed
        finished = {"--limit": 0, "--limit=1": 1}.get(argv[1], 2) if len(argv) > 1 else 2
        assert len(ids) == 2 + finished, argv  # and the most recent `--limit` finished ones
    for bad in (
        ["ps", "--limit", "-1", "--json"],
        ["ps", "--nope", "--json"],
        ["ps", "x", "--json"],
    ):
        code, loaded, _ = _probe(home, *bad, env=tmux_env)
        slow = _typer_run(home, *bad, env=tmux_env)
        assert code == slow.returncode == 64, bad
        assert "typer" in loaded  # left to typer, which says what is wrong
    run_cli(home, "cancel", running, env=tmux_env)


# Runs the console entry point as `python -m delegate ...` does; an object of this script says
# on stderr when the interpreter's teardown frees it. Its first argument gives exit work to do:
# `thread` (a thread still running, to be joined) or `atexit` (a handler), `-` none.
TEARDOWN_PROBE = """
import sys, threading, time
class Freed:
    def __del__(self):
        sys.stderr.write("TORN DOWN\\n")
witness = Freed()
if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(0.3,)).start()
if sys.argv[1] == "atexit":
    import atexit
    atexit.register(lambda: sys.stderr.write("AT EXIT\\n"))
from delegate.__main__ import console_main
sys.argv = ["delegate", *sys.argv[2:]]
console_main()
"""


def _teardown_probe(
    home: Path, *argv: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return _run_code(TEARDOWN_PROBE, home, argv, env, stdin)


def test_a_fast_ps_ends_without_the_teardown_unless_exit_has_work(home: Path):
    pending = run_cli(home, "register", "--cmd", "true").stdout.strip()
    # the first `ps` of a state dir creates the sessions database (tenacity, with logging,
    # retries it): exit has work to do then; every later `ps` only reads
    assert "TORN DOWN" in _teardown_probe(home, "-", "ps", "--json").stderr
    fast = _teardown_probe(home, "-", "ps", "--json")
    assert fast.returncode == 0, fast.stderr
    assert [json.loads(line)["job_id"] for line in fast.stdout.splitlines()] == [pending]
    assert "TORN DOWN" not in fast.stderr  # its output flushed, the teardown skipped
    for work in ("thread", "atexit"):  # the normal exit: the thread joined, the handler run
        normal = _teardown_probe(home, work, "ps", "--json")
        assert normal.returncode == 0 and _without_age(normal.stdout) == _without_age(fast.stdout)
        assert "TORN DOWN" in normal.stderr, work
    assert "AT EXIT" in normal.stderr
    nothing = _teardown_probe(home, "-", "ps", "--json", "--limit", "0", "--group", "none")
    assert nothing.returncode == 0 and nothing.stdout == ""
    assert nothing.stderr.strip() == "delegate: no open jobs"  # stderr flushed too
    typer = _teardown_probe(home, "-", "jobs", "--json")  # not a fast path: the normal exit
    assert typer.returncode == 0 and "TORN DOWN" in typer.stderr


def test_a_fast_submit_ends_without_the_teardown_and_its_job_runs(
    home: Path, tmux_env, tmp_path: Path
):
    argv = ["submit", "--cmd", "echo fast", "--prompt", "x", "--workdir", str(tmp_path)]
    run_cli(home, "ps", "--json", env=tmux_env)  # the sessions database exists (see above)
    fast = _teardown_probe(home, "-", *argv, "--no-wait", env=tmux_env)
    assert fast.returncode == 0, fast.stderr
    assert "TORN DOWN" not in fast.stderr
    job_id = fast.stdout.strip()
    state = State.open(env=cli_env(home, tmux_env))
    retry_until(lambda: state.registry.get(job_id).status.terminal, timeout=30)
    assert state.registry.get(job_id).status.value == "completed"
    assert [e["event"] for e in state.audit.read_events(job_id, "published")][-1] == "completed"


def test_a_direct_publish_and_a_hook_end_without_the_teardown_unless_exit_has_work(home: Path):
    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    publish = ("publish", "--job", job_id, "--event")
    # the first publish of a state dir makes the bus's schema (tenacity, with logging): the
    # normal exit then; every later one only writes
    assert "TORN DOWN" in _teardown_probe(home, "-", *publish, "started", env=DIRECT).stderr
    fast = _teardown_probe(home, "-", *publish, "progress", "--detail", "step one", env=DIRECT)
    assert fast.returncode == 0, fast.stderr
    assert "TORN DOWN" not in fast.stderr
    assert json.loads(fast.stdout) == {"job_id": job_id, "seq": 2, "event": "progress"}
    state = State.open(env=cli_env(home))
    assert state.registry.get(job_id).last_seq == 2  # the record's change is on disk
    hook = _teardown_probe(
        home,
        "-",
        "hook",
        env={**DIRECT, "DELEGATE_JOB_ID": job_id},
        stdin='{"hook_event_name": "Stop"}',
    )
    assert hook.returncode == 0 and "TORN DOWN" not in hook.stderr, hook.stderr
    for work in ("thread", "atexit"):  # the normal exit: the thread joined, the handler run
        normal = _teardown_probe(home, work, *publish, "progress", env=DIRECT)
        assert normal.returncode == 0 and "TORN DOWN" in normal.stderr, work
    assert "AT EXIT" in normal.stderr
    published = state.audit.read_events(job_id, "published")
    assert [e["seq"] for e in published] == [1, 2, 3, 4, 5]  # each audited, none lost
    bus = state.open_bus_for(state.registry.get(job_id))
    sub = bus.subscribe(job_id)
    on_bus = [json.loads(message.payload)["seq"] for message in iter(lambda: sub.get(0.2), None)]
    sub.close()
    bus.close()
    assert on_bus == [1, 2, 3, 4, 5]  # each committed to the bus
    refused = _teardown_probe(
        home, "-", "publish", "--job", "nope", "--event", "progress", env=DIRECT
    )
    assert refused.returncode != 0 and "TORN DOWN" not in refused.stderr
    assert "nope" in refused.stderr  # stderr flushed too
    assert state.registry.get(job_id).status.value == "running"


def test_the_default_state_dir_is_platformdirs_xdg_one_without_importing_it(
    tmp_path: Path, monkeypatch
):
    from platformdirs import user_state_dir

    from delegate.config.layout import state_home

    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    for xdg in ("", str(tmp_path / "xdg")):
        monkeypatch.setenv("XDG_STATE_HOME", xdg)
        env = {"XDG_STATE_HOME": xdg} if xdg else {}
        assert state_home(env) == Path(user_state_dir("delegate"))
    # a fresh `ps --json` without DELEGATE_HOME: the XDG folder, and no platformdirs loaded
    env = {k: v for k, v in cli_env(tmp_path).items() if k != "DELEGATE_HOME"}
    env.update(HOME=str(tmp_path / "fresh"), XDG_STATE_HOME="")
    probe = PROBE.replace(f"set({HEAVY!r})", "{'platformdirs'}")
    assert probe != PROBE
    done = subprocess.run(
        [sys.executable, "-c", probe, "ps", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "LOADED []"
    assert (tmp_path / "fresh" / ".local" / "state" / "delegate" / "jobs").is_dir()


# `submit` of one job: answered without typer, as the typer command answers it.


def test_the_fast_submit_parser_matches_the_typer_command():
    from delegate.cli import app as cli
    from delegate.entry import submit as fastsubmit

    command = cli.full_command().commands["submit"]
    options: dict[str, bool] = {}
    names: dict[str, str] = {}
    for param in command.params:
        for opt in [*param.opts, *getattr(param, "secondary_opts", [])]:
            if opt.startswith("--") and opt != "--help":
                options[opt] = not param.is_flag
                names[opt] = str(param.name)
    # the fast path leaves a job file and a fan-out to typer; it reads every other option
    assert options.keys() - fastsubmit.SUBMIT_OPTIONS.keys() == {"--from-file", "--fan-out"}
    assert fastsubmit.SUBMIT_OPTIONS.keys() <= options.keys()
    for opt, takes_value in fastsubmit.SUBMIT_OPTIONS.items():
        assert options[opt] == takes_value, opt
    flags, no_mcp, as_json = fastsubmit.parse_submit_args(
        ["--cmd", "x", "--wall-timeout=5", "--max-running", "2", "--no-wait", "--wait", "--json"]
    ) or ({}, None, None)
    assert (flags["cmd"], flags["wall_timeout"], flags["max_running"]) == ("x", 5.0, 2)
    assert flags["wait"] is True and as_json is True and no_mcp is False  # the last one wins
    # every parameter the typer command passes on is named the same here
    assert set(fastsubmit.FLAG_NAMES) == {
        names[o] for o in fastsubmit.SUBMIT_OPTIONS if o not in ("--no-mcp", "--json")
    }
    # the short options, as typer takes them; an option's value is never read as an option
    short = fastsubmit.parse_submit_args(["-a", "shell", "-p", "-f", "-C", "/w", "-w", "-g", "g"])
    assert short is not None
    assert (short[0]["agent"], short[0]["prompt"], short[0]["workdir"]) == (
        "shell",
        "-f",
        Path("/w"),
    )
    assert short[0]["wait"] is True and short[0]["group"] == "g" and short[0]["prompt_file"] is None
    as_text = fastsubmit.parse_submit_args(["--cmd", "x", "--no-wait", "--prompt", "--wait"])
    assert as_text is not None and as_text[0]["prompt"] == "--wait" and as_text[0]["wait"] is False
    for spelled in command.params:
        for opt in spelled.opts:
            if not opt.startswith("--") and spelled.name != "fan_out":
                assert fastsubmit.SHORT[opt] in spelled.opts, opt
    for to_typer in (
        ["--agent", "a", "--agent", "b"],
        ["-a", "a", "--agent", "b"],
        ["-wa", "x"],
        ["x"],
        ["--from-file", "f.toml"],
        ["--fan-out", "2"],
        ["--max-running", "two"],
        ["--wall-timeout"],
    ):
        assert fastsubmit.parse_submit_args(to_typer) is None, to_typer


def test_submit_fast_path_loads_nothing_heavy_and_says_what_typer_says(
    home: Path, tmux_env, tmp_path: Path
):
    argv = ["submit", "--cmd", "echo fast", "--prompt", "x", "--workdir", str(tmp_path)]
    code, loaded, out = _probe(home, *argv, "--no-wait", "--json", env=tmux_env)
    assert code == 0 and loaded == []
    fast = json.loads(out)
    slow_run = _typer_run(home, *argv, "--no-wait", "--json", env=tmux_env)
    assert slow_run.returncode == 0, slow_run.stderr
    slow = json.loads(slow_run.stdout)
    assert fast.keys() == slow.keys()
    differ = {"job_id", "created_at", "updated_at", "session", "launcher", "launch", "status"}
    # how far the job got before its record was printed: as `status`, a matter of timing (the
    # slower typer path may print a job that has started, or even ended, already)
    differ |= {"started_at", "last_seq", "last_event_at"}
    assert {k: fast[k] for k in fast.keys() - differ} == {k: slow[k] for k in slow.keys() - differ}
    state = State.open(env=cli_env(home, tmux_env))
    for job_id in (fast["job_id"], slow["job_id"]):
        retry_until(lambda j=job_id: state.registry.get(j).status.terminal, timeout=30)
        assert state.registry.get(job_id).status.value == "completed"
    # piped without --json: the job id alone, as the typer command prints it
    code, loaded, out = _probe(home, *argv, "--no-wait", env=tmux_env)
    assert code == 0 and loaded == [] and len(out.strip()) == 8
    # waited for: the events as JSON lines (piped), the outcome's exit status
    code, loaded, out = _probe(home, *argv[:2], "exit 3", *argv[3:], "--wait", env=tmux_env)
    assert code == 1 and loaded == []
    assert [json.loads(line)["event"] for line in out.splitlines()] == ["started", "error"]
    # bad input: one line from typer (a usage error, 64), nothing recorded
    before = len(state.registry.list())
    code, loaded, _ = _probe(home, *argv, "--max-running", "two", env=tmux_env)
    assert code == 64 and "typer" in loaded
    assert len(state.registry.list()) == before
