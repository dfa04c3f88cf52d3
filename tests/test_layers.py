"""The layers import-linter keeps (`make lint` runs it): they hold today, and an import that
runs back up breaks them, so the check is one that can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    """lint-imports with the project's contracts over the `delegate` package found in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(
        ROOT / "delegate", tree / "delegate", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tree


def test_the_layers_hold(tmp_path: Path):
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_upward_import_breaks_them(tmp_path: Path):
    tree = _copy(tmp_path)
    target = tree / "delegate" / "services" / "ps.py"
    target.write_text(target.read_text() + "\nfrom ..cli import app  # deliberately upward\n")
    result = _lint(tree)
    assert result.returncode != 0, result.stdout
    assert "delegate.services.ps -> delegate.cli.app" in result.stdout
    assert "BROKEN" in result.stdout
