"""``python -m mcp_proxy``: the same as the ``mcptape`` command."""

from mcp_proxy.entry import main

main()
