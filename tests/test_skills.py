"""Every command line in skills/*/SKILL.md's sh blocks is run here, in order, against real tmux,
so the instructions agents follow keep working."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import cli_env

SKILLS = Path(__file__).resolve().parent.parent / "skills"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)


def commands(skill: Path) -> list[str]:
    return [
        line.strip()
        for block in BLOCK.findall(skill.read_text())
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


SKILL_FILES = sorted(SKILLS.glob("*/SKILL.md"))
EXPECTED_EXIT = re.compile(r"#\s*exit (\d+)\s*$")


def test_every_skill_has_front_matter():
    for skill in SKILL_FILES:
        text = skill.read_text()
        assert text.startswith("---\nname: "), skill
        head = text.split("---", 2)[1]
        assert f"name: {skill.parent.name}" in head and "description: " in head, skill


@pytest.mark.parametrize(
    "skill", [s for s in SKILL_FILES if commands(s)], ids=lambda p: p.parent.name
)
def test_every_command_line_of_a_skill_runs(skill: Path, home: Path, tmux_env, tmp_path: Path):
    (tmp_path / "task.sh").write_text("echo nightly\n")
    (tmp_path / "nightly.toml").write_text('agent = "shell"\nprompt_file = "task.sh"\n')
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    env = cli_env(home, {**tmux_env, "PATH": path})
    for line in commands(skill):
        # a line may say the exit status it shows off: `...  # exit 75`
        expected = EXPECTED_EXIT.search(line)
        argv = shlex.split(line, comments=True)
        assert argv[0] == "delegate", line
        result = subprocess.run(
            argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == (int(expected[1]) if expected else 0), (line, result.stderr)
        assert "Traceback" not in result.stderr


INLINE = re.compile(r"`(delegate [^`]+)`")


def test_every_inline_command_of_a_skill_runs(home: Path, tmux_env):
    """Inline commands (`delegate publish ...` in the reporting skill): each in a started job."""
    from delegate.services.jobs.publish import publish_event
    from delegate.services.state import State

    state = State.open(env={"DELEGATE_HOME": str(home)})
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    ran = 0
    for skill in SKILL_FILES:
        for line in INLINE.findall(skill.read_text()):
            argv = shlex.split(line)
            if len(argv) < 3 or argv[1] != "publish" or "--event" not in argv:
                continue  # a mention in prose, or shown in an sh block and run above
            job, _ = state.registry.register()
            publish_event(state, job.job_id, "started")
            env = cli_env(home, {**tmux_env, "PATH": path, "DELEGATE_JOB_ID": job.job_id})
            result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            assert result.returncode == 0, (line, result.stderr)
            ran += 1
    assert ran == 4  # progress, permission_required, completed, error
