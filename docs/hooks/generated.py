"""MkDocs hook: fills the generated parts of the pages (`<!-- generated: NAME -->` markers)
at build time, from the code, with scripts/gen_docs.py. Nothing generated is committed, so
nothing generated can be stale."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from typing import Any

# typer imports names click 8.2+ deprecates; the build's log need not say so on every page
warnings.filterwarnings("ignore", "'click.utils.get_", DeprecationWarning)

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_docs.py"
_spec = importlib.util.spec_from_file_location("gen_docs", _SCRIPT)
assert _spec is not None and _spec.loader is not None
gen_docs = importlib.util.module_from_spec(_spec)
sys.modules["gen_docs"] = gen_docs
_spec.loader.exec_module(gen_docs)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return gen_docs.fill(markdown)
