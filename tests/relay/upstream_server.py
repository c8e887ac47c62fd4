"""An SDK test server with two extra tools that report on stderr, for exactly-once and cancel tests.

Run as a script: ``python tests/relay/upstream_server.py --preset basic,slow --transport http``.
It is the regular :mod:`mcp_proxy.testing.server` (same presets, same ready line) plus:

- ``count(tag)`` prints ``COUNT <tag>`` on stderr each time it runs, so a test can count how
  many times a call reached the server (a relay that re-sends would show two lines);
- ``watch(tag, seconds)`` prints ``WATCH START <tag>``, sleeps, and prints ``WATCH CANCELLED
  <tag>`` when its handler is cancelled (2026-07-28: the client closed the POST) or ``WATCH DONE
  <tag>`` when it finishes, so a test sees a cancellation reach the server.

The SDK's own logging says nothing about cancellations, hence these tools.
"""

from __future__ import annotations

import argparse
import sys
import warnings

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_proxy.testing.server import build_server, run


def _say(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def add_probe_tools(server: MCPServer) -> None:
    @server.tool(description="Count an invocation on stderr and echo the tag.")
    def count(tag: str) -> str:
        _say(f"COUNT {tag}")
        return tag

    @server.tool(description="Sleep, reporting start, cancellation or completion on stderr.")
    async def watch(tag: str, seconds: float = 30.0) -> str:
        _say(f"WATCH START {tag}")
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            _say(f"WATCH CANCELLED {tag}")
            raise
        _say(f"WATCH DONE {tag}")
        return f"watched {tag}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="basic,slow,failing")
    parser.add_argument("--transport", choices=["http", "sse"], default="http")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json-response", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    server = build_server(args.preset)
    add_probe_tools(server)
    try:
        run(server, args.transport, "127.0.0.1", args.port, args.stateless, args.json_response)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
