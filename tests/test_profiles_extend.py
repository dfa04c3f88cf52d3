"""Built-in profiles extend: a `[profiles.claude]` or `[profiles.codex]` table without
`command` adds to the built-in one; with `command` it replaces it. And the CLIs' own
permission options reach their argv."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from delegate.config.profiles import BUILTIN, load_config, profiles
from delegate.core.errors import ConfigError


def _profiles(tmp_path: Path, text: str):
    path = tmp_path / "delegate.toml"
    path.write_text(textwrap.dedent(text))
    return profiles(load_config(path), path)


def _argv(profile, **given) -> list[str]:
    return profile.argv(prompt_file=Path("/p"), workdir=Path("/w"), job_id="0123abcd", **given)


def test_a_table_without_command_extends_the_builtin_claude(tmp_path: Path):
    found = _profiles(
        tmp_path,
        """
        [profiles.claude]
        env = { ANTHROPIC_BASE_URL = "https://gateway.example/anthropic" }
        pass_env = ["ANTHROPIC_API_KEY"]
        permission_mode = "acceptEdits"
        allowed_tools = ["Bash", "mcp__github"]
        max_running = 2
        """,
    )
    claude = found["claude"]
    assert claude.command == BUILTIN["claude"].command
    assert claude.resume == BUILTIN["claude"].resume
    assert claude.channel == "claude-stream" and claude.preamble
    assert dict(claude.env) == {"ANTHROPIC_BASE_URL": "https://gateway.example/anthropic"}
    assert claude.pass_env == BUILTIN["claude"].pass_env  # ANTHROPIC_API_KEY already there
    assert "ANTHROPIC_API_KEY" in claude.pass_env
    argv = _argv(claude, settings_file=Path("/s.json"))
    assert argv[:-2] == _argv(BUILTIN["claude"], settings_file=Path("/s.json"))
    assert argv[-2:] == ["--permission-mode=acceptEdits", "--allowedTools=Bash,mcp__github"]
    resumed = _argv(claude, conversation_id="abc-123")
    assert resumed[:3] == ["claude", "-p", "--resume=abc-123"]
    assert resumed[-1] == "--allowedTools=Bash,mcp__github"


def test_the_builtin_codex_can_write_and_never_waits_forever():
    codex = BUILTIN["codex"]
    argv = _argv(codex, in_repository=False)
    assert argv[:2] == ["codex", "exec"]
    assert argv[-2:] == ["--json", "-"]
    words = " ".join(argv)
    assert '-c sandbox_mode="workspace-write"' in words
    assert "-c features.unbounded_connection_retries=false" in words
    assert "--skip-git-repo-check" in argv
    assert "--skip-git-repo-check" not in _argv(codex, in_repository=True)
    resumed = _argv(codex, conversation_id="7f0c", in_repository=False)
    assert resumed[:2] == ["codex", "exec"] and resumed[-4:] == ["resume", "--", "7f0c", "-"]
    assert '-c sandbox_mode="workspace-write"' in " ".join(resumed)


def test_codex_sandbox_is_a_profile_setting(tmp_path: Path):
    found = _profiles(tmp_path, '[profiles.codex]\nagent_sandbox = "read-only"\n')
    assert 'sandbox_mode="read-only"' in _argv(found["codex"])


def test_a_table_with_command_replaces_the_builtin(tmp_path: Path):
    found = _profiles(tmp_path, '[profiles.claude]\ncommand = ["my-claude", "-p"]\n')
    assert found["claude"].command == ("my-claude", "-p")
    assert found["claude"].resume is None and found["claude"].channel == "none"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[profiles.claude]\nchannel = "none"\n', "give a command"),
        ('[profiles.claude]\nresume = ["x"]\n', "give a command"),
        ('[profiles.claude]\npermission_mode = "yolo"\n', "permission_mode must be"),
        ('[profiles.claude]\nallowed_tools = "Bash"\n', "allowed_tools must be"),
        ('[profiles.claude]\nallowed_tools = ["--dangerously-skip-permissions"]\n', "allowed"),
        ('[profiles.codex]\nagent_sandbox = "none"\n', "agent_sandbox must be"),
        ("[profiles.codex]\nenv = { X = 1 }\n", "env must be"),
        ("[profiles.codex]\ncolour = 1\n", "unknown key"),
    ],
)
def test_bad_extensions_are_explained(tmp_path: Path, text: str, message: str):
    with pytest.raises(ConfigError, match=message):
        _profiles(tmp_path, text)


def test_claudes_settings_gate_with_pretooluse_and_wait_only_for_decisions():
    """Print mode calls PreToolUse (never PermissionRequest): it decides, so claude waits for
    it, a minute longer than a person may take; the hooks that only report run async."""
    import json

    from delegate.services.jobs.submit import claude_settings

    hooks = json.loads(claude_settings(600))["hooks"]
    # SessionStart and Stop: the stream says both (its init and result lines)
    assert set(hooks) == {"PreToolUse", "PermissionRequest", "Notification"}
    for name, entries in hooks.items():
        (spec,) = entries[0]["hooks"]
        assert spec["command"].endswith("delegate hook")
        if name in ("PreToolUse", "PermissionRequest"):
            assert spec["timeout"] == 660 and "async" not in spec
        else:
            assert spec["async"] is True
