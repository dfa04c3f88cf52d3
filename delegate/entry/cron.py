"""The fast path of `delegate cron run NAME` for a window whose job already exists: the common
case of an overlapping or retried run. It reads the window hint the last full run left in
`cron.json`, the idempotency key file and the job record, and prints the one line, without
typer, croniter (~45 ms to import) or the registry's machinery. Anything else, including a job
registered but never launched, goes the full way (services/cron.py).
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

from delegate.core import fastjson as json


def existing_line(home: str, name: str, now: float) -> str | None:
    """The run's line when its window's job already exists and is launched, else None."""
    try:
        with open(os.path.join(home, "cron.json"), "rb") as handle:
            entry = json.loads(handle.read()).get(name)
        hint = entry["window_hint"]
        if not hint["from_ts"] <= now + 1.0 < hint["until_ts"]:
            return None  # another window: croniter decides
        key = f"{name}-{hint['window']}"
        digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
        with open(os.path.join(home, "jobs", "keys", digest), "rb") as handle:
            job_id = handle.read().decode("ascii").strip()
        if len(job_id) != 8 or not all(c in "0123456789abcdef" for c in job_id):
            return None
        with open(os.path.join(home, "jobs", f"{job_id}.json"), "rb") as handle:
            status = json.loads(handle.read())["status"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if status in ("pending", "queued"):
        return None  # maybe never launched: the full run looks after it
    return f"{job_id} {status} (already submitted for window {hint['window']})"


def main_cron_run(name: str) -> int:
    home = os.environ.get("DELEGATE_HOME")
    line = existing_line(home, name, time.time()) if home else None
    if line is None:
        return -1  # the caller takes the full path
    sys.stdout.write(line + "\n")
    return 0
