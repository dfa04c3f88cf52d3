"""The names of what lives in the state dir, as plain strings.

`Layout` builds its paths from these; the typer-free fast paths (`lock`, `cron run`) join them
with `os.path`, because pathlib alone costs them ~10 ms to import.
"""

from __future__ import annotations

JOBS_DIR = "jobs"  # the registry
LOGS_DIR = "logs"
BUS_DB = "bus.db"
SESSIONS_DB = "sessions.db"
COORD_DB = "coord.db"
CRON_BOOK = "cron.json"
GROUPS_BOOK = "groups.json"
REPORTS_DIR = "reports"  # where `report --format html|json|parquet` writes unless --out says
WORKTREES_DIR = "worktrees"  # a job's own git worktree: worktrees/<repo name>/<job id>
PUBLISH_SERVER_SOCKET = "publish.sock"  # the warm publish server (runtime/publish_server)
PUBLISH_SERVER_LOCK = "publish-server.lock"  # held by that server for its life
PUBLISH_SERVER_LOG = "publish-server.log"  # its stdout and stderr
SUPERVISOR_LOCK = "supervisor.lock"  # held by the state dir's supervisor for its life
SUPERVISOR_LOG = "supervisor.log"  # its stdout and stderr
MCP_NURSERY_SOCKET = "mcp-nursery.sock"  # the state dir's MCP nursery (entry/mcp_nursery)
MCP_NURSERY_LOCK = "mcp-nursery.lock"  # held by the nursery for its life
MCP_NURSERY_LOG = "mcp-nursery.log"  # its stdout and stderr
