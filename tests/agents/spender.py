"""A stand-in for `claude -p --output-format stream-json`: one `assistant` message with its
`usage` every 0.3 s, counting them in `spent.txt`, then its `result`. Budget tests stop it part
way.

Why a stand-in: these tests count, from inside the agent, how many messages it got out before
the stop (`spent.txt`), for per-profile and per-group budgets across several jobs; a real CLI
keeps no such count. The real claude stopped by a budget: tests/test_real_claude.py."""

import json
import sys
import time


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    sys.stdin.read()
    say({"type": "system", "subtype": "init", "session_id": "conv-spender", "tools": []})
    for n in range(1, 11):
        usage = {"input_tokens": 300, "output_tokens": 100, "cache_read_input_tokens": 0}
        say(
            {
                "type": "assistant",
                "message": {"model": "stand-in-model", "content": [], "usage": usage},
            }
        )
        with open("spent.txt", "w") as handle:
            handle.write(str(n))
        time.sleep(0.3)
    say({"type": "result", "subtype": "success", "is_error": False, "result": "spent it all"})


main()
