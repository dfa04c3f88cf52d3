"""`[sandbox]` of delegate.toml: whether jobs run sandboxed by default, what of the hidden home
they may read or write, and their network (core/sandbox).

    [sandbox]
    default = true                 # every job, unless its profile or `--no-sandbox` says not
    read = ["~/.gitconfig"]        # read-only inside
    write = ["~/.claude"]          # writable inside (an agent's own config and sessions)
    network = "allowlist"          # the default; "none": no network at all; "host": the machine's
    allow_hosts = ["*.githubusercontent.com"]   # with the profile's own API hosts
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from delegate.core.egress import check_patterns
from delegate.core.errors import ConfigError
from delegate.core.sandbox import NETWORKS


class SandboxSettings(NamedTuple):
    default: bool = False
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: str = "allowlist"  # no network but our egress proxy (DESIGN 21)
    allow_hosts: tuple[str, ...] = ()


def _paths(table: Mapping[str, Any], key: str, where: str, home: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise ConfigError(f"{where}: {key} must be a list of paths")
    found = []
    for path in value:
        full = os.path.normpath(os.path.join(home, path[2:]) if path.startswith("~/") else path)
        if not full.startswith("/"):
            raise ConfigError(f"{where}: {key}: {path!r} is not an absolute path or ~/...")
        found.append(full)
    return tuple(found)


def sandbox_settings(
    config: Mapping[str, Any], source: Path, env: Mapping[str, str]
) -> SandboxSettings:
    """`[sandbox]`, its `~/` paths in the submitter's home (`HOME` of `env`)."""
    table = config.get("sandbox")
    if table is None:
        return SandboxSettings()
    where = f"{source} [sandbox]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = table.keys() - {"default", "read", "write", "network", "allow_hosts"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    default = table.get("default", False)
    if not isinstance(default, bool):
        raise ConfigError(f"{where}: default must be true or false")
    network = table.get("network", "allowlist")
    if network not in NETWORKS:
        raise ConfigError(f"{where}: network must be one of {', '.join(NETWORKS)}")
    hosts = table.get("allow_hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise ConfigError(f"{where}: allow_hosts must be a list of host names")
    try:
        allow = check_patterns(hosts)
    except ValueError as exc:
        raise ConfigError(f"{where}: allow_hosts: {exc}") from None
    home = env.get("HOME") or os.path.expanduser("~")
    read, write = _paths(table, "read", where, home), _paths(table, "write", where, home)
    return SandboxSettings(default, read, write, network, allow)
