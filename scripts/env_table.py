"""Write the README's table of environment variables from their declaration
(delegate/config/settings.py: ENV_VARS); with --check, only say whether it is up to date.

    .venv/bin/python scripts/env_table.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from delegate.config.settings import env_table

README = Path(__file__).resolve().parent.parent / "README.md"
SECTION = "\n## Settings\n\n"


def with_table(text: str) -> str:
    """`text` (the README) with the table that opens its Settings section replaced."""
    head, rest = text.split(SECTION, 1)
    lines = rest.splitlines(keepends=True)
    table_end = next((i for i, line in enumerate(lines) if not line.startswith("|")), len(lines))
    return head + SECTION + env_table() + "".join(lines[table_end:])


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    wanted = with_table(text)
    if "--check" in argv:
        if wanted != text:
            sys.stderr.write("README.md: the Settings table differs from ENV_VARS\n")
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
