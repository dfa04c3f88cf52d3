"""The report's JVM starts from a class archive (Java's application class-data sharing).

Starting Spark is most of a small report's time, and most of that start is the JVM loading and
verifying the same ten thousand classes every time. Java 17 can dump the classes a run loaded
into an archive (`-XX:ArchiveClassesAtExit`) and map it at the next start
(`-XX:SharedArchiveFile`): here that halves the Spark start (15 s -> 8 s on this machine).

The archive belongs to one Java and one PySpark (the jars on the JVM's class path), so it lives
in the Python environment they run in (`<sys.prefix>/share/delegate/`), named by the Java
binary, the PySpark version and the RECIPE of the report's Spark jobs. A report that finds
none starts it being made in the background (`runtime/class_archive`: a small report on
generated logs, whose JVM dumps what it loaded), once at a time, and goes on as before; `make`
makes it at install. An archive the JVM cannot use (another Java) is ignored by the JVM
itself, and its messages are switched off.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from delegate.adapters.tmux import alive

ARCHIVE_DIR = Path(sys.prefix) / "share" / "delegate"
QUIET = "-Xlog:cds*=off"  # an unusable or half-dumped archive is not the person's business
BUILDER = "delegate.runtime.class_archive"
# The classes a report loads depend on how it runs its Spark jobs: when that changes (2: tiny
# histories read in Python and run with interpreted expressions, report.figures.TINY_INPUT), a
# new archive is made, as the old one lacks the classes the report now loads.
RECIPE = 2


def archive_for(java: str) -> Path:
    """This Java's and this PySpark's archive (it may not exist yet)."""
    import pyspark  # pyspark: services.report checked it is there before asking

    real = os.path.realpath(java)
    made = os.stat(real).st_mtime_ns
    key = f"{real}|{made}|{pyspark.__version__}|{RECIPE}"
    key = hashlib.sha256(key.encode()).hexdigest()[:12]
    return ARCHIVE_DIR / f"spark-{key}.jsa"


def using(archive: Path) -> str:
    """The JVM options that start from `archive`, or none when it is not there yet."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}" if archive.is_file() else ""


def dumping(target: Path) -> str:
    """The JVM options that write what the run loaded to `target` as the JVM exits."""
    return f"-XX:ArchiveClassesAtExit={target} {QUIET}"


def start_building(archive: Path, env: dict[str, str]) -> bool:
    """Have `archive` made in the background unless it exists, is being made, or its folder
    cannot be written; True when a builder was started."""
    if archive.exists():
        return False
    try:
        ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
        if not _claim(archive):
            return False
    except OSError:
        return False  # an environment we may not write to: reports just start as before
    with open(os.devnull, "rb") as nothing, open(_log(archive), "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", BUILDER, str(archive)],
            stdin=nothing,
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,  # outlives the report that started it
        )
    return True


def _claim(archive: Path) -> bool:
    """Take the right to build `archive` (a `.building` file naming our pid); False when a
    live builder holds it. A dead builder's claim is taken over."""
    claim = archive.with_name(archive.name + ".building")
    for _ in range(2):
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                holder = int(claim.read_text() or "0")
            except (OSError, ValueError):
                holder = 0
            if holder and alive(holder):
                return False
            claim.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as handle:
            handle.write(str(os.getpid()))
        return True
    return False


def hand_claim_to(archive: Path, pid: int) -> None:
    """The builder process holds the claim from now on (not the report that started it)."""
    archive.with_name(archive.name + ".building").write_text(str(pid))


def release_claim(archive: Path) -> None:
    archive.with_name(archive.name + ".building").unlink(missing_ok=True)


def _log(archive: Path) -> Path:
    return archive.with_name(archive.name + ".log")
