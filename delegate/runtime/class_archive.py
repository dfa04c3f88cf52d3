"""`python -m delegate.runtime.class_archive ARCHIVE`: make the report JVM's class archive
(services/class_archive) and put it at ARCHIVE.

A small report on generated logs runs in a child process whose JVM dumps the classes it loaded
as it exits (the dump needs the JVM gone, so not in this process); the archive is then moved
into place in one rename, so a report never maps a half-written one. `--dump TARGET` is that
child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from delegate.config.settings import HOME_ENV, process_env
from delegate.report.generator import Spec, generate
from delegate.services import class_archive
from delegate.services.report import check_requirements, run_report
from delegate.services.state import State

SAMPLE_JOBS = 20  # enough jobs for every table of the report to load its classes


def dump(target: Path) -> int:
    """Run a small report whose JVM writes its classes to `target` when it exits."""
    with tempfile.TemporaryDirectory(prefix="delegate-class-archive-") as work:
        home = Path(work) / "state"
        generate(home / "logs", Spec(jobs=SAMPLE_JOBS))
        state = State.open(env={**process_env(), HOME_ENV: str(home)})
        run_report(state, master="local[1]", fmt="html", out=Path(work) / "out", class_dump=target)
    _let_the_jvm_exit()
    return 0


def _let_the_jvm_exit(timeout_s: float = 600.0) -> None:
    """Stop the report's Spark and wait for its JVM to exit: it writes the archive as it exits,
    and left to the end of this process it would be killed, or still writing when the builder
    looks for the archive."""
    # pyspark: the report's own session and gateway, in this builder only
    from pyspark import SparkContext
    from pyspark.sql import SparkSession  # pyspark: as above

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    gateway = SparkContext._gateway  # the JVM process pyspark launched
    if gateway is None:
        return
    process = gateway.proc
    gateway.shutdown()
    if process.stdin is not None:
        process.stdin.close()  # the JVM's gateway server exits when its stdin closes
    process.wait(timeout=timeout_s)


def build(archive: Path) -> int:
    """Make `archive`: dump it in a child, check it, rename it into place."""
    class_archive.hand_claim_to(archive, os.getpid())
    target = archive.with_name(f"{archive.name}.{os.getpid()}.tmp")
    try:
        done = subprocess.run(
            [sys.executable, "-m", class_archive.BUILDER, "--dump", str(target)],
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if done.returncode != 0 or not target.is_file() or target.stat().st_size == 0:
            print(f"the class archive was not made (exit {done.returncode})", file=sys.stderr)
            return 1
        os.replace(target, archive)
        print(f"class archive {archive}: {archive.stat().st_size // 1_000_000} MB")
        return 0
    finally:
        target.unlink(missing_ok=True)
        class_archive.release_claim(archive)


def main(argv: list[str]) -> int:
    """ARCHIVE: make it (claimed by whoever started this); no argument: make this Java's and
    this PySpark's archive unless it exists (what `make` runs at install)."""
    if argv[:1] == ["--dump"] and len(argv) == 2:
        return dump(Path(argv[1]))
    if len(argv) == 1:
        return build(Path(argv[0]))
    if not argv:
        archive = class_archive.archive_for(check_requirements())
        if archive.exists():
            print(f"class archive {archive}: made already")
            return 0
        archive.parent.mkdir(parents=True, exist_ok=True)
        return build(archive)
    print("usage: python -m delegate.runtime.class_archive [ARCHIVE]", file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
