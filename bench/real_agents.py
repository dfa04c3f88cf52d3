"""Delegate with the real Claude Code CLI (2.1.197, installed by `make agents` into
.cache/agents) against the test suite's scripted Anthropic Messages server (tests/models).

- `overhead`: what delegate adds to a short job. `delegate submit --wait --agent claude
  --prompt "Say hi."` (submit to exit), with and without `--no-mcp`, against the same
  `claude -p --output-format stream-json --verbose "Say hi."` run bare (same server, same
  variables), `-n` runs each, interleaved. Goals at p50: ratio <= 1.25 and difference
  <= 300 ms. Each delegate run is broken down from its audit log (logs/<job>/events.ndjson),
  the lines `submit --wait` prints and the scripted server's clock: submit -> the wrapper's
  `started` -> claude's first model request -> its last reply written -> the wrapper's
  `completed` -> the end recorded -> submit's exit; a bare run: start -> first request ->
  last reply -> its `result` line -> exit.
- `approval`: one claude job asks `-n` times to run `Bash` `touch approved-I`; its PreToolUse
  hook asks delegate; once `delegate approvals --json` lists the request, `delegate approve
  JOB` is started and timed to the file appearing (a 1 ms stat loop) and to claude's next
  model request (the one carrying the tool's result). Goal: p50 <= 100 ms. Also `approve`'s own
  exit, the audit's `approval_sent` and `permission_decided`, the hook's way there (last reply
  -> request written), and, for reference, a bare claude running the same calls allowed by
  `--allowedTools=Bash` (last reply -> file, -> next request): what claude itself takes.

Each part has its own DELEGATE_HOME, HOME, TMUX_TMPDIR (a private tmux server, killed at the
end) and workdir under one temporary folder that is removed at the end. Between runs the bench
waits until the previous job's processes (wrapper, agent, MCP servers, supervisor) are gone;
at the end anything still running with its DELEGATE_HOME is ended.

Each delegate figure also gets `paired_diff_p50_ms`, the median of each run minus the bare run
beside it. Claude's start-up is CPU-bound: on a small, busy machine every figure moves with the
load, which is printed before and after.

Usage: python bench/real_agents.py [-n N] [--only overhead|approval] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from _common import ROOT, emit, precompile

sys.path.insert(0, str(ROOT))  # tests.models: the scripted server and the CLIs' variables

from tests.models import AnthropicServer, Request, bash, claude_env, text
from tests.models.cli import AGENT_BIN, CLAUDE

VENV_BIN = Path(sys.executable).parent
DELEGATE = str(VENV_BIN / "delegate")
PROMPT = "Say hi."
RATIO_GOAL = 1.25
DIFF_GOAL_MS = 300.0
APPROVAL_GOAL_MS = 100.0
RUN_TIMEOUT_S = 120.0
SETTLE_TIMEOUT_S = 20.0
POLL_S = 0.001
Clock = Callable[[], float]


# -- the scripted server, with the time each reply was written ------------------------------------


class TimedServer(AnthropicServer):
    """The scripted Anthropic server; each recorded Request also gets `replied_at` (epoch
    seconds), when its reply was written in full."""

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()

    def _read(self, handler: Any) -> Request:
        request = super()._read(handler)
        self._local.request = request
        return request

    def _serve(self, handler: Any) -> None:
        super()._serve(handler)
        self._local.request.replied_at = time.time()


def turns_since(server: TimedServer, first: int) -> list[Request]:
    return [r for r in server.requests[first:] if r.turn is not None]


def replied(request: Request) -> float:
    return float(getattr(request, "replied_at", request.at))


# -- places, environments, processes --------------------------------------------------------------


class Place:
    """One part's folders: DELEGATE_HOME, HOME, TMUX_TMPDIR, workdirs."""

    def __init__(self, root: Path, name: str, server: TimedServer) -> None:
        self.root = root / name
        self.home = self.root / "state"
        self.user_home = self.root / "home"
        self.bare_home = self.root / "bare-home"
        self.tmux = self.root / "tmux"
        for folder in (self.home, self.user_home, self.bare_home):
            folder.mkdir(parents=True)
        self.tmux.mkdir(mode=0o700)
        self.server = server
        self._workdirs = 0
        profile_env = {
            k: v for k, v in claude_env(server).items() if k not in ("ANTHROPIC_API_KEY", "HOME")
        }
        table = ", ".join(f"{k} = {json.dumps(v)}" for k, v in profile_env.items())
        (self.home / "delegate.toml").write_text(f"[profiles.claude]\nenv = {{ {table} }}\n")

    def workdir(self) -> Path:
        self._workdirs += 1
        path = self.root / f"work-{self._workdirs}"
        path.mkdir()
        return path

    def path(self) -> str:
        rest = os.environ.get("PATH", "/usr/bin:/bin")
        return os.pathsep.join([str(VENV_BIN), str(AGENT_BIN), rest])

    def delegate_env(self) -> dict[str, str]:
        """What a user's shell would have: PATH (the venv's and the agents' bin first), HOME,
        the state dir, a private tmux, and the key (the claude profile passes it on)."""
        return {
            "PATH": self.path(),
            "HOME": str(self.user_home),
            "TZ": "UTC",
            "LANG": os.environ.get("LANG", "C.UTF-8"),
            "DELEGATE_HOME": str(self.home),
            "TMUX_TMPDIR": str(self.tmux),
            "ANTHROPIC_API_KEY": claude_env(self.server)["ANTHROPIC_API_KEY"],
        }

    def bare_env(self) -> dict[str, str]:
        """The same variables for a claude started by hand (no delegate ones)."""
        env = {"PATH": self.path(), "TZ": "UTC", "LANG": os.environ.get("LANG", "C.UTF-8")}
        return {**env, **claude_env(self.server, self.bare_home)}

    def close(self) -> None:
        """Kill this part's tmux server, then end whatever still runs for its state dir."""
        subprocess.run(
            ["tmux", "kill-server"], env=self.delegate_env(), capture_output=True, timeout=30
        )
        marker = f"DELEGATE_HOME={self.home}"
        if settle(marker, timeout=5.0):
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in ours(marker):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if settle(marker, timeout=3.0):
                return


def ours(marker: str, *, but_tmux: bool = False) -> list[int]:
    """The processes whose environment holds `marker` (VAR=value): started, directly or not,
    by this bench for one of its state dirs (optionally leaving out tmux servers)."""
    needle = marker.encode() + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle not in handle.read():
                    continue
            if but_tmux:
                with open(f"/proc/{name}/comm", "rb") as handle:
                    if handle.read().strip().startswith(b"tmux"):
                        continue
        except OSError:
            continue
        found.append(int(name))
    return found


def settle(marker: str, timeout: float = SETTLE_TIMEOUT_S, *, but_tmux: bool = False) -> bool:
    """Wait until no process holds `marker`; whether that happened within `timeout`."""
    deadline = time.monotonic() + timeout
    while ours(marker, but_tmux=but_tmux):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


class Lines:
    """A process's stdout read line by line, each line with the time it was read."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: list[tuple[float, bytes]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line))

    def wait(self, timeout: float) -> float:
        """The exit time; kills the process group on timeout (RuntimeError). A thread blocks
        in waitpid: `Popen.wait(timeout=...)` polls, up to 50 ms late."""
        ended: list[float] = []

        def reap() -> None:
            self.proc.wait()
            ended.append(time.time())

        reaper = threading.Thread(target=reap, daemon=True)
        reaper.start()
        reaper.join(timeout)
        if not ended:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            reaper.join()
            raise RuntimeError(f"{self.proc.args!r} took over {timeout:g} s")
        self._thread.join(timeout=5)
        return ended[0]

    def json(self) -> list[tuple[float, dict[str, Any]]]:
        found = []
        for at, raw in self.lines:
            with contextlib.suppress(ValueError):
                parsed = json.loads(raw)
                if isinstance(parsed, dict):
                    found.append((at, parsed))
        return found


def start(argv: Sequence[str], env: dict[str, str], cwd: Path) -> tuple[float, Lines]:
    began = time.time()
    proc = subprocess.Popen(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its group is ours to kill on a timeout
    )
    return began, Lines(proc)


def stamp(value: str) -> float:
    """Epoch seconds of an audit `ts` or an envelope `timestamp` (ISO 8601, UTC)."""
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def audit(home: Path, job_id: str) -> list[dict[str, Any]]:
    path = home / "logs" / job_id / "events.ndjson"
    found = []
    for raw in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            found.append(json.loads(raw))
    return found


def first(lines: list[dict[str, Any]], test: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for line in lines:
        if test(line):
            return line
    return {}


def job_status(home: Path, job_id: str) -> str | None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        return str(json.loads((home / "jobs" / f"{job_id}.json").read_text())["status"])
    return None


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def p50(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.median(kept), 1) if kept else None


def stats(values: Sequence[float | None]) -> dict[str, Any]:
    kept = [v for v in values if v is not None]
    if not kept:
        return {"n": 0}
    return {
        "n": len(kept),
        "p50_ms": round(statistics.median(kept), 1),
        "min_ms": round(min(kept), 1),
        "max_ms": round(max(kept), 1),
    }


# -- part 1: what delegate adds to a short job ----------------------------------------------------


def bare_run(place: Place) -> dict[str, float | None]:
    """One bare `claude -p ... "Say hi."`: times (ms) from its start."""
    server = place.server
    seen = len(server.requests)
    argv = [str(CLAUDE), "-p", "--output-format", "stream-json", "--verbose", PROMPT]
    began, out = start(argv, place.bare_env(), place.workdir())
    ended = out.wait(RUN_TIMEOUT_S)
    if out.proc.returncode != 0:
        raise RuntimeError(f"bare claude exited {out.proc.returncode}")
    requests = server.requests[seen:]
    turns = [r for r in requests if r.turn is not None]
    result = [at for at, line in out.json() if line.get("type") == "result"]
    last = replied(turns[-1])
    return {
        "total": ms(ended - began),
        "first_request": ms(requests[0].at - began),  # the HEAD probe
        "first_model_request": ms(turns[0].at - began),
        "last_reply_written": ms(last - began),
        "result_line": ms(result[-1] - began) if result else None,
        "exit": ms(ended - began),
        "last_reply_to_result_line": ms(result[-1] - last) if result else None,
        "last_reply_to_exit": ms(ended - last),
    }


def delegate_run(
    place: Place, *extra: str, env: dict[str, str] | None = None
) -> dict[str, float | None]:
    """One `delegate submit --wait --agent claude` (with `extra` flags, and `env` over the
    user's): times (ms) from the start of submit, from its audit log, its printed events and
    the server."""
    server = place.server
    seen = len(server.requests)
    argv = [DELEGATE, "submit", "--wait", "--agent", "claude", "--prompt", PROMPT]
    workdir = place.workdir()
    environment = {**place.delegate_env(), **(env or {})}
    began, out = start([*argv, "--workdir", str(workdir), *extra], environment, workdir)
    ended = out.wait(RUN_TIMEOUT_S)
    events = out.json()
    job_id = next((line["job_id"] for _, line in events if "job_id" in line), None)
    if out.proc.returncode != 0 or job_id is None:
        raise RuntimeError(f"delegate submit exited {out.proc.returncode} (job {job_id})")
    # the job's own processes (wrapper, claude, MCP servers) go on after submit: let them end
    settle(f"DELEGATE_JOB_ID={job_id}", but_tmux=True)
    settle(f"DELEGATE_HOME={place.home}", but_tmux=True)
    lines = audit(place.home, job_id)
    requests = server.requests[seen:]
    turns = [r for r in requests if r.turn is not None]
    last = replied(turns[-1])

    def envelope(event: str) -> float | None:
        found = first(lines, lambda x: x.get("kind") == "published" and x.get("event") == event)
        return stamp(found["envelope"]["timestamp"]) if found else None

    def changed(status: str) -> float | None:
        found = first(
            lines, lambda x: x.get("kind") == "status_changed" and x.get("status") == status
        )
        return stamp(found["ts"]) if found else None

    def printed(event: str) -> float | None:
        return next((at for at, line in events if line.get("event") == event), None)

    def since(at: float | None, origin: float = began) -> float | None:
        return None if at is None else ms(at - origin)

    registered = first(lines, lambda x: x.get("kind") == "registered")
    conversation = first(lines, lambda x: x.get("kind") == "conversation")
    started = envelope("started")
    completed = envelope("completed")
    return {
        "total": ms(ended - began),
        "registered": since(stamp(registered["ts"])) if registered else None,
        "wrapper_started_event": since(started),
        "running_recorded": since(changed("running")),
        "started_printed": since(printed("started")),
        "first_request": since(requests[0].at),  # claude's HEAD probe
        "conversation_recorded": since(stamp(conversation["ts"])) if conversation else None,
        "first_model_request": since(turns[0].at),
        "last_reply_written": since(last),
        "wrapper_completed_event": since(completed),
        "completed_recorded": since(changed("completed")),
        "completed_printed": since(printed("completed")),
        "exit": ms(ended - began),
        "started_to_first_model_request": since(turns[0].at, started) if started else None,
        "last_reply_to_completed_event": since(completed, last),
        "last_reply_to_completed_recorded": since(changed("completed"), last),
        "last_reply_to_exit": ms(ended - last),
    }


def overhead(place: Place, n: int) -> dict[str, Any]:
    kinds: dict[str, Callable[[], dict[str, float | None]]] = {
        "bare_claude": lambda: bare_run(place),
        "delegate": lambda: delegate_run(place),
        "delegate_no_mcp": lambda: delegate_run(place, "--no-mcp"),
        # the MCP server warmed per job but no nursery of forked zygotes (issue 33, item 8)
        "delegate_no_zygote": lambda: delegate_run(place, env={"DELEGATE_MCP_WARM_S": "0"}),
    }
    runs: dict[str, list[dict[str, float | None]]] = {name: [] for name in kinds}
    for run in kinds.values():
        run()  # a warm-up each: claude's first start in a new HOME writes its config
    for _ in range(n):
        for name, run in kinds.items():
            runs[name].append(run())
    bare = p50([r["total"] for r in runs["bare_claude"]])
    result: dict[str, Any] = {"bare_claude": stats([r["total"] for r in runs["bare_claude"]])}
    for name in ("delegate", "delegate_no_mcp", "delegate_no_zygote"):
        figures = stats([r["total"] for r in runs[name]])
        ratio = figures["p50_ms"] / bare if bare else None
        diff = figures["p50_ms"] - bare if bare is not None else None
        figures["ratio_to_bare_p50"] = None if ratio is None else round(ratio, 3)
        figures["diff_to_bare_p50_ms"] = None if diff is None else round(diff, 1)
        pairs = zip(runs[name], runs["bare_claude"], strict=True)
        paired = [_minus(r["total"], b["total"]) for r, b in pairs]
        figures["paired_diff_p50_ms"] = p50(paired)  # each run minus the bare run beside it
        figures["meets_goal"] = (
            ratio is not None and diff is not None and ratio <= RATIO_GOAL and diff <= DIFF_GOAL_MS
        )
        result[name] = figures
    result["goal"] = f"p50 ratio <= {RATIO_GOAL:g} and p50 difference <= {DIFF_GOAL_MS:g} ms"
    result["breakdown_p50_ms"] = {
        name: {key: p50([r[key] for r in items]) for key in items[0]}
        for name, items in runs.items()
    }
    b, d, nm, nz = (result["breakdown_p50_ms"][k] for k in kinds)
    result["added_p50_ms"] = {
        name: {
            "before_first_model_request": _minus(
                x["first_model_request"], b["first_model_request"]
            ),
            "first_to_last_model_reply": _minus(
                _minus(x["last_reply_written"], x["first_model_request"]),
                _minus(b["last_reply_written"], b["first_model_request"]),
            ),
            "after_last_reply_to_exit": _minus(x["last_reply_to_exit"], b["last_reply_to_exit"]),
        }
        for name, x in (("delegate", d), ("delegate_no_mcp", nm), ("delegate_no_zygote", nz))
    }
    result["mcp_cost_p50_ms"] = {
        "total": _minus(d["total"], nm["total"]),
        "before_first_model_request": _minus(d["first_model_request"], nm["first_model_request"]),
        "zygote_gain_total": _minus(nz["total"], d["total"]),
        "zygote_gain_before_first_model_request": _minus(
            nz["first_model_request"], d["first_model_request"]
        ),
    }
    return result


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 1)


# -- part 2: approval latency ---------------------------------------------------------------------


class FileWatch:
    """Notes when each of `paths` first exists (a stat of the next one every millisecond)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = list(paths)
        self.seen: dict[Path, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        for path in self.paths:
            while not os.path.exists(path):
                if self._stop.is_set():
                    return
                time.sleep(POLL_S)
            self.seen[path] = time.time()

    def wait_for(self, path: Path, timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while path not in self.seen and time.monotonic() < deadline:
            time.sleep(POLL_S)
        return self.seen.get(path)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def bare_tool_runs(place: Place, n: int) -> dict[str, Any]:
    """For reference: a bare claude allowed Bash by its own settings runs the same calls;
    from each tool call's reply written to its file seen and to the next request."""
    server = place.server
    workdir = place.workdir()
    files = [workdir / f"approved-{i}" for i in range(n)]
    server.script(*(bash(f"touch {f.name}") for f in files), text("all done"))
    seen = len(server.requests)
    watch = FileWatch(files)
    argv = [str(CLAUDE), "-p", "--output-format", "stream-json", "--verbose"]
    try:
        _, out = start(
            [*argv, "--allowedTools=Bash", "Touch the files."], place.bare_env(), workdir
        )
        out.wait(RUN_TIMEOUT_S)
    finally:
        watch.stop()
    turns = turns_since(server, seen)
    to_file, to_next = [], []
    for i, path in enumerate(files):
        if i + 1 < len(turns) and path in watch.seen:
            to_file.append(ms(watch.seen[path] - replied(turns[i])))
            to_next.append(ms(turns[i + 1].at - replied(turns[i])))
    return {
        "reply_to_file": stats(to_file),
        "reply_to_next_request": stats(to_next),
    }


def _listed(place: Place, job_id: str, timeout: float) -> dict[str, Any]:
    """The job's request once `delegate approvals --json` lists it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = subprocess.run(
            [DELEGATE, "approvals", "--json"],
            env=place.delegate_env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        for raw in listed.stdout.splitlines():  # one JSON line per waiting request
            with contextlib.suppress(ValueError):
                item = json.loads(raw)
                if isinstance(item, dict) and item.get("job_id") == job_id:
                    return item
        if job_status(place.home, job_id) in ("completed", "error", "cancelled"):
            raise RuntimeError(f"job {job_id} ended before asking")
        time.sleep(0.01)
    raise RuntimeError(f"job {job_id} asked nothing in {timeout:g} s")


def approval(place: Place, n: int) -> dict[str, Any]:
    server = place.server
    workdir = place.workdir()
    files = [workdir / f"approved-{i}" for i in range(n)]
    server.script(*(bash(f"touch {f.name}") for f in files), text("all done"))
    seen = len(server.requests)
    env = place.delegate_env()
    argv = [DELEGATE, "submit", "--no-wait", "--agent", "claude", "--prompt", "Touch the files."]
    submitted = subprocess.run(
        [*argv, "--workdir", str(workdir)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    job_id = submitted.stdout.strip()
    watch = FileWatch(files)
    approve_started: list[float] = []
    to_file: list[float | None] = []
    approve_exit: list[float | None] = []
    asked_at: list[float] = []
    try:
        for path in files:
            request = _listed(place, job_id, RUN_TIMEOUT_S)
            asked_at.append(stamp(str(request["asked_at"])))
            began = time.time()
            approve_started.append(began)
            subprocess.run(
                [DELEGATE, "approve", job_id], env=env, capture_output=True, check=True, timeout=60
            )
            approve_exit.append(ms(time.time() - began))
            made = watch.wait_for(path, 30)
            to_file.append(None if made is None else ms(made - began))
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while job_status(place.home, job_id) not in ("completed", "error", "cancelled"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"job {job_id} did not end")
            time.sleep(0.02)
    finally:
        watch.stop()
    settle(f"DELEGATE_JOB_ID={job_id}", but_tmux=True)
    turns = turns_since(server, seen)
    lines = audit(place.home, job_id)
    sent = [stamp(x["ts"]) for x in lines if x.get("kind") == "approval_sent"]
    decided = [stamp(x["ts"]) for x in lines if x.get("kind") == "permission_decided"]
    to_next, to_sent, to_decided, hook_way = [], [], [], []
    for i, began in enumerate(approve_started):
        if i + 1 < len(turns):
            to_next.append(ms(turns[i + 1].at - began))
            hook_way.append(ms(asked_at[i] - replied(turns[i])))
        to_sent.append(ms(sent[i] - began) if i < len(sent) else None)
        to_decided.append(ms(decided[i] - began) if i < len(decided) else None)
    figures = stats(to_file)
    return {
        "approve_to_file": {
            **figures,
            "goal": f"p50 <= {APPROVAL_GOAL_MS:g} ms",
            "meets_goal": figures.get("p50_ms", float("inf")) <= APPROVAL_GOAL_MS,
        },
        "approve_to_next_model_request": stats(to_next),
        "approve_exit": stats(approve_exit),
        "approve_to_approval_sent": stats(to_sent),
        "approve_to_permission_decided": stats(to_decided),
        "tool_call_reply_to_request_written": stats(hook_way),
        "job_status": job_status(place.home, job_id),
        "bare_claude_allowed_bash": bare_tool_runs(place, n),
    }


# -- main -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def places(keep: bool = False) -> Iterator[Callable[[str], Place]]:
    """Places under one temporary folder (short: tmux's socket path has a limit), each closed
    and the folder removed at the end; and the scripted server."""
    root = Path(tempfile.mkdtemp(prefix="dlg-ra-", dir="/tmp"))
    made: list[Place] = []
    server = TimedServer()
    server.start()
    try:

        def place(name: str) -> Place:
            made.append(Place(root, name, server))
            return made[-1]

        yield place
    finally:
        for each in made:
            with contextlib.suppress(Exception):
                each.close()
        server.stop()
        if keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=11)
    parser.add_argument("--only", choices=("overhead", "approval"))
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    if not CLAUDE.exists():
        sys.exit(f"{CLAUDE} is missing: `make agents` installs it")
    precompile()
    version = subprocess.run([str(CLAUDE), "--version"], capture_output=True, text=True)
    result: dict[str, Any] = {
        "benchmark": "delegate with the real claude CLI against the scripted Anthropic server",
        "claude": version.stdout.strip(),
        "runs_each": args.n,
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
    }
    with places(args.keep) as place:
        if args.only in (None, "overhead"):
            result["overhead"] = overhead(place("overhead"), args.n)
        if args.only in (None, "approval"):
            result["approval"] = approval(place("approval"), args.n)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["python"] = sys.version.split()[0]
    result["cpus"] = os.cpu_count()
    emit(result)


if __name__ == "__main__":
    main()
