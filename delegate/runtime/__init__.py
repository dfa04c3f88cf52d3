"""The long-running processes: the agent host service (the wrapper, the supervisor and the
monitor loop are to move here too)."""
