"""`delegate report --master spark://...` on a Spark standalone cluster (a master and two
workers started from the PySpark install) gives the same figures as local mode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.report.generator import Spec, generate
from delegate.services.report import run_report
from delegate.services.state import State

from .helpers import retry_until, run_cli
from .mqtt_fixtures import free_port

pyspark = pytest.importorskip("pyspark")
SPARK_HOME = Path(pyspark.__file__).parent


class Cluster:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "PYSPARK_PYTHON": sys.executable,  # executors run this very interpreter
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(folder),
            "SPARK_WORKER_DIR": str(folder / "work"),
        }

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _daemon(self, name: str, *args: str) -> Path:
        log = self.folder / f"{name}.log"
        self.procs.append(
            subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                env=self.env,
                stdout=log.open("ab"),
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )
        return log

    def start(self) -> None:
        master = self._daemon(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        retry_until(
            lambda: "I have been elected leader" in master.read_text(), timeout=90, interval=0.2
        )
        workers = [
            self._daemon(
                f"worker{i}",
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(free_port()),
            )
            for i in (1, 2)
        ]
        retry_until(
            lambda: (
                len(re.findall(r"Registering worker", master.read_text())) >= 2
                and all("Successfully registered with master" in w.read_text() for w in workers)
            ),
            timeout=90,
            interval=0.2,
        )

    def stop(self) -> None:
        for proc in reversed(self.procs):  # only the daemons this test started, by pid
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    folder = tmp_path / "spark"
    (folder / "work").mkdir(parents=True)
    made = Cluster(folder)
    try:
        made.start()
        yield made
    finally:
        made.stop()


def test_a_standalone_cluster_gives_the_figures_of_local_mode(
    spark, cluster: Cluster, tmp_path: Path
):
    home = tmp_path / "state"
    generate(home / "logs", Spec(jobs=40, seed=21))
    # local mode: in this process, on the test run's shared local Spark (`spark`)
    state = State.open(env={"DELEGATE_HOME": str(home)})
    run_report(state, master="local[1]", fmt="json", out=tmp_path / "local")
    result = run_cli(
        home,
        "report",
        "--format",
        "json",
        "--out",
        str(tmp_path / "cluster"),
        "--master",
        cluster.url,
        env={"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = {}
    for name in ("local", "cluster"):
        outputs[name] = json.loads((tmp_path / name / "report.json").read_text())
        outputs[name].pop("generated_at")  # when, not what: the figures must be equal
    assert outputs["cluster"]["totals"]["jobs"] == 40
    assert outputs["cluster"] == outputs["local"]
    # the work ran on the cluster's executors, not in the driver
    started = time.monotonic()
    retry_until(
        lambda: list((cluster.folder / "work").glob("app-*/*/stderr")) or None,
        timeout=max(1.0, 30 - (time.monotonic() - started)),
    )
