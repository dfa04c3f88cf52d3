"""An agent that reads the pane's terminal gets it before its command begins.

The wrapper starts the agent in a process group of its own and then makes that group the
terminal's foreground group. An agent that reads its terminal before that (a busy machine can
let it) reads from the background: in a tmux pane, where SIGTTIN is ignored, that read fails at
once, and a shell agent's `read` took an empty line (seen under a loaded CI run). So such an
agent starts held, stopped, until it has the terminal. Here the hand-over is made half a second
late on purpose, at a real pseudo-terminal, once the old way and once the held way.
"""

from __future__ import annotations

import os
import sys

from .pty_run import run_in_pty

# Runs the wrapper's agent start at this pty (made the controlling terminal), with the terminal
# handed over late; argv[1]: "held" (the wrapper's way) or "direct" (the old way).
LATE_HAND_OVER = """
import fcntl, os, signal, subprocess, sys, termios, time
fcntl.ioctl(0, termios.TIOCSCTTY, 0)
signal.signal(signal.SIGTTIN, signal.SIG_IGN)  # as in a tmux pane
from delegate.runtime import wrapper
given = wrapper._give_terminal
def late(pgid):
    time.sleep(0.5)  # the wrapper, slow on a busy machine
    given(pgid)
wrapper._give_terminal = late
held = sys.argv[1] == "held"
agent = wrapper._start_agent(
    ["/bin/sh", "-c", 'echo reading; IFS= read -r line; echo "got:$line"'],
    on_terminal=held,
    env=dict(os.environ),
    process_group=0,
)
if not held:
    late(agent.pid)
sys.exit(agent.wait())
"""


def _run(way: str) -> str:
    typed: list[bool] = []

    def type_hello(text: str) -> bytes | None:
        if "reading" in text and not typed:
            typed.append(True)
            return b"hello\r"
        return None

    shown = run_in_pty(
        [sys.executable, "-c", LATE_HAND_OVER, way],
        env=dict(os.environ),
        type_keys=type_hello,
        timeout=30,
    )
    assert shown.returncode == 0, shown
    return shown.output


def test_an_agent_reading_its_terminal_at_once_waits_for_it():
    assert "got:hello" in _run("held")


def test_without_the_hold_the_same_read_comes_back_empty():
    # what the hold prevents: the agent read before it had the terminal, and got nothing
    out = _run("direct")
    assert "got:\n" in out and "got:hello" not in out, out
