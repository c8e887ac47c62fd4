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
import socket
import sys
import warnings
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_proxy.testing.process import READY_PREFIX
from mcp_proxy.testing.server import build_server


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


class InitializeOnly:
    """ASGI wrapper: answer ``server/discover`` like an initialize-era-only server (HTTP 400).

    TypeScript SDK 1.x servers reject a request that is not ``initialize`` on a connection
    without a session with 400 and a JSON-RPC error; ``mode="auto"`` clients must see exactly
    that to fall back to the handshake.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"server/discover"' in body:
            payload = (
                b'{"jsonrpc":"2.0","error":{"code":-32000,'
                b'"message":"Bad Request: Server not initialized"},"id":null}'
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": payload})
            return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _serve(app: Any, port: int, path: str) -> None:
    """Serve like :mod:`mcp_proxy.testing.server`, but with TCP_NODELAY on every connection.

    A listening socket made as ``socket(AF_INET, SOCK_STREAM)`` has ``proto == 0``, and asyncio
    only switches Nagle's algorithm off for sockets whose proto is ``IPPROTO_TCP``; the SDK test
    server binds that way, so its small writes wait for delayed ACKs (40 ms on a reused
    connection). Real uvicorn deployments bind through ``create_server`` and do not.
    """
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(512)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{path}"
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.01)
        _say(f"{READY_PREFIX} {url}")

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="basic,slow,failing")
    parser.add_argument("--transport", choices=["http", "sse"], default="http")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stateless", action="store_true")
    parser.add_argument("--json-response", action="store_true")
    parser.add_argument("--initialize-only", action="store_true", help="400 for server/discover")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    server = build_server(args.preset)
    add_probe_tools(server)
    if args.transport == "http":
        app: Any = server.streamable_http_app(
            stateless_http=args.stateless, json_response=args.json_response, host="127.0.0.1"
        )
        path = "/mcp"
    else:
        app = server.sse_app(host="127.0.0.1")
        path = "/sse"
    if args.initialize_only:
        app = InitializeOnly(app)
    try:
        anyio.run(_serve, app, args.port, path)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
