"""mcptape as a plain mitmproxy addon: record the MCP traffic going through your mitmproxy.

    mitmdump -s addons/mcptape.py --set mcptape_db=~/mcp.db
    mitmweb  -s addons/mcptape.py --set mcptape_db=~/mcp.db

Options (``--set name=value``): ``mcptape_db`` (database path or URL; default ``MCPTAPE_DB`` or
the user data dir), ``mcptape_name`` (session name), ``mcptape_redact`` (default true),
``mcptape_record_all`` (also record non-MCP flows), ``mcptape_idle_cut`` (seconds).
Flows that are not MCP or OAuth are left exactly as they are. The addon needs mcptape installed
in the Python environment mitmproxy runs in (``pip install mcptape`` next to mitmproxy).
"""

from __future__ import annotations

from mcp_proxy.forward.addon import McpTape

addons = [McpTape()]
