"""A stand-in for `claude -p --output-format stream-json --verbose --settings FILE`: it speaks the
stream-json lines and calls the hooks of the settings file it was given, the way Claude Code
does (each hook command run by a shell, the hook's JSON on its stdin)."""

import json
import subprocess
import sys
import uuid


def option(name):
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args else None


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def hook(hooks, event, payload):
    for entry in hooks.get(event, []):
        for spec in entry.get("hooks", []):
            subprocess.run(
                spec["command"], shell=True, input=json.dumps(payload).encode(), check=False
            )


def main():
    with open("argv.json", "w") as handle:
        json.dump(sys.argv[1:], handle)
    with open(option("--settings")) as handle:
        hooks = json.load(handle)["hooks"]
    prompt = sys.stdin.read()
    conversation = option("--resume") or f"conv-{uuid.uuid4().hex[:12]}"
    base = {"session_id": conversation, "cwd": ".", "transcript_path": "/dev/null"}
    say({"type": "system", "subtype": "init", "session_id": conversation, "tools": ["Bash"]})
    hook(hooks, "SessionStart", {**base, "hook_event_name": "SessionStart", "source": "startup"})
    say({"type": "assistant", "message": {"content": [{"type": "text", "text": prompt[:40]}]}})
    hook(
        hooks,
        "PermissionRequest",
        {
            **base,
            "hook_event_name": "PermissionRequest",
            "tool_name": "Bash",
            "tool_input": {"command": "rm -rf build"},
        },
    )
    hook(
        hooks,
        "Notification",
        {
            **base,
            "hook_event_name": "Notification",
            "message": "Claude needs your permission to use Bash",
            "notification_type": "permission_prompt",
        },
    )
    sys.stdout.write('{"type": "assistant", "message": {"trunc\n')  # a garbled line
    hook(hooks, "Stop", {**base, "hook_event_name": "Stop", "stop_hook_active": False})
    say(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 3,
            "duration_ms": 1234,
            "total_cost_usd": 0.0123,
            "usage": {"input_tokens": 100, "output_tokens": 50},
            "result": "All done",
            "session_id": conversation,
        }
    )


main()
