"""Run a composable MCP test server on the official SDK.

Usage::

    python -m mcp_proxy.testing.server --preset basic,slow,failing --transport stdio
    python -m mcp_proxy.testing.server --preset all --transport http --port 0 [--stateless]
        [--json-response]
    python -m mcp_proxy.testing.server --preset basic --transport sse --port 0

Presets are documented in :mod:`mcp_proxy.testing.presets`. Over HTTP the server binds
127.0.0.1 (``--port 0`` picks a free port) and, once it is accepting connections, prints
exactly one line ``MCPTAPE_TEST_SERVER_READY http://127.0.0.1:PORT/mcp`` (``/sse`` for the
legacy transport) to stderr, so harnesses wait for a line instead of polling a port
(see :func:`mcp_proxy.testing.process.start_http_server`).

Servers are run with ``MCPServer.run``-style asyncio code, never ``python -m mcp.server``,
which forces the trio backend.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Literal

import anyio
from mcp.server.mcpserver import MCPServer, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_proxy.testing.presets import PRESETS, apply_presets, parse_preset_names
from mcp_proxy.testing.process import READY_PREFIX, start_http_server

__all__ = ["build_server", "main", "run", "start_http_server"]

Transport = Literal["stdio", "http", "sse"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]

DEFAULT_NAME = "mcptape-test"


def build_server(
    presets: str | Iterable[str],
    name: str = DEFAULT_NAME,
    *,
    log_level: LogLevel = "WARNING",
    state_key: str | None = None,
) -> MCPServer:
    """An ``MCPServer`` with the named presets applied (``"basic,slow"`` or a list).

    The SDK's own logging defaults to WARNING so that stderr carries only what a test asked
    for (the ``noise`` preset) and the occasional real problem.

    ``state_key`` (at least 32 characters) seals MRTR ``requestState`` under a fixed key
    instead of the SDK's per-process random one, so a recorded ``requestState`` stays valid
    for a *new* server process (replay, mock comparisons) — within the SDK's 10-minute TTL.
    """
    security = RequestStateSecurity(keys=[state_key]) if state_key else None
    server = MCPServer(
        name=name, version="1.0.0", log_level=log_level, request_state_security=security
    )
    return apply_presets(server, presets)


def run(
    server: MCPServer,
    transport: Transport = "stdio",
    host: str = "127.0.0.1",
    port: int = 0,
    stateless: bool = False,
    json_response: bool = False,
) -> None:
    """Serve ``server`` until stdin closes (stdio) or the process is signalled (HTTP)."""
    if transport == "stdio":
        server.run("stdio")
        return
    if transport == "http":
        app = server.streamable_http_app(
            stateless_http=stateless, json_response=json_response, host=host
        )
        path = "/mcp"
    elif transport == "sse":
        app = server.sse_app(host=host)
        path = "/sse"
    else:
        raise ValueError(f"unknown transport {transport!r}")
    anyio.run(_serve_http, app, host, port, path)


def _bind(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts so that ``--port 0`` yields a port we can announce.

    The protocol must be given as IPPROTO_TCP: asyncio only sets TCP_NODELAY on sockets whose
    ``proto`` says TCP, and without it reused connections stall on delayed ACKs (~40 ms a call).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


async def _serve_http(app: object, host: str, port: int, path: str) -> None:
    import uvicorn  # only HTTP servers pay for it

    sock = _bind(host, port)
    bound_port = sock.getsockname()[1]
    url_host = f"[{host}]" if ":" in host else host
    url = f"http://{url_host}:{bound_port}{path}"
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        log_level="warning",
        access_log=False,
        lifespan="on",
        # Open SSE streams would otherwise hold shutdown until the client goes away.
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.01)
        sys.stderr.write(f"{READY_PREFIX} {url}\n")
        sys.stderr.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mcp_proxy.testing.server",
        description="Composable MCP test server (presets: " + ", ".join(PRESETS) + ", all).",
    )
    parser.add_argument(
        "--preset",
        action="append",
        required=True,
        help="comma-separated preset names; may be repeated",
    )
    parser.add_argument("--transport", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--stateless", action="store_true", help="stateless Streamable HTTP")
    parser.add_argument("--json-response", action="store_true", help="JSON instead of SSE replies")
    parser.add_argument("--name", default=DEFAULT_NAME, help="serverInfo.name")
    parser.add_argument(
        "--startup-noise",
        action="append",
        default=[],
        metavar="TEXT",
        help="write TEXT as a line to stdout before serving (repeatable)",
    )
    parser.add_argument(
        "--state-key",
        default=None,
        metavar="SECRET",
        help="fixed key (>= 32 chars) sealing MRTR requestState across server restarts",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
        help="the SDK's own logging on stderr",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, build the server, serve; returns the exit code."""
    args = _parser().parse_args(argv)
    # The SDK warns on deprecated-but-supported features (logging, sampling, roots) that these
    # servers exercise on purpose; the warnings would only be stderr noise nobody asked for.
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    try:
        names = parse_preset_names(args.preset)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        server = build_server(names, args.name, log_level=args.log_level, state_key=args.state_key)
    except ValueError as exc:  # e.g. a state key that is too short
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for text in args.startup_noise:
        # Before run(): fd 1 is still the real stdout, so this lands on the stdio wire.
        os.write(1, text.replace("\n", " ").encode() + b"\n")
    try:
        run(server, args.transport, args.host, args.port, args.stateless, args.json_response)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
