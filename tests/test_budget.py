"""Budgets (issue 22, item 2): a stand-in agent reports its usage per message as the pinned
Claude CLI does; crossing `--max-tokens` or `--max-cost` stops it within one message and ends its
job `budget_exceeded`, with the figures."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from delegate.core.budget import Budget, Price, Spent, add_usage, overspent, with_reported_cost
from delegate.core.model import JobState

from .helpers import assert_one_line_error, json_lines, retry_until, run_cli
from .test_monitor import open_state

SPENDER = Path(__file__).parent / "agents" / "spender.py"


def test_spending_adds_up_and_says_when_it_is_too_much():
    prices = {"m": Price(input=3.0, output=15.0)}
    spent = add_usage(
        Spent(),
        {"input_tokens": 1000, "cache_read_input_tokens": 1000, "output_tokens": 100},
        "m",
        prices,
    )
    assert (spent.tokens_in, spent.tokens_out) == (2000, 100)
    assert spent.cost_usd == pytest.approx((2000 * 3 + 100 * 15) / 1e6)
    assert overspent(spent, Budget(max_tokens=2100)) is None
    assert overspent(spent, Budget(max_tokens=2000)) == (
        "budget_exceeded: 2,100 tokens, over the 2,000 allowed"
    )
    reported = with_reported_cost(spent, 0.5)
    assert overspent(reported, Budget(max_cost_usd=0.25)) == (
        "budget_exceeded: $0.5000 spent, over the $0.25 allowed"
    )
    assert add_usage(reported, {"output_tokens": 10}, "m", prices).cost_usd == 0.5  # stays


def _profile(home: Path, extra: str = "") -> None:
    home.mkdir(parents=True, exist_ok=True)
    command = json.dumps([sys.executable, str(SPENDER)])
    (home / "delegate.toml").write_text(
        textwrap.dedent(f"""
        [profiles.spender]
        command = {command}
        prompt = "stdin"
        preamble = false
        channel = "claude-stream"
        """)
        + extra
    )


def _spend(home: Path, env: dict[str, str], workdir: Path, *limits: str):
    return run_cli(
        home,
        "submit",
        "--agent",
        "spender",
        "--prompt",
        "go",
        "--workdir",
        str(workdir),
        "--wait",
        "--json",
        *limits,
        env=env,
    )


@pytest.mark.parametrize(
    ("limits", "prices", "words"),
    [
        (("--max-tokens", "1000"), "", "1,200 tokens, over the 1,000 allowed"),
        (
            ("--max-cost", "1"),
            '[prices."stand-in-model"]\ninput = 1000.0\noutput = 1000.0\n',
            "$1.2000 spent, over the $1.00 allowed",
        ),
    ],
)
def test_crossing_a_budget_stops_the_agent_within_one_message(
    home: Path, tmux_env, tmp_path: Path, limits: tuple[str, ...], prices: str, words: str
):
    _profile(home, prices)
    result = _spend(home, tmux_env, tmp_path, *limits)
    assert result.returncode == 1, result.stderr
    job_id = json.loads(result.stdout.splitlines()[-1])["job_id"]
    job = open_state(home).registry.get(job_id)
    assert job.status is JobState.ERROR
    assert job.error == f"budget_exceeded: {words}"
    assert job.tokens_in is not None and job.tokens_in + (job.tokens_out or 0) >= 1200
    messages = int((tmp_path / "spent.txt").read_text())
    assert 3 <= messages <= 4  # it crossed at the third, and was stopped before a fifth
    assert "budget_exceeded" in result.stderr  # said in words on stderr


def test_a_budget_from_delegate_toml_and_bad_limits(home: Path, tmux_env, tmp_path: Path):
    _profile(home, "[budget]\nmax_tokens = 5000\n[budget.profiles.spender]\nmax_tokens = 800\n")
    result = _spend(home, tmux_env, tmp_path)
    assert result.returncode == 1
    job_id = json.loads(result.stdout.splitlines()[-1])["job_id"]
    job = open_state(home).registry.get(job_id)
    assert (
        job.max_tokens == 800 and job.error == "budget_exceeded: 1,200 tokens, over the 800 allowed"
    )
    before = sorted(p.name for p in (home / "jobs").glob("*.json"))
    for bad in (("--max-tokens", "0"), ("--max-cost", "-1")):
        refused = _spend(home, tmux_env, tmp_path, *bad)
        assert refused.returncode == 64
        assert_one_line_error(refused)
    assert sorted(p.name for p in (home / "jobs").glob("*.json")) == before


def test_a_group_over_its_daily_budget_starts_nothing_more_today(
    home: Path, tmux_env, tmp_path: Path
):
    _profile(home, '[prices."stand-in-model"]\ninput = 1000.0\noutput = 1000.0\n')
    added = run_cli(home, "group", "add", "thrifty", "--daily-cost", "0.5", env=tmux_env)
    assert added.returncode == 0 and "$0.50 a day" in added.stdout, added.stderr
    # $0.40 a message: stopped at its second (800 tokens), it has cost $0.80 of the $0.50
    first = _spend(home, tmux_env, tmp_path, "--group", "thrifty", "--max-tokens", "500")
    assert first.returncode == 1
    state = open_state(home)
    spender = state.registry.get(json.loads(first.stdout.splitlines()[-1])["job_id"])
    assert spender.cost_usd == pytest.approx(0.8)
    held = run_cli(
        home,
        "submit",
        "--agent",
        "shell",
        "--group",
        "thrifty",
        "--no-wait",
        "--json",
        "--workdir",
        str(tmp_path),
        "--prompt",
        "true",
        env=tmux_env,
    )
    assert held.returncode == 0, held.stderr
    assert "spent $0.8000 of its $0.50 today" in held.stderr  # said at submit
    held_id = json.loads(held.stdout)["job_id"]
    rows = json_lines(run_cli(home, "ps", "--json", env=tmux_env).stdout)
    [row] = [r for r in rows if r["job_id"] == held_id]
    assert row["job_state"] == "queued"
    assert row["waiting_for"] == "group thrifty spent $0.8000 of its $0.50 today"
    listed = json_lines(run_cli(home, "group", "list", "--json", env=tmux_env).stdout)
    assert listed[0]["spent_today_usd"] == pytest.approx(0.8)
    raised = run_cli(home, "group", "set", "thrifty", "--daily-cost", "5", env=tmux_env)
    assert raised.returncode == 0, raised.stderr
    retry_until(lambda: state.registry.get(held_id).status.terminal, timeout=30)
    assert state.registry.get(held_id).status is JobState.COMPLETED
