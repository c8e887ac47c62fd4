"""``python -m mcp_proxy.mock SOURCE …`` = ``mcptape mock SOURCE …``.

For hosts without the console script on PATH, e.g. the pytest plugin's stdio command.
"""

from __future__ import annotations

import sys

from mcp_proxy.cli import main

sys.argv = ["mcptape", "mock", *sys.argv[1:]]
main()
