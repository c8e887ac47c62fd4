"""Mock: stand in for a server, answering from a recording.

``mcptape mock SOURCE`` speaks MCP over stdio (or HTTP with ``--port``: Streamable HTTP of both
eras and the legacy HTTP+SSE transport) and answers each request with what the recording holds
for it. The package, by layer:

- :mod:`.index` — matching a live request to a recorded exchange, and explaining a miss (pure);
- :mod:`.session` — one client connection: replay the exchange, forward, or answer the miss;
- :mod:`.upstream` — the real server that record modes forward to (stdio or HTTP);
- :mod:`.http` and :mod:`.serve` — the transports and the command.
"""

from __future__ import annotations

from mcp_proxy.mock.http import serve_http
from mcp_proxy.mock.index import METHOD_NOT_FOUND, MISS_CODE, Entry, Miss, MockIndex
from mcp_proxy.mock.serve import RECORD_MODES, MockOptions, run_mock, serve_stdio
from mcp_proxy.mock.session import MockSession

__all__ = [
    "METHOD_NOT_FOUND",
    "MISS_CODE",
    "RECORD_MODES",
    "Entry",
    "Miss",
    "MockIndex",
    "MockOptions",
    "MockSession",
    "run_mock",
    "serve_http",
    "serve_stdio",
]
