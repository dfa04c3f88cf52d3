"""Imports sit at the top of their module. One inside a function is there on purpose, to keep a
heavy library (typer, rich, paho, pyspark, croniter, ...) or a module a fast path does without
out of a process that does not use it, and says so: a comment on its line or on the line above
(a bare `# noqa` or `# type: ignore` is not a reason). Checked by reading the package's source
with `ast`, so neither a rename nor an `import ... as` hides one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "delegate"
PRAGMA = re.compile(r"#\s*(noqa\b[:\w, ]*|type:\s*ignore(\[[^\]]*\])?)")


def _reason(line: str) -> bool:
    """Whether `line` carries a comment that is more than a linter's or type checker's pragma."""
    _, sharp, comment = line.partition("#")
    if not sharp:
        return False
    return bool(PRAGMA.sub("", "#" + comment).strip("# \t"))


def unexplained_imports(source: str, name: str = "<source>") -> list[str]:
    """`name:line: import` for each function-level import without a reason beside or above it."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if not isinstance(inner, ast.Import | ast.ImportFrom):
                continue
            at = inner.lineno - 1
            above = lines[at - 1].strip() if at > 0 else ""
            if _reason(lines[at]) or (above.startswith("#") and _reason(above)):
                continue
            found.append(f"{name}:{inner.lineno}: {ast.unparse(inner)}")
    return sorted(set(found))


def test_every_import_inside_a_function_says_why():
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        unexplained += unexplained_imports(path.read_text(), str(relative))
    assert unexplained == [], "move these to the top, or say what they defer:\n" + "\n".join(
        unexplained
    )


PLANTED = """
import os

def hoistable():
    from delegate.core.errors import say

    say(os.getcwd())

def pragma_only():
    import pyspark  # noqa: F401

def explained_beside():
    import typer  # typer: only when a command runs

def explained_above():
    # rich: only when a table is printed
    from rich.table import Table

class Holder:
    def method(self):
        import json as renamed
        return renamed
"""


def test_the_scan_catches_a_planted_import_and_accepts_explained_ones():
    assert unexplained_imports(PLANTED, "planted.py") == [
        "planted.py:10: import pyspark",
        "planted.py:21: import json as renamed",
        "planted.py:5: from delegate.core.errors import say",
    ]


def test_a_pragma_is_not_a_reason_but_a_reason_after_one_is():
    assert not _reason("import x  # noqa: F401")
    assert not _reason("import x  # type: ignore[import-untyped]")
    assert _reason("import x  # type: ignore[import-untyped]  # x: only for reports")
    assert _reason("# x: only for reports")
    assert not _reason("import x")
