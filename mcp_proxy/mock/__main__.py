"""``python -m mcp_proxy.mock SOURCE …`` = ``mcptape mock SOURCE …``.

For hosts without the console script on PATH, e.g. the pytest plugin's stdio command. It goes
through the console script's own entry point (the mock package itself never imports the CLI).
"""

from __future__ import annotations

import sys

from mcp_proxy.entry import main

sys.argv = ["mcptape", "mock", *sys.argv[1:]]
main()
