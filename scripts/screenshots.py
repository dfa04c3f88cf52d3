"""The documentation's pictures, taken from a real run (`make docs` runs this).

A fresh state dir, home and tmux server (as the tests make them); real shell jobs: two that
ended, one that failed, one running that reported progress, two queued in a paused group.
Then:

- `top.svg`: `delegate top` in a pseudo-terminal of a fixed size, its bytes fed to a terminal
  emulator (pyte), the screen drawn as SVG by rich (`Console.export_svg`);
- `dashboard.png`: `delegate dashboard` in headless Chromium (Playwright with the system
  Chromium, as tests/test_dashboard.py drives it).

    python scripts/screenshots.py docs/images            # both
    python scripts/screenshots.py docs/images --only top

Everything it starts (the tmux server, the state dir's supervisor, the dashboard) is stopped
before it returns.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit

from delegate.adapters.procfs import processes_with_environ

COLUMNS, ROWS = 110, 24
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]


class Run(NamedTuple):
    """A state dir with jobs in it, and the environment that reaches it."""

    env: dict[str, str]
    home: Path
    jobs: dict[str, str]  # what each job is, by job id


def delegate(run_env: dict[str, str], *args: str, timeout: float = 60) -> str:
    """Run `delegate ARGS`; its stdout (a failure raises, with its stderr)."""
    done = subprocess.run(
        [sys.executable, "-m", "delegate", *args],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode not in (0, 1):  # 1: a job that ended in error, as asked
        raise RuntimeError(f"delegate {' '.join(args)}: exit {done.returncode}: {done.stderr}")
    return done.stdout


def wait_for(check: Callable[[], object], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"screenshots: {what} did not happen within {timeout} s")
        time.sleep(0.1)


def job_state(run_env: dict[str, str], job_id: str) -> str:
    return str(json.loads(delegate(run_env, "show", job_id, "--json"))["status"])


@contextlib.contextmanager
def real_run(work: Path) -> Iterator[Run]:
    """Jobs in a fresh state dir under `work`, on a private tmux server; all of it stopped and
    its tmux folder removed afterwards."""
    home = work / "state"
    user_home = work / "home"
    workdir = work / "project"
    for folder in (user_home, workdir):
        folder.mkdir(parents=True, exist_ok=True)
    tmux_tmpdir = Path(tempfile.mkdtemp(prefix="dld-", dir="/tmp"))  # a socket path is short
    socket = f"docs-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELEGATE_")}
    env.update(
        DELEGATE_HOME=str(home),
        DELEGATE_TMUX_SOCKET=socket,
        TMUX_TMPDIR=str(tmux_tmpdir),
        HOME=str(user_home),
        SHELL="/bin/sh",
        TZ="UTC",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    )
    try:
        yield Run(env, home, submit_jobs(env, workdir))
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], env=env, capture_output=True)
        stop_processes_of(home)
        shutil.rmtree(tmux_tmpdir, ignore_errors=True)


def submit_jobs(env: dict[str, str], workdir: Path) -> dict[str, str]:
    """The jobs the pictures show; their ids, each with what it is."""

    def submit(script: str, *flags: str) -> str:
        out = delegate(
            env,
            "submit",
            "--agent",
            "shell",
            "-C",
            str(workdir),
            "--prompt",
            script,
            *flags,
            "--json",
            timeout=120,
        )
        return str(json.loads(out.splitlines()[-1])["job_id"])

    jobs = {}
    jobs[submit("echo building; sleep 1", "--wait")] = "completed"
    jobs[submit("echo checking; exit 3", "--wait")] = "error"
    running = submit(
        "delegate publish --event progress --detail 'tests green, 42 of 42'; sleep 600",
        "--no-wait",
    )
    jobs[running] = "running"
    delegate(env, "group", "add", "nightly", "--max-running", "1")
    delegate(env, "group", "pause", "nightly")
    for _ in range(2):
        jobs[submit("sleep 600", "--no-wait", "--group", "nightly")] = "queued"
    wait_for(lambda: job_state(env, running) == "running", f"job {running} running")
    wait_for(
        lambda: "tests green" in delegate(env, "logs", running),
        f"job {running}'s progress",
    )
    return jobs


def stop_processes_of(home: Path) -> None:
    """SIGKILL what this run started that is still up: every process whose environment names
    this run's own state dir (a path no one else uses)."""
    for pid in processes_with_environ(f"DELEGATE_HOME={home}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# --- delegate top, as a terminal shows it -------------------------------------------------------


def top_screen(run: Run, columns: int = COLUMNS, rows: int = ROWS, timeout: float = 60):  # type: ignore[no-untyped-def]
    """`delegate top` at a terminal of `columns` x `rows`, as pyte's screen once every job of
    `run` is on it; `q` then quits it."""
    import pyte  # the docs extra

    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {
        **run.env,
        "COLUMNS": str(columns),
        "LINES": str(rows),
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "delegate", "top"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    deadline = time.monotonic() + timeout
    try:
        while not _shows(screen, run.jobs):
            if time.monotonic() > deadline or process.poll() is not None:
                shown = "\n".join(screen.display)
                raise RuntimeError(f"screenshots: `delegate top` never showed every job:\n{shown}")
            if select.select([master], [], [], 0.1)[0]:
                stream.feed(os.read(master, 65536))
        # let the last frame settle, then take it
        settle = time.monotonic() + 0.5
        while time.monotonic() < settle:
            if select.select([master], [], [], 0.1)[0]:
                stream.feed(os.read(master, 65536))
        os.write(master, b"q")
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        os.close(master)
    return screen


def _shows(screen, jobs: dict[str, str]) -> bool:  # type: ignore[no-untyped-def]
    text = "\n".join(screen.display)
    return "STATE" in text and all(job_id in text for job_id in jobs)


_NAMES = {"brown": "yellow", "brightbrown": "bright_yellow"}


def _color(value: str) -> str | None:
    if value == "default":
        return None
    if len(value) == 6 and all(c in "0123456789abcdefABCDEF" for c in value):
        return f"#{value}"
    name = _NAMES.get(value, value)
    return (
        name.replace("bright", "bright_") if name.startswith("bright") and "_" not in name else name
    )


def screen_svg(screen, title: str) -> str:  # type: ignore[no-untyped-def]
    """The pyte `screen` as an SVG picture of a terminal, by rich."""
    from rich.console import Console
    from rich.style import Style
    from rich.text import Text

    console = Console(
        record=True,
        width=screen.columns,
        file=open(os.devnull, "w"),  # noqa: SIM115
        color_system="truecolor",
        force_terminal=True,
    )
    for y in range(screen.lines):
        line = Text()
        row = screen.buffer[y]
        run, run_style = "", None
        for x in range(screen.columns):
            char = row[x]
            fg, bg = _color(char.fg), _color(char.bg)
            if char.reverse:
                fg, bg = bg or "black", fg or "white"
            style = Style(
                color=fg, bgcolor=bg, bold=char.bold, italic=char.italics, underline=char.underscore
            )
            if style != run_style and run:
                line.append(run, run_style)
                run = ""
            run, run_style = run + (char.data or " "), style
        line.append(run, run_style)
        console.print(line, no_wrap=True, crop=True)
    return console.export_svg(title=title)


def take_top(run: Run, out: Path) -> Path:
    svg = screen_svg(top_screen(run), "delegate top")
    path = out / "top.svg"
    path.write_text(svg)
    return path


# --- the dashboard, as a browser shows it -------------------------------------------------------


def take_dashboard(run: Run, out: Path) -> Path:
    """`delegate dashboard` in headless Chromium, 1280 x 360, once every job's row is there."""
    from playwright.sync_api import sync_playwright  # the dev extra

    server = subprocess.Popen(
        [sys.executable, "-m", "delegate", "dashboard", "--port", "0"],
        env=run.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = out / "dashboard.png"
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        if not urlsplit(url).port:
            raise RuntimeError(f"screenshots: the dashboard printed no URL ({url!r})")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 360})
            page.goto(url)
            for job_id in run.jobs:
                page.wait_for_selector(f'#jobs tr[data-job="{job_id}"]', timeout=15_000)
            page.wait_for_timeout(300)
            page.screenshot(path=str(path))
            browser.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
    return path


def take(out: Path, work: Path, only: tuple[str, ...] = ("top", "dashboard")) -> Run:
    """The pictures named in `only`, into `out`, from a run in `work`; the run (its jobs)."""
    out.mkdir(parents=True, exist_ok=True)
    with real_run(work) as run:
        if "top" in only:
            take_top(run, out)
        if "dashboard" in only:
            take_dashboard(run, out)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for top.svg and dashboard.png")
    parser.add_argument("--only", choices=("top", "dashboard"), action="append")
    args = parser.parse_args()
    if "dashboard" in (args.only or ("dashboard",)) and not CHROMIUM.exists():
        raise SystemExit(f"screenshots: no Chromium at {CHROMIUM}: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="delegate-docs-") as work:
        run = take(args.out, Path(work), tuple(args.only or ("top", "dashboard")))
    print(f"screenshots of {len(run.jobs)} jobs in {args.out}")


if __name__ == "__main__":
    main()
