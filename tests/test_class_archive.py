"""The report's JVM starts from a class archive (services/class_archive): made once, in the
background, by the first report that finds none; mapped by every report after it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from delegate.services import class_archive

from .helpers import retry_until

pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[1]


def test_options_use_an_archive_only_once_it_is_there(tmp_path: Path):
    archive = tmp_path / "spark-x.jsa"
    assert class_archive.using(archive) == ""
    archive.write_bytes(b"x")
    assert class_archive.using(archive).split() == [
        f"-XX:SharedArchiveFile={archive}",
        "-Xlog:cds*=off",
    ]
    assert class_archive.dumping(archive).startswith(f"-XX:ArchiveClassesAtExit={archive} ")


def test_one_builder_at_a_time_and_none_once_it_is_made(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path)
    monkeypatch.setattr(class_archive, "BUILDER", "tests.agents.fake_class_builder")
    archive = tmp_path / "spark-x.jsa"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert class_archive.start_building(archive, env)
    retry_until(lambda: (tmp_path / "started.log").exists(), timeout=30)
    assert not class_archive.start_building(archive, env)  # the first still builds
    retry_until(archive.exists, timeout=30)
    assert not class_archive.start_building(archive, env)  # made
    assert len((tmp_path / "started.log").read_text().splitlines()) == 1


def test_a_dead_builders_claim_is_taken_over(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(class_archive, "ARCHIVE_DIR", tmp_path)
    archive = tmp_path / "spark-x.jsa"
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "spark-x.jsa.building").write_text(str(gone.pid))
    assert class_archive._claim(archive)
    assert (tmp_path / "spark-x.jsa.building").read_text() == str(os.getpid())
    assert not class_archive._claim(archive)  # ours now, and we are alive


# Starts the report's Spark as services/report does, from the archive, then prints whether
# the JVM has it mapped (its /proc maps name the file).
MAPPED = textwrap.dedent("""
    import sys
    from pathlib import Path
    from pyspark import SparkContext
    from delegate.report.figures import spark_session
    from delegate.services import class_archive
    archive = sys.argv[1]
    spark = spark_session("local[1]", class_archive=class_archive.using(Path(archive)))
    spark.range(3).count()
    maps = open(f"/proc/{SparkContext._gateway.proc.pid}/maps").read()
    print("MAPPED" if archive in maps else "NOT MAPPED")
    spark.stop()
""")


def test_the_report_jvm_maps_the_archive_make_made(tmp_path: Path):
    from delegate.services.report import check_requirements

    archive = class_archive.archive_for(check_requirements())
    if not archive.is_file():
        pytest.skip(f"no class archive at {archive}: `make` makes it")
    done = subprocess.run(
        [sys.executable, "-c", MAPPED, str(archive)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "MAPPED", done.stdout
