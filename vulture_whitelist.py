"""Names vulture (`make lint`) cannot see used: each is read by something outside our code.

Typer commands are left out by `ignore_decorators` in pyproject.toml, not listed here.
"""

# paho-mqtt reads these attributes of its own objects, and calls our callbacks positionally
SessionExpiryInterval  # Properties(PacketTypes.CONNECT/DISCONNECT)
connect_timeout  # Client
on_connect  # Client
on_disconnect  # Client
userdata  # on_message/on_connect/... (client, userdata, ...)
u  # tests/test_hosts.py: the same callbacks as lambdas

# context managers' __exit__(exc_type, exc, tb): the signature Python calls
exc_type
tb

# json's C scanner (_json.make_scanner) reads these off the decoder context (core/fastjson.py)
object_hook
object_pairs_hook
parse_float
parse_int
parse_constant

# NamedTuple fields and enum members that reach JSON or the wire by _asdict()/value, not by name
schema_version  # Job (core/model.py): every record carries it
age_s  # ps Row (services/ps.py): `ps --json`
PERMISSION_REQUIRED  # EventType: published by agents' hooks, read back by value

# pytest reads these by name
pytest_plugins  # tests/conftest.py
address_family  # socketserver reads it off a server class (tests/test_sandbox.py: IPv6)
pytestmark
_fresh_job_ids  # tests/bus_contract.py: an autouse fixture
_stop_report_servers  # tests/conftest.py: an autouse fixture
_stop_shared_report_servers  # tests/conftest.py: an autouse fixture

# textual reads these by name (runtime/top/app.py): class settings, handlers, key actions
DEFAULT_CSS
BINDINGS
CSS
TITLE
ENABLE_COMMAND_PALETTE
compose
on_mount
on_unmount
on_resize
on_rows_changed
on_data_table_row_selected
on_input_changed
on_input_submitted
action_answer
action_detail
action_logs
action_cancel_job
action_send_line
action_filter
action_close_prompt
action_permission
action_quit_top
# http.server handlers (tests, benches): called by the standard library by name
do_GET
log_message
# autouse fixtures: pytest calls them
_groups_cleared
