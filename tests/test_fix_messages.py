"""What a person meets on a machine `make demo` set up (Debian: tmux, Java, bubblewrap; no cron,
no broker, no browser): each missing program is one line on stderr that names the command to
run, a non-zero exit and no traceback. A missing program is simulated with a PATH that lacks
it; a missing broker with a port nothing listens on. And `[worktree] keep_max_gb` names the
worktrees over it, biggest first, in readable units."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from delegate.services.worktrees import WorktreeRow, _over_size, size_words

from .helpers import assert_one_line_error, run_cli
from .mqtt_fixtures import free_port
from .test_cron import job_file
from .test_git_adapter import make_repo
from .test_worktree import submit_in_worktree, wait_ended

ROOT = Path(__file__).resolve().parent.parent


def test_cron_add_without_cron_says_apt_get_install_cron(home: Path, tmp_path: Path):
    bare = tmp_path / "bin"  # a PATH without crontab
    bare.mkdir()
    result = run_cli(
        home, "cron", "add", "0 2 * * *", str(job_file(tmp_path)), env={"PATH": str(bare)}
    )
    assert_one_line_error(result)
    assert "crontab is not installed: apt-get install cron" in result.stderr
    assert "make demo" in result.stderr  # which does not install it


def test_no_broker_on_this_machine_says_apt_get_install_mosquitto(home: Path, tmp_path: Path):
    bus = {"DELEGATE_BUS": f"mqtt://127.0.0.1:{free_port()}"}  # nothing listens there
    added = run_cli(home, "host", "add", "builder", env=bus)
    assert added.returncode == 0, added.stderr
    key = tmp_path / "host.key"
    key.write_text(added.stdout.strip() + "\n")
    key.chmod(0o600)
    served = run_cli(home, "host", "serve", "--name", "builder", "--key-file", str(key), env=bus)
    assert_one_line_error(served)
    line = served.stderr.strip()
    assert "refused the connection" in line
    assert "apt-get install mosquitto" in line and "examples/mosquitto/" in line
    assert (ROOT / "examples" / "mosquitto" / "mosquitto.conf").exists()  # what it points at


def test_bench_dashboard_without_chromium_says_apt_get_install_chromium(tmp_path: Path):
    bare = tmp_path / "bin"
    bare.mkdir()
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "dashboard.py"), "--starts", "0"],
        env={"PATH": str(bare), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "bench/dashboard.py: no chromium on PATH: apt-get install chromium"
    ]


SIZES = [
    (None, "-"),
    (0, "0 B"),
    (999, "999 B"),
    (8_100, "8.1 KB"),
    (999_950, "1.0 MB"),
    (340_200_000, "340.2 MB"),
    (1_300_000_000, "1.3 GB"),
]


@pytest.mark.parametrize(
    ("size", "words"), SIZES, ids=["unknown", "empty", "bytes", "kb", "carried-up", "mb", "gb"]
)
def test_sizes_in_readable_units(size: int | None, words: str):
    assert size_words(size) == words


def test_keep_max_gb_names_each_worktree_biggest_first():
    def row(job_id: str, size: int | None) -> WorktreeRow:
        return WorktreeRow(
            job_id, "completed", f"b-{job_id}", f"/w/{job_id}", "/r", True, size=size
        )

    rows = [row("aaaa0001", 2_000), row("aaaa0002", 75_000), row("aaaa0003", None)]
    rows += [row("aaaa0004", 3_400_000)]
    (line,) = _over_size(rows, 0.0001)
    assert line == (
        "worktrees take 3.5 MB, over keep_max_gb 0.0001 (100.0 KB):"
        " aaaa0004 3.4 MB, aaaa0002 75.0 KB, aaaa0001 2.0 KB"
    )
    assert _over_size(rows, 1) == []
    many = [row(f"bbbb{n:04d}", 1_000 + n) for n in range(12)]
    (line,) = _over_size(many, 0.000001)
    assert line.endswith("bbbb0002 1.0 KB and 2 more")
    assert line.index("bbbb0011") < line.index("bbbb0010")


def test_doctor_names_the_worktrees_over_keep_max_gb(home: Path, tmux_env, tmp_path: Path):
    repo = make_repo(tmp_path / "repo")
    big = submit_in_worktree(home, tmux_env, repo, "head -c 300000 /dev/zero > big.bin")
    small = submit_in_worktree(home, tmux_env, repo, "head -c 1000 /dev/zero > small.bin")
    wait_ended(home, big, small)
    (home / "delegate.toml").write_text("[worktree]\nkeep_max_gb = 0.0001\n")
    result = run_cli(home, "doctor", "--json", env=tmux_env)
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    detail = checks["worktrees"]["detail"]
    assert checks["worktrees"]["status"] == "warn", detail
    assert "over keep_max_gb 0.0001 (100.0 KB)" in detail
    assert " GB," not in detail.split(":", 1)[0]  # the total in its own unit, not 0.00 GB
    assert detail.index(big) < detail.index(small)
    named = detail.split("(100.0 KB): ", 1)[1]
    assert named.startswith(f"{big} ") and " KB" in named
