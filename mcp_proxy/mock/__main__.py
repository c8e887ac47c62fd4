"""``python -m mcp_proxy.mock SOURCE …`` = ``mcptape mock SOURCE …``.

For hosts without the console script on PATH, e.g. the pytest plugin's stdio command. It runs
the mock's own command line (:mod:`mcp_proxy.mock.command`): the mock room never imports the CLI.
"""

from __future__ import annotations

import sys

from mcp_proxy.mock.command import main

sys.exit(main(sys.argv[1:]))
