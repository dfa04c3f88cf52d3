"""Messages between agents on a real coord.db: at-least-once delivery through receivers killed
with SIGKILL, idempotent sends, blobs, `recv --wait` waking on a send, and JSONL exports that
write every line exactly once even when killed mid-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from delegate.coord import messages
from delegate.coord.store import CoordStore

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli

SENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from delegate.coord import messages
    from delegate.coord.store import CoordStore

    home, me, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = CoordStore(Path(home) / "coord.db")
    for n in range(count):
        messages.send(store, sender=me, to="inbox", type_="work", data={"from": me, "n": n})
    """
)

# Receives in batches of 10 and logs every delivery before handling it; acknowledges every other
# batch only, so an unacknowledged batch is delivered again after a kill.
RECEIVER = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from delegate.coord import messages
    from delegate.coord.store import CoordStore

    home, log_path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = CoordStore(Path(home) / "coord.db")
    log = open(log_path, "a")
    def note(line):
        log.write(line + "\\n"); log.flush(); os.fsync(log.fileno())
    batch_no = 0
    while True:
        batch = messages.receive(store, "inbox", wait_s=5, limit=10)
        if not batch:
            break
        for m in batch:
            note(f"recv {m['seq']} {m['data']['from']} {m['data']['n']}")
        batch_no += 1
        if batch_no % 2 == 0:
            messages.ack(store, "inbox", batch[-1]["seq"])
            note(f"ack {batch[-1]['seq']}")
    """
)


def test_four_senders_one_receiver_killed_twice_loses_nothing(home: Path, tmp_path: Path):
    log_path = tmp_path / "received.log"
    env = {**os.environ, "DELEGATE_HOME": str(home)}
    senders = [
        subprocess.Popen([sys.executable, "-c", SENDER, str(home), f"s{i}", "250"], env=env)
        for i in range(4)
    ]

    def start_receiver() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-c", RECEIVER, str(home), str(log_path), "1000"], env=env
        )

    def deliveries() -> int:
        return log_path.read_text().count("recv ") if log_path.exists() else 0

    receiver = start_receiver()
    for kills in (1, 2):
        retry_until(lambda k=kills: deliveries() >= 300 * k, timeout=120)
        receiver.send_signal(signal.SIGKILL)  # mid-batch, between a delivery and its ack
        receiver.wait(timeout=10)
        receiver = start_receiver()
    assert [s.wait(timeout=120) for s in senders] == [0] * 4
    # after the last send the receiver drains everything and stops on a quiet 5 s
    assert receiver.wait(timeout=120) == 0
    # one more receiver finishes what the last one left unacknowledged
    final = start_receiver()
    assert final.wait(timeout=60) == 0

    acked = 0
    seen: dict[int, int] = {}
    payloads = set()
    for line in log_path.read_text().splitlines():
        word, seq, *rest = line.split()
        if word == "ack":
            acked = max(acked, int(seq))
            continue
        number = int(seq)
        # never a message it had already acknowledged
        assert number > acked, f"seq {number} delivered again after ack {acked}"
        seen[number] = seen.get(number, 0) + 1
        payloads.add((rest[0], int(rest[1])))
    assert payloads == {(f"s{i}", n) for i in range(4) for n in range(250)}  # none lost
    assert len(seen) == 1000


def test_send_recv_ack_cli_idempotent_ids_blobs_and_broadcasts(home: Path):
    def cli(*args: str):
        return run_cli(home, "msg", *args)

    first = cli(
        "send",
        "--from",
        "a",
        "--to",
        "b",
        "--type",
        "task",
        "--id",
        "m-1",
        "--data",
        '{"file": "x.py"}',
        "--json",
    )
    assert first.returncode == 0, first.stderr
    again = cli("send", "--from", "a", "--to", "b", "--type", "task", "--id", "m-1", "--json")
    assert json.loads(again.stdout) == {**json.loads(first.stdout), "duplicate": True}
    big = {"text": "x" * 10_000}
    sent = cli("send", "--from", "a", "--to", "b", "--type", "big", "--data", json.dumps(big))
    assert sent.stdout.strip() == "2"
    blobs = list((home / "coord-blobs").iterdir())
    assert len(blobs) == 1 and blobs[0].name.startswith("sha256-")
    assert cli("send", "--from", "a", "--type", "hello-all").returncode == 0  # broadcast
    assert cli("send", "--from", "c", "--to", "a", "--type", "not-for-b").returncode == 0
    got = json_lines(cli("recv", "--agent", "b", "--json").stdout)
    assert [(m["seq"], m["type"]) for m in got] == [(1, "task"), (2, "big"), (3, "hello-all")]
    assert got[1]["data"] == big and got[0]["data"] == {"file": "x.py"}
    # the sender does not get its own broadcast back
    assert [m["type"] for m in json_lines(cli("recv", "--agent", "a", "--json").stdout)] == [
        "not-for-b"
    ]
    again = json_lines(cli("recv", "--agent", "b", "--json").stdout)
    assert [m["seq"] for m in again] == [1, 2, 3]  # received is not acknowledged
    assert cli("ack", "--agent", "b", "2").stdout.strip() == "2"
    assert cli("ack", "--agent", "b", "1").stdout.strip() == "2"  # never backwards
    assert [m["seq"] for m in json_lines(cli("recv", "--agent", "b", "--json").stdout)] == [3]
    assert cli("ack", "--agent", "b", "3").returncode == 0
    empty = cli("recv", "--agent", "b")
    assert empty.returncode == 1 and empty.stdout == ""
    for bad in (
        ("ack", "--agent", "b", "99"),
        ("send", "--from", "a", "--type", "t", "--data", "{not json"),
        ("send", "--from", "a"),
    ):
        result = cli(*bad)
        assert result.returncode == 64, (bad, result.stderr)
        assert_one_line_error(result)


def test_recv_wait_wakes_on_a_send(home: Path):
    store = CoordStore(home / "coord.db")
    waiter = subprocess.Popen(
        [sys.executable, "-m", "delegate", "msg", "recv", "--agent", "b", "--wait", "60", "--json"],
        env={**os.environ, "DELEGATE_HOME": str(home)},
        stdout=subprocess.PIPE,
        text=True,
    )
    retry_until(lambda: store.read("SELECT COUNT(*) FROM messages")[0][0] == 0)
    time.sleep(0.5)  # let the waiter get past its start-up and into its wait
    sent_at = time.monotonic()
    messages.send(store, sender="a", to="b", type_="ping")
    out, _ = waiter.communicate(timeout=30)
    woke_after = time.monotonic() - sent_at
    assert waiter.returncode == 0 and json.loads(out)["type"] == "ping"
    assert woke_after < 5  # far from the 60 s it would wait (the bench measures milliseconds)


EXPORTER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from delegate.coord import export
    from delegate.coord.store import CoordStore

    store = CoordStore(Path(sys.argv[1]) / "coord.db")
    export.BATCH = 200
    export.export(store, "messages", export.message_rows(store), Path(sys.argv[2]))
    """
)


def test_export_killed_mid_way_then_rerun_writes_each_message_once(home: Path, tmp_path: Path):
    store = CoordStore(home / "coord.db")
    total = 20_000
    with store.write() as conn:  # many messages at once, as senders would have left them
        conn.executemany(
            "INSERT INTO messages (id, ts_ms, from_agent, to_agent, type, payload)"
            " VALUES (?, ?, 'a', 'b', 't', ?)",
            [(f"m{n}", n, json.dumps({"n": n})) for n in range(total)],
        )
    out = tmp_path / "messages.jsonl"
    env = {**os.environ, "DELEGATE_HOME": str(home)}
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER, str(home), str(out)], env=env)
    retry_until(lambda: out.exists() and out.stat().st_size > 0, timeout=60, interval=0.001)
    exporter.send_signal(signal.SIGKILL)
    exporter.wait(timeout=10)
    partial = out.read_bytes().count(b"\n")
    assert 0 < partial < total  # killed mid-way
    # a crash between a batch's write and its record leaves a tail the next run cuts off
    with out.open("ab") as handle:
        handle.write(b'{"seq": 1, "torn": tr')
    rerun = run_cli(home, "msg", "export", "--out", str(out))
    assert rerun.returncode == 0, rerun.stderr
    seqs = [json.loads(line)["seq"] for line in out.read_text().splitlines()]
    assert seqs == list(range(1, total + 1))
    # nothing new: nothing written; new messages: only they
    assert run_cli(home, "msg", "export", "--out", str(out)).stdout.startswith("0 new line(s)")
    messages.send(store, sender="a", type_="late")
    run_cli(home, "msg", "export", "--out", str(out))
    lines = out.read_text().splitlines()
    assert len(lines) == total + 1 and json.loads(lines[-1])["type"] == "late"
    # to stdout: what is new since the last stdout export
    first = json_lines(run_cli(home, "msg", "export").stdout)
    assert len(first) == total + 1
    assert run_cli(home, "msg", "export").stdout == ""
    # a file cut short by hand is refused, not silently re-filled
    out.write_text(lines[0] + "\n")
    refused = run_cli(home, "msg", "export", "--out", str(out))
    assert refused.returncode != 0 and "shorter than the last export" in refused.stderr
    assert_one_line_error(refused)


def test_bus_export_writes_job_events(home: Path, tmp_path: Path):
    from delegate.services.jobs.publish import publish_event
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home)})
    job, _ = state.registry.register()
    publish_event(state, job.job_id, "started")
    publish_event(state, job.job_id, "progress", detail="half way")
    out = tmp_path / "events.jsonl"
    result = run_cli(home, "bus", "export", "--out", str(out))
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["job_id"], r["event"]["event"]) for r in rows] == [
        (job.job_id, "started"),
        (job.job_id, "progress"),
    ]
    publish_event(state, job.job_id, "completed")
    run_cli(home, "bus", "export", "--out", str(out))
    assert [json.loads(line)["event"]["event"] for line in out.read_text().splitlines()] == [
        "started",
        "progress",
        "completed",
    ]
    mqtt = run_cli(home, "bus", "export", env={"DELEGATE_BUS": "mqtt://127.0.0.1:1"})
    assert mqtt.returncode == 64 and "reads a SQLite bus" in mqtt.stderr
