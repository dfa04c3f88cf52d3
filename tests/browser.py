"""The system Chromium the browser tests drive through Playwright (headless), and where their
screenshots are kept (`make` installs Chromium; `.cache/` is ignored by git)."""

from __future__ import annotations

from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / ".cache" / "artifacts"
