"""Where the recorder process used to live; kept so existing imports and commands still work.

The client is :mod:`mcp_proxy.recorder.client`, the worker :mod:`mcp_proxy.recorder.worker`.
"""

from __future__ import annotations

import sys

from mcp_proxy.recorder.client import RecorderClient
from mcp_proxy.recorder.worker import main, serve

__all__ = ["RecorderClient", "main", "serve"]

if __name__ == "__main__":
    sys.exit(main())
