"""The command line's rough edges (issue 17): --version, every command's own --help, a
DELEGATE_CONFIG naming no file, `logs --follow` printing each event once, and defaults that are
visible in --help and in the configuration reference's Defaults table (checked against the code)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click
import pytest

from delegate import __version__
from delegate.cli import app as cli

from .helpers import assert_one_line_error, cli_env, json_lines, popen_cli, run_cli

ROOT = Path(__file__).resolve().parent.parent
# What delegate/__main__.py answers without typer; their --help must still reach typer.
FAST_PATHS = [
    ["publish"],
    ["hook"],
    ["lock", "acquire"],
    ["lock", "renew"],
    ["lock", "release"],
    ["lock", "check"],
    ["cron", "run"],
]


# --- --version --------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version_prints_the_version_without_typer(home: Path, flag: str):
    result = run_cli(home, flag)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"delegate {__version__}\n" == "delegate 0.1.0\n"
    assert result.stderr == ""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from delegate.__main__ import main; code = main([sys.argv[1]]);"
            " assert 'typer' not in sys.modules and 'click' not in sys.modules; sys.exit(code)",
            flag,
        ],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout == "delegate 0.1.0\n"


def test_version_through_typer_too():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.run(["--version"]) == 0
    assert out.getvalue() == "delegate 0.1.0\n"


# --- every command's own --help ---------------------------------------------------------


def command_tree() -> list[tuple[list[str], click.Command, click.Command | None]]:
    """(path, command, parent) for the root, every group and every command."""
    found: list[tuple[list[str], click.Command, click.Command | None]] = []

    def walk(command: click.Command, path: list[str], parent: click.Command | None) -> None:
        found.append((path, command, parent))
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name], command)

    walk(cli.full_command(), [], None)
    return found


def first_line(command: click.Command) -> str:
    return " ".join((command.help or "").strip().splitlines()[0].split())


def flat(text: str) -> str:
    return " ".join(text.split())


def check_help(path: list[str], command: click.Command, parent: Any, code: int, out: str) -> None:
    where = " ".join(path) or "<root>"
    assert code == 0, (where, out)
    usage = next((line.strip() for line in out.splitlines() if "Usage:" in line), "")
    expected = " ".join(["Usage: delegate", *path])
    assert re.match(re.escape(expected) + r"( |$)", usage), (where, usage)
    own = first_line(command)
    assert own, f"{where} has no help text"
    assert own in flat(out), (where, own, out)
    if parent is not None:
        assert own != first_line(parent), f"{where} says what its parent says"
        assert first_line(parent) not in flat(out), f"{where} prints its parent's help"


TREE = command_tree()


def test_the_tree_has_every_group_and_subcommand():
    paths = {" ".join(p) for p, _, _ in TREE}
    assert {"", "claim", "claim renew", "claim release", "claim list", "lock acquire"} <= paths
    assert len(paths) > 60


def test_the_lazy_root_lists_what_an_eager_build_of_every_app_has():
    """The lazy root's table against typer's own build of `app` plus each lazily loaded
    module's `commands`: the same names, each defined where the table says."""
    import importlib

    from delegate.cli.lazy import build_from

    root = cli.root_command()
    assert root.commands == {}  # nothing built before it is asked for
    for name, module in cli.ROOT_COMMANDS.items():
        holder = cli.app if module == cli.__name__ else importlib.import_module(module).commands
        assert build_from(holder, name, settings=cli.app).name == name
    eager = {
        cli.app,
        *(
            importlib.import_module(m).commands
            for m in set(cli.ROOT_COMMANDS.values()) - {cli.__name__}
        ),
    }
    every = set()
    for holder in eager:
        every |= {
            c.name or c.callback.__name__.replace("_", "-") for c in holder.registered_commands
        }
        every |= {g.name for g in holder.registered_groups}
    assert every == set(cli.ROOT_COMMANDS)
    assert [p[0] for p, _, _ in TREE if len(p) == 1] == list(cli.ROOT_COMMANDS)


LOADED_MODULES = """
import json, sys
from delegate.__main__ import main
code = main(sys.argv[1:])
mine = sorted(n for n in sys.modules if n.startswith("delegate.cli."))
sys.stderr.write("\\nLOADED " + json.dumps(mine) + "\\n")
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["jobs", "--json"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.jobs", "delegate.cli.lazy"],
        ),
        (
            ["lock", "list", "--json"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.coord", "delegate.cli.lazy"],
        ),
        (
            ["host", "list", "--json"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.hosts", "delegate.cli.lazy"],
        ),
        (
            ["session", "list", "--json"],
            [
                "delegate.cli.app",
                "delegate.cli.common",
                "delegate.cli.lazy",
                "delegate.cli.session",
            ],
        ),
        (
            ["cron", "list", "--json"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.cron", "delegate.cli.lazy"],
        ),
        (
            ["submit", "--help"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.lazy", "delegate.cli.submit"],
        ),
        (
            ["doctor", "--help"],
            ["delegate.cli.app", "delegate.cli.common", "delegate.cli.lazy", "delegate.cli.upkeep"],
        ),
    ],
)
def test_a_command_loads_only_its_own_group(home: Path, argv: list[str], expected: list[str]):
    done = subprocess.run(
        [sys.executable, "-c", LOADED_MODULES, *argv],
        env=cli_env(home),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert json.loads(last.removeprefix("LOADED ")) == expected


def test_every_command_and_group_has_its_own_help_in_process(monkeypatch: pytest.MonkeyPatch):
    """The whole tree, in this process: what `cli.run` does, on one command object built once
    (building it costs more than rendering one help)."""
    from click.exceptions import Exit

    monkeypatch.setenv("COLUMNS", "200")
    root = TREE[0][1]
    for path, command, parent in TREE:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                root.main(args=[*path, "--help"], prog_name="delegate", standalone_mode=False)
                code = 0
            except Exit as exc:
                code = int(exc.exit_code)
        check_help(path, command, parent, code, out.getvalue())


# Through `python -m delegate`: the fast paths (they must hand --help and -h to typer) and the
# root (where --version is answered without typer). The rest is the same typer tree as above.
REAL_ENTRY = [*FAST_PATHS, []]


def test_fast_paths_give_their_own_help_through_the_real_entry(home: Path):
    by_path = {tuple(p): (c, parent) for p, c, parent in TREE}
    runs = [(path, "--help") for path in REAL_ENTRY] + [(path, "-h") for path in FAST_PATHS]

    def one(item: tuple[list[str], str]) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        path, flag = item
        return path, run_cli(home, *path, flag, env={"COLUMNS": "200"})

    with ThreadPoolExecutor(max_workers=8) as pool:
        for path, result in pool.map(one, runs):
            command, parent = by_path[tuple(path)]
            assert result.stderr == "", (path, result.stderr)
            check_help(path, command, parent, result.returncode, result.stdout)


def test_claim_still_takes_a_bare_task(home: Path):
    claimed = run_cli(home, "claim", "build-docs", "--owner", "w", "--json")
    assert claimed.returncode == 0 and json.loads(claimed.stdout)["task"] == "build-docs"
    options_first = run_cli(home, "claim", "--owner", "v", "build-docs")
    assert options_first.returncode == 75
    assert_one_line_error(options_first)
    assert run_cli(home, "claim", "renew", "build-docs", "--owner", "w").returncode == 0
    listed = json_lines(run_cli(home, "claim", "list", "--json").stdout)
    assert [r["task"] for r in listed] == ["build-docs"]
    assert run_cli(home, "claim", "release", "build-docs", "--owner", "w").returncode == 0
    assert_one_line_error(run_cli(home, "claim", "list", "extra"))


# --- DELEGATE_CONFIG --------------------------------------------------------------------

CONFIG_READERS = {
    "submit": ["submit", "--agent", "shell", "--prompt", "true", "--no-wait"],
    "monitor": ["monitor", "--once"],
    "agents": ["agents"],
    "lock-break-dead": ["lock", "acquire", "r", "--owner", "a", "--break-dead"],
    "claim-break-dead": ["claim", "t", "--owner", "a", "--break-dead"],
    "session-stop": ["session", "stop", "nope", "--mode", "graceful"],
    "cron-add": ["cron", "add", "0 2 * * *", "{job_file}", "--file", "{crontab}"],
}


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "nightly.toml"
    path.write_text('agent = "shell"\nprompt = "true"\n')
    return path


def _fill(args: list[str], tmp_path: Path, job_file: Path) -> list[str]:
    crontab = str(tmp_path / "crontab")
    return [a.replace("{job_file}", str(job_file)).replace("{crontab}", crontab) for a in args]


@pytest.mark.parametrize("args", list(CONFIG_READERS.values()), ids=list(CONFIG_READERS))
def test_a_missing_delegate_config_is_one_clear_error(
    home: Path, tmp_path: Path, job_file: Path, args: list[str]
):
    missing = tmp_path / "x" / "y.toml"
    result = run_cli(home, *_fill(args, tmp_path, job_file), env={"DELEGATE_CONFIG": str(missing)})
    assert_one_line_error(result)
    assert result.returncode == 64
    assert result.stderr == f"delegate: DELEGATE_CONFIG names {missing}, which does not exist\n"
    assert not (home / "jobs").exists() or not list((home / "jobs").glob("*.json"))
    assert not (tmp_path / "crontab").exists()


@pytest.mark.parametrize(
    "args",
    [CONFIG_READERS["submit"], CONFIG_READERS["agents"]],
    ids=["submit", "agents"],
)
def test_an_unreadable_delegate_config_is_one_clear_error(
    home: Path, tmp_path: Path, args: list[str]
):
    folder = tmp_path / "conf.d"
    folder.mkdir()
    result = run_cli(home, *args, env={"DELEGATE_CONFIG": str(folder)})
    assert_one_line_error(result)
    assert result.returncode == 64 and f"DELEGATE_CONFIG names {folder}," in result.stderr
    if os.geteuid() != 0:  # root reads a mode-000 file all the same
        locked = tmp_path / "locked.toml"
        locked.write_text("")
        locked.chmod(0)
        denied = run_cli(home, *args, env={"DELEGATE_CONFIG": str(locked)})
        assert_one_line_error(denied)
        assert "which cannot be read (Permission denied)" in denied.stderr


def test_a_missing_default_delegate_toml_is_fine(home: Path, tmp_path: Path, job_file: Path):
    assert not (home / "delegate.toml").exists()
    assert run_cli(home, "agents").returncode == 0
    added = run_cli(home, *_fill(CONFIG_READERS["cron-add"], tmp_path, job_file))
    assert added.returncode == 0, added.stderr
    named = tmp_path / "delegate.toml"
    named.write_text("[heartbeat]\nwarn = 5\nstale = 10\ndead = 20\n")
    assert run_cli(home, "agents", env={"DELEGATE_CONFIG": str(named)}).returncode == 0


# --- logs --follow ----------------------------------------------------------------------


def test_logs_follow_prints_each_event_once(home: Path):
    """A real job with a subscriber: the publisher logs each event `published` and the
    subscriber `received`; the follower prints each event once, and every line once."""
    job_id = run_cli(home, "register", "--cmd", "true").stdout.strip()
    watcher = popen_cli(home, "watch", job_id, "--ready-file", str(home / "ready"), "--json")
    follower = popen_cli(home, "logs", job_id, "--follow")
    try:
        deadline = time.monotonic() + 30
        while not (home / "ready").exists():
            assert watcher.poll() is None and time.monotonic() < deadline, watcher.stderr
            time.sleep(0.02)
        for args in (
            ["--event", "started"],
            ["--event", "progress", "--detail", "one"],
            ["--event", "progress", "--detail", "two"],
            ["--event", "completed"],
        ):
            published = run_cli(home, "publish", "--job", job_id, *args)
            assert published.returncode == 0, published.stderr
        assert watcher.wait(timeout=30) == 0
        out, err = follower.communicate(timeout=30)
    finally:
        for process in (watcher, follower):
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert follower.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == len(set(lines)), out
    entries = [json.loads(line) for line in lines]
    seqs = [e["seq"] for e in entries if e["kind"] in ("published", "received")]
    assert seqs == [1, 2, 3, 4], entries
    # the file has both lines of each event (the subscriber did receive them); --raw shows them
    raw = json_lines(run_cli(home, "logs", job_id, "--raw").stdout)
    kinds = [e["kind"] for e in raw]
    assert kinds.count("published") == 4 and kinds.count("received") == 4
    plain = json_lines(run_cli(home, "logs", job_id).stdout)
    assert plain == entries


# --- defaults ---------------------------------------------------------------------------


def _options() -> Iterator[tuple[str, click.Option]]:
    for path, command, _ in TREE:
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                yield " ".join(path), param


def test_every_default_is_in_the_help_of_its_option():
    for where, option in _options():
        if option.default is None or (option.is_flag and not option.secondary_opts):
            continue  # nothing to show, or a plain on/off flag
        shown = option.show_default or "default" in (option.help or "")
        assert shown, f"{where} {option.opts[0]}: default {option.default!r} is not shown"


@pytest.mark.parametrize("command", ["submit", "register"])
def test_job_timeouts_say_their_defaults(command: str):
    params = {p.name: p for p in cli.full_command().commands[command].params}
    assert "default 3600 s (1h)" in (params["wall_timeout"].help or "")
    assert "default 600 s (10m)" in (params["idle_timeout"].help or "")
    assert params["wall_timeout"].default is None and params["idle_timeout"].default is None


def readme_defaults() -> list[dict[str, str]]:
    text = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    section = text.split("\n## Defaults\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert rows[0].split("|")[1:4] == [" name ", " default ", " where to change it "]
    found = []
    for line in rows[2:]:
        name, default, where = (cell.strip() for cell in line.strip("|").split(" | "))
        found.append({"name": name, "default": default, "where": where})
    return found


def code_defaults() -> dict[str, Any]:
    """The code's value for README rows no option default states (or that have a constant
    besides the option, which must agree too)."""
    from delegate.config import logsetup as _logging
    from delegate.config.profiles import NOTIFY_EVENTS_DEFAULT, max_running_caps
    from delegate.coord.heartbeats import BEAT_INTERVAL_S, Thresholds
    from delegate.core.hostproto import DEFAULT_LOST_AFTER_S
    from delegate.core.policy import DEFAULT_KEEP_FINISHED_S
    from delegate.runtime.monitor import DEFAULT_INTERVAL_S
    from delegate.services.jobs.notify import NOTIFY_LIMIT_S
    from delegate.services.jobs.register import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_WALL_TIMEOUT_S
    from delegate.services.session import DEFAULT_STOP_TIMEOUT_S

    thresholds = Thresholds()
    return {
        "job wall-clock budget, from `started`": DEFAULT_WALL_TIMEOUT_S,
        "job idle limit, from the last event": DEFAULT_IDLE_TIMEOUT_S,
        "concurrency cap": max_running_caps({}).total,
        "notifier time limit": NOTIFY_LIMIT_S,
        "events a `[notify]` command hears": ", ".join(NOTIFY_EVENTS_DEFAULT),
        "monitor pass interval": DEFAULT_INTERVAL_S,
        "finished session kept for a look": DEFAULT_KEEP_FINISHED_S,
        "graceful session stop, before SIGTERM": DEFAULT_STOP_TIMEOUT_S,
        "wrapper heartbeat interval": BEAT_INTERVAL_S,
        "heartbeat WARN / STALE / DEAD after": [
            thresholds.warn_ms / 1000,
            thresholds.stale_ms / 1000,
            thresholds.dead_ms / 1000,
        ],
        "host silence before its jobs fail `host_lost`": DEFAULT_LOST_AFTER_S,
        "log level on stderr": _logging.DEFAULT_LEVEL,
    }


def as_values(readme: str) -> list[float] | str:
    """`600 s` -> [600.0]; `30 s / 100 s / 300 s` -> [30, 100, 300]; `3600 s (1h)` -> [3600];
    `10` -> [10]; anything else stays text."""
    head = readme.split(" (")[0]
    numbers = re.fullmatch(r"\d+(?:\.\d+)?(?: s)?(?: / \d+(?:\.\d+)?(?: s)?)*", head)
    if numbers:
        return [float(n) for n in re.findall(r"\d+(?:\.\d+)?", head)]
    return head


def expected(value: Any) -> list[float] | str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return [float(v) for v in value]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return [float(value)]


def test_the_readme_defaults_table_matches_the_code():
    rows = readme_defaults()
    code = code_defaults()
    assert {r["name"] for r in rows} >= set(code), set(code) - {r["name"] for r in rows}
    root = cli.full_command()
    for row in rows:
        checked = 0
        stated = as_values(row["default"])
        if row["name"] in code:
            assert stated == expected(code[row["name"]]), row
            checked += 1
        for flag in re.findall(r"`([a-z]+(?: [a-z]+)* --[a-z-]+)`", row["where"]):
            *path, option = flag.split()
            command = root
            for name in path:
                command = command.commands[name]
            [param] = [p for p in command.params if option in getattr(p, "opts", ())]
            if param.default is None:
                continue  # its default lives in the code (checked above)
            assert stated == expected(param.default), (row, flag, param.default)
            checked += 1
        if (
            row["where"] == "fixed"
            or "delegate.toml" in row["where"]
            or "`DELEGATE_" in row["where"]
        ):
            assert row["name"] in code, f"README default {row['name']!r} is checked against nothing"
        assert checked, f"README default {row['name']!r} is checked against nothing"


def test_the_fast_lock_path_uses_the_same_ttl():
    from delegate.entry import coord as fastcoord

    group = cli.full_command().commands["lock"]
    for action in ("acquire", "renew"):
        [ttl] = [p for p in group.commands[action].params if p.name == "ttl"]
        assert ttl.default == fastcoord.LOCK_TTL_S


def test_doctor_names_a_missing_delegate_config(home: Path, tmp_path: Path):
    missing = tmp_path / "y.toml"
    result = run_cli(home, "doctor", "--json", env={"DELEGATE_CONFIG": str(missing)})
    assert result.returncode == 1
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["config"]["status"] == "fail"
    assert checks["config"]["detail"] == f"DELEGATE_CONFIG names {missing}, which does not exist"
    fine = json.loads(run_cli(home, "doctor", "--json").stdout)["checks"]
    assert next(c for c in fine if c["name"] == "config")["status"] == "ok"
