"""Writing a report into a folder: JSON, the HTML page, or one Parquet dataset per table.

JSON and Parquet keep the figures as computed (seconds, UTC); the page is for people.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import Any

from delegate.report.common import Report, to_json
from delegate.report.page import to_html


def write(
    report: Report,
    frames: dict[str, Any] | None,
    fmt: str,
    out: Path,
    *,
    logs: str | None = None,
    generated_at: datetime | None = None,
    tz: tzinfo | None = None,
) -> list[Path]:
    """Write `report` as `fmt` into `out`; return the paths written. `logs` is the folder (or
    URI) the report read, for the page's links to each job's logs."""
    out.mkdir(parents=True, exist_ok=True)
    generated_at = generated_at or datetime.now(UTC)
    if fmt == "json":
        path = out / "report.json"
        data = {**to_json(report), "generated_at": generated_at.astimezone(UTC).isoformat()}
        path.write_text(json.dumps(data, indent=2, sort_keys=True))
        return [path]
    if fmt == "html":
        path = out / "report.html"
        page = to_html(report, logs=logs, generated_at=generated_at, tz=tz)
        path.write_text(page, encoding="utf-8")
        return [path]
    if fmt == "parquet":
        assert frames is not None
        written = []
        for name, frame in frames.items():
            path = out / f"{name}.parquet"
            frame.write.mode("overwrite").parquet(str(path))
            written.append(path)
        return written
    raise ValueError(f"unknown format {fmt!r}")
