"""Approvals: what an agent's permission request says, the rules that answer some of them
without a person, and the signed decision that answers the others. Pure.

A decision is not a job event (the wire protocol's five events stay as they are): it is a
small JSON object signed like an event, with HMAC-SHA256 keyed by the job's token over its
canonical JSON without `hmac_sig`. Only whoever holds the job's token (the delegator, whose
registry keeps it) can sign one, so a decision from anyone else is refused by the waiting side.
"""

# No `from __future__ import annotations`: typing.NamedTuple would compile each string
# annotation into a ForwardRef at import.

import fnmatch
import hmac
import json
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from delegate.core.protocol import canonical_json
from delegate.core.shellcalls import simple_commands

ALLOW = "allow"
DENY = "deny"
BEHAVIOURS = (ALLOW, DENY)
DEFAULT_TIMEOUT_S = 600.0
SIG_FIELD = "hmac_sig"
SUMMARY_CHARS = 200
# What became of a decision handed to the side where the job waits (its host, for a job on one).
TAKEN = "taken"  # the job's wrapper took it: the agent has its answer
NOT_WAITING = "not_waiting"  # the request is no longer waiting (answered, timed out, job over)
NOT_TAKEN = "not_taken"  # written, but the wrapper did not take it in time (it may have ended)
REFUSED = "refused"  # not a decision this side can carry out (malformed, not its job)
# The tool_input fields that say what a call does, in the order they are looked for.
_ARGUMENT_KEYS = ("command", "file_path", "path", "url", "pattern", "query", "prompt")


class Rule(NamedTuple):
    """`[[approvals.rules]]`: `tool` (a name or glob), `match` (a glob over the call's argument
    summary, default any), and the `decision` it gives."""

    tool: str
    decision: str
    match: str = "*"

    def label(self, index: int) -> str:
        return f"rule {index + 1} ({self.decision} {self.tool} {self.match})"


class ApprovalSettings(NamedTuple):
    """`[approvals]` of delegate.toml."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    on_timeout: str = DENY
    rules: tuple[Rule, ...] = ()


class Decision(NamedTuple):
    """An answer to one request: allow or deny, why, and who or what made it."""

    behavior: str
    reason: str
    maker: str
    remember: bool = False


def summarize(tool_input: object) -> str:
    """The argument of a call as one short line: its command, path, URL, ..., else its JSON."""
    if isinstance(tool_input, Mapping):
        for key in _ARGUMENT_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return _short(value)
    try:
        text = json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = str(tool_input)
    return _short(text)


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def decide_by_rule(
    settings: ApprovalSettings, tool: str, tool_input: object, remembered: Sequence[str] = ()
) -> Decision | None:
    """The decision the rules give the whole call, else None: a person decides.

    A Bash call is decided on the simple commands it would run (core/shellcalls): one that a
    deny rule matches denies the call; the call is allowed only when every one of them is
    allowed, by a rule or a shape `approve --remember` remembered, and none writes a file
    through a redirection; text the grammar cannot read goes to a person. Any other call is
    matched as a whole (`call_text`: a file path resolved, else its input's JSON, never cut).
    Rules are tried in order; the first that matches a command or call decides it."""
    if tool == "Bash":
        return _decide_bash(settings, tool_input, remembered)
    text = call_text(tool_input)
    rule = _first_rule(settings, tool, text)
    if rule is not None:
        index, found = rule
        return Decision(found.decision, f"by {found.label(index)}", found.label(index))
    if call_shape(tool, tool_input) in remembered:
        return Decision(ALLOW, f"{tool} allowed for the rest of the job", "remembered")
    return None


def _first_rule(settings: ApprovalSettings, tool: str, text: str) -> tuple[int, Rule] | None:
    for index, rule in enumerate(settings.rules):
        if fnmatch.fnmatchcase(tool, rule.tool) and fnmatch.fnmatchcase(text, rule.match):
            return index, rule
    return None


def _decide_bash(
    settings: ApprovalSettings, tool_input: object, remembered: Sequence[str]
) -> Decision | None:
    command = tool_input.get("command") if isinstance(tool_input, Mapping) else None
    commands = simple_commands(command) if isinstance(command, str) else None
    if commands is None:
        return None  # nothing to run, or text no grammar reads: a person decides
    allowed_by: list[str] = []
    for simple in commands:
        rule = _first_rule(settings, "Bash", simple.text)
        if rule is not None and rule[1].decision == DENY:
            label = rule[1].label(rule[0])
            return Decision(DENY, f"by {label}: {simple.text[:SUMMARY_CHARS]}", label)
        if simple.writes:
            return None  # it writes a file through a redirection: a person reads where
        if rule is not None:
            allowed_by.append(rule[1].label(rule[0]))
        elif f"Bash {simple.shape}" in remembered:
            allowed_by.append("remembered")
        else:
            return None  # a command no rule covers: a person decides the whole call
    makers = list(dict.fromkeys(allowed_by))
    if makers == ["remembered"]:
        return Decision(ALLOW, "allowed for the rest of the job (remembered)", "remembered")
    return Decision(ALLOW, f"by {', '.join(makers)}", ", ".join(makers))


FILE_KEYS = ("file_path", "notebook_path", "path")


def call_text(tool_input: object) -> str:
    """What a non-Bash rule's `match` is matched against: a file tool's path, resolved (`..`
    and `.` taken out, so `/work/../home/.bashrc` is `/home/.bashrc`), else the whole input as
    JSON (keys sorted)."""
    if isinstance(tool_input, Mapping):
        for key in FILE_KEYS:
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                return posixpath.normpath(value) if value.startswith("/") else value
        command = tool_input.get("command")
        if isinstance(command, str):
            return command
    try:
        return json.dumps(tool_input, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(tool_input)


def call_shape(tool: str, tool_input: object) -> str:
    """What `approve --remember` remembers of a call: for Bash the shape of each simple command
    (`Bash git push`; several, newline-separated), for a file tool its folder (`Edit /work/src`),
    else the tool and its whole input: never a whole tool."""
    if tool == "Bash":
        command = tool_input.get("command") if isinstance(tool_input, Mapping) else None
        commands = simple_commands(command) if isinstance(command, str) else None
        return "\n".join(f"Bash {c.shape}" for c in commands or ())
    text = call_text(tool_input)
    if isinstance(tool_input, Mapping) and any(
        isinstance(tool_input.get(k), str) for k in FILE_KEYS
    ):
        return f"{tool} {posixpath.dirname(text)}"
    return f"{tool} {text}"


def timeout_decision(settings: ApprovalSettings) -> Decision:
    minutes = settings.timeout_s / 60
    waited = f"{minutes:g} min" if minutes >= 1 else f"{settings.timeout_s:g} s"
    return Decision(settings.on_timeout, f"no decision within {waited}", "timeout")


def sign_decision(decision: Mapping[str, Any], token: str) -> dict[str, Any]:
    """`decision` with its signature (`hmac_sig`) added."""
    body = {k: v for k, v in decision.items() if k != SIG_FIELD}
    signature = hmac.new(token.encode(), canonical_json(body), "sha256").hexdigest()
    return {**body, SIG_FIELD: signature}


def verify_decision(decision: Mapping[str, Any], token: str) -> bool:
    given = decision.get(SIG_FIELD)
    if not isinstance(given, str):
        return False
    expected = sign_decision(decision, token)[SIG_FIELD]
    return hmac.compare_digest(given, expected)


def parse_decision(data: object, request_id: str) -> Decision | None:
    """The decision a signed record carries for `request_id`, or None when it is not one."""
    if not isinstance(data, Mapping) or data.get("request_id") != request_id:
        return None
    behavior, reason, maker = data.get("behavior"), data.get("reason"), data.get("maker")
    if behavior not in BEHAVIOURS or not isinstance(reason, str) or not isinstance(maker, str):
        return None
    return Decision(str(behavior), reason, maker, bool(data.get("remember")))


PRE_TOOL_USE = "PreToolUse"
PERMISSION_REQUEST = "PermissionRequest"
# Claude Code's tools that change nothing: it runs them without asking, so we do not ask either.
READ_ONLY_TOOLS = frozenset(
    {
        "Read",
        "Glob",
        "Grep",
        "LS",
        "NotebookRead",
        "TodoWrite",
        "Task",
        "TaskCreate",
        "TaskGet",
        "TaskList",
        "TaskOutput",
        "TaskUpdate",
        "Agent",
        "BashOutput",
        "KillShell",
        "ExitPlanMode",
        "ListMcpResourcesTool",
        "ReadMcpResourceTool",
    }
)
EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
# Permission modes in which Claude Code itself settles every call (bypass: all run; dontAsk:
# what no rule allows is denied), so a person is not asked.
MODES_CLAUDE_SETTLES = ("bypassPermissions", "dontAsk")


TOOL_NAME_MAX = 128
UNNAMED = "a tool"


def tool_name(value: object) -> str:
    """The tool a hook payload names (the agent's word): printable and bounded, else
    UNNAMED, which no rule written for a real tool and no read-only list matches."""
    if isinstance(value, str) and 0 < len(value) <= TOOL_NAME_MAX and value.isprintable():
        return value
    return UNNAMED


def claude_settles(tool: str, mode: str | None, allowed_tools: Sequence[str]) -> bool:
    """Whether Claude Code runs `tool` without asking under its permission `mode` and
    `allowed_tools`, so our PreToolUse hook leaves the call to it. An `allowed_tools` entry
    with an argument pattern (`Bash(git log:*)`) does not count: we cannot tell which calls
    it covers, so those calls are gated (a person or a rule decides)."""
    if tool in READ_ONLY_TOOLS or mode in MODES_CLAUDE_SETTLES:
        return True
    if mode == "acceptEdits" and tool in EDIT_TOOLS:
        return True
    for entry in allowed_tools:
        if entry == tool or (entry.startswith("mcp__") and tool.startswith(entry + "__")):
            return True
    return False


def hook_answer(decision: Decision, hook: str = PERMISSION_REQUEST) -> dict[str, Any]:
    """What Claude Code's `PreToolUse` or `PermissionRequest` hook prints on stdout to give
    `decision`."""
    if hook == PRE_TOOL_USE:
        return {
            "hookSpecificOutput": {
                "hookEventName": PRE_TOOL_USE,
                "permissionDecision": decision.behavior,
                "permissionDecisionReason": decision.reason,
            }
        }
    verdict: dict[str, Any] = {"behavior": decision.behavior}
    if decision.behavior == DENY:
        verdict["message"] = decision.reason
    return {"hookSpecificOutput": {"hookEventName": PERMISSION_REQUEST, "decision": verdict}}
