"""A stand-in for `codex exec --json -` (and `codex exec --json resume ID -`): it prints the
documented JSONL events; FAIL in the prompt makes its turn fail."""

import json
import sys
import uuid


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


args = sys.argv[1:]
with open("codex-argv.json", "w") as handle:
    json.dump(args, handle)
prompt = sys.stdin.read()
thread = args[args.index("resume") + 1] if "resume" in args else f"thread-{uuid.uuid4().hex[:8]}"
say({"type": "thread.started", "thread_id": thread})
say({"type": "turn.started"})
say({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "ok"}})
if "FAIL" in prompt:
    say({"type": "turn.failed", "error": {"message": "model refused the task"}})
    sys.exit(1)
say(
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 70, "cached_input_tokens": 0, "output_tokens": 7},
    }
)
