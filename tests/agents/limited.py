"""A stand-in for `claude -p --output-format stream-json` that runs out of its usage limit:
its first run says so (`Claude AI usage limit reached|<reset epoch>`, the reset 3 s away) and
exits 1; a run that resumes the conversation (`--resume ID`) finishes. Each run's argv and start
time go to `runs.jsonl` in its working folder."""

import json
import sys
import time


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    sys.stdin.read()
    with open("runs.jsonl", "a") as handle:
        handle.write(json.dumps({"argv": sys.argv[1:], "at": time.time()}) + "\n")
    say({"type": "system", "subtype": "init", "session_id": "conv-limited", "tools": []})
    if "--resume" not in sys.argv:
        reset = int(time.time()) + 3
        say(
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "result": f"Claude AI usage limit reached|{reset}",
                "session_id": "conv-limited",
            }
        )
        sys.exit(1)
    say({"type": "result", "subtype": "success", "is_error": False, "result": "resumed and done"})


main()
