"""The registry's idempotency key files: `keys/<sha256 of the key>` holds the id of the job the
key names.

Here alone, with nothing heavier than hashlib, so that the registry and the typer-free
`cron run` (which cannot afford the registry's imports, ~65 ms) find a key's job the same way.
"""

from __future__ import annotations

import os

KEYS_DIR = "keys"


def key_path(registry_root: str | os.PathLike[str], idempotency_key: str) -> str:
    """The file of `idempotency_key` under the registry folder `registry_root`."""
    import hashlib  # OpenSSL's _hashlib (~4 ms): only when a key is looked up, not per import

    digest = hashlib.sha256(idempotency_key.encode("utf-8")).hexdigest()
    return os.path.join(registry_root, KEYS_DIR, digest)


def job_id_for_key(registry_root: str | os.PathLike[str], idempotency_key: str) -> str:
    """The job id the key's file holds, stripped and not yet checked (callers validate it
    before building a path from it). FileNotFoundError when the key was never used."""
    with open(key_path(registry_root, idempotency_key), "rb") as handle:
        return handle.read().decode("utf-8", "replace").strip()
