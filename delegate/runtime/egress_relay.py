"""The relay inside a sandboxed job's box (`network = "allowlist"`): it listens on
127.0.0.1:RELAY_PORT, hands each connection to the job's egress proxy through the Unix socket
bound into the box (runtime/egress), runs the agent, and ends with the agent's exit status.

    python -m delegate.runtime.egress_relay SOCKET -- AGENT ARGV...

Kept to the standard library's smallest parts (socket, threading, os): it starts before every
sandboxed agent, so its start-up is part of every such job's.
"""

import os
import socket
import sys
import threading

RELAY_PORT = 3128
CHUNK = 256 * 1024


def pump(source: socket.socket, target: socket.socket, counted: list[int], at: int) -> None:
    """Copy `source` to `target` until `source` ends, then end `target`'s sending side. The
    bytes go socket -> pipe -> socket inside the kernel (splice): Python never holds them."""
    pipe_r, pipe_w = os.pipe()
    try:
        while moved := os.splice(source.fileno(), pipe_w, CHUNK):
            left = moved
            while left:
                left -= os.splice(pipe_r, target.fileno(), left)
            counted[at] += moved
    except OSError:
        pass
    finally:
        os.close(pipe_r)
        os.close(pipe_w)
    try:  # noqa: SIM105 - contextlib would add to the relay's start-up
        target.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def splice(one: socket.socket, other: socket.socket) -> tuple[int, int]:
    """Copy both ways until both ends are done: (bytes one -> other, bytes other -> one)."""
    counted = [0, 0]
    back = threading.Thread(target=pump, args=(other, one, counted, 1), daemon=True)
    back.start()
    pump(one, other, counted, 0)
    back.join()
    return counted[0], counted[1]


def relay(socket_path: str, argv: list[str]) -> int:
    listener = socket.create_server(("127.0.0.1", RELAY_PORT), backlog=64)

    def hand_over(conn: socket.socket) -> None:
        with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as proxy:
            try:
                proxy.connect(socket_path)
            except OSError:
                return
            splice(conn, proxy)

    def accept() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=hand_over, args=(conn,), daemon=True).start()

    # the agent first, while this process has one thread (connections wait in the backlog)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)  # noqa: S606 - an argv list, never a shell string
        except OSError as exc:
            print(f"delegate: the agent could not start: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    threading.Thread(target=accept, daemon=True).start()
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m delegate.runtime.egress_relay SOCKET -- ARGV...", file=sys.stderr)
        return 64
    return relay(args[0], args[2:])


if __name__ == "__main__":
    sys.exit(main())
