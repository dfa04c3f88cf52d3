"""A stand-in for `codex exec --json -` (and `codex exec --json resume ID -`): it prints the
documented JSONL events; FAIL in the prompt makes its turn fail; LIMITED makes a first run (not
a resume) report Codex's usage-limit message with a wait of 3 seconds. Each run's argv and start
time go to `runs.jsonl` in its working folder."""

import json
import sys
import time
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
with open("runs.jsonl", "a") as handle:
    handle.write(json.dumps({"argv": args, "at": time.time()}) + "\n")
if "LIMITED" in prompt and "resume" not in args:
    limit = (
        "You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing)"
        " or try again in 3 seconds."
    )
    say({"type": "error", "message": limit})
    say({"type": "turn.failed", "error": {"message": limit}})
    sys.exit(1)
if "FAIL" in prompt:
    say({"type": "turn.failed", "error": {"message": "model refused the task"}})
    sys.exit(1)
say(
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 70, "cached_input_tokens": 0, "output_tokens": 7},
    }
)
