"""A job's sandbox as bubblewrap's command line (pure: the wrapper runs it, services decide it).

The agent and everything it starts get new mount, PID, IPC, UTS and network namespaces; the
system is read-only; the submitter's home and the state dir are empty folders (tmpfs) with only
what the job needs bound back: its workdir (writable), its own log folder (its prompt, settings
and publish socket, read-only), the toolkit (read-only: `delegate publish` runs inside), and
what `[sandbox] read` / `write` list. `/tmp` is the job's own. The network is none, the
host's (`network = "host"`), or only the hosts its egress proxy allows (`allowlist`, served by
runtime/egress through a socket bound in).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

NETWORKS = ("none", "allowlist", "host")


class Box(NamedTuple):
    """What a sandboxed job sees, as recorded in its launch spec (`launch.sandbox`)."""

    bwrap: str
    hide: tuple[str, ...]  # folders made empty: the submitter's home, the state dir
    read: tuple[str, ...] = ()  # bound back read-only (missing ones skipped)
    write: tuple[str, ...] = ()  # bound back writable (the workdir first)
    network: str = "none"
    allow_hosts: tuple[str, ...] = ()  # `allowlist`: what its egress proxy lets through

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self._asdict().items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Box:
        def paths(name: str) -> tuple[str, ...]:
            value = data.get(name) or ()
            return tuple(str(p) for p in value if isinstance(p, str) and p.startswith("/"))

        network = data.get("network")
        hosts = data.get("allow_hosts") or ()
        return cls(
            bwrap=str(data["bwrap"]),
            hide=paths("hide"),
            read=paths("read"),
            write=paths("write"),
            network=network if network in NETWORKS else "none",
            allow_hosts=tuple(str(h) for h in hosts if isinstance(h, str)),
        )


def bwrap_argv(box: Box, argv: Iterable[str], *, workdir: str) -> list[str]:
    """The agent's command line inside `box`, starting in `workdir`. Later mounts lie over
    earlier ones: the system first, then the hidden folders, then what is bound back."""
    out = [box.bwrap, "--die-with-parent", "--unshare-all"]
    if box.network == "host":
        out.append("--share-net")
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for folder in box.hide:
        out += ["--tmpfs", folder]
    out += ["--tmpfs", "/tmp"]  # noqa: S108 - the job's own /tmp, a fresh tmpfs inside
    for path in box.read:
        out += ["--ro-bind-try", path, path]
    for path in box.write:
        out += ["--bind-try", path, path]
    return [*out, "--chdir", workdir, "--", *argv]
