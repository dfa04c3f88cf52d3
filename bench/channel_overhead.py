"""Wrapper overhead on a claude-stream transcript of 10,000 lines: lines parsed per second and
CPU per line, against the same copy with no channel listening (agent.log and the pane only).

The transcript is what `claude -p --output-format stream-json --verbose` writes: an init line,
assistant and user (tool) messages, and a result line, which the wrapper publishes as
`completed` on a real SQLite bus with the registry and audit trail beside it.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time

from _common import emit, temp_home


def transcript(lines: int) -> bytes:
    out = [{"type": "system", "subtype": "init", "session_id": "bench-conv", "tools": ["Bash"]}]
    for i in range(lines - 2):
        if i % 2:
            out.append(
                {
                    "type": "assistant",
                    "message": {"content": [{"type": "text", "text": f"step {i} " + "x" * 200}]},
                    "session_id": "bench-conv",
                }
            )
        else:
            out.append(
                {
                    "type": "user",
                    "message": {
                        "content": [
                            {"type": "tool_result", "content": "ok " * 40, "is_error": False}
                        ]
                    },
                }
            )
    out.append(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": lines // 2,
            "duration_ms": 1000,
            "total_cost_usd": 1.5,
            "usage": {"input_tokens": 1, "output_tokens": 1},
            "result": "done",
        }
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in out)


def run(data: bytes, listening: bool, home) -> tuple[float, float, int]:
    from delegate.runtime.wrapper import ChannelListener, _copy_output
    from delegate.services.jobs.publish import publish_event
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home)})
    job, _ = state.registry.register()
    publish_event(state, job.job_id, "started")
    listener = ChannelListener(state, job.job_id, "claude-stream") if listening else None
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with os.fdopen(write_fd, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=write)
    log_path = state.audit.job_dir(job.job_id, create=True) / "agent.log"
    real_stdout = sys.stdout
    with open(os.devnull, "wb") as pane:
        sys.stdout = io.TextIOWrapper(pane)  # the pane
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            writer.start()
            with os.fdopen(read_fd, "rb") as source:
                _copy_output(source, log_path, listener)
            if listener is not None:
                listener.finish()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            sys.stdout = real_stdout
    writer.join()
    events = len(state.audit.read_events(job.job_id, kind="published"))
    return wall, cpu, events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000)
    args = parser.parse_args()
    data = transcript(args.lines)
    with temp_home() as plain_home, temp_home() as channel_home:
        plain_wall, plain_cpu, _ = run(data, False, plain_home)
        wall, cpu, events = run(data, True, channel_home)
    emit(
        {
            "benchmark": "wrapper on a claude-stream transcript (copy + parse + publish)",
            "lines": args.lines,
            "bytes": len(data),
            "lines_per_s": round(args.lines / wall),
            "cpu_us_per_line": round(cpu / args.lines * 1e6, 1),
            "copy_only_lines_per_s": round(args.lines / plain_wall),
            "copy_only_cpu_us_per_line": round(plain_cpu / args.lines * 1e6, 1),
            "events_published": events,
        }
    )


if __name__ == "__main__":
    main()
