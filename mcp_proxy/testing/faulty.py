"""A stdio test server that *really* does what each fault rule fakes — the yardstick of issue #15.

A fault injected by mcptape must look to the host exactly like a server that misbehaves on its
own. The fault tests run the same SDK client call twice: once through ``mcptape record --fault
…`` against the well-behaved presets, once directly against this server's ``misbehave`` tool
doing the same thing for real, and compare what the client saw (result, error, exception).

Usage::

    python -m mcp_proxy.testing.faulty [--preset basic,slow,failing,crash]

``misbehave(kind, text)`` — the kinds, and the fault each one stands for:

==============  =========================================================================
kind            what the server does (in reply to this very call)
==============  =========================================================================
late            sleeps ``ms`` then answers ``text`` (``delay``)
silent          never answers (``drop``)
truncate        writes the first half of its response line, then never answers
cut-utf8        writes its response cut inside a UTF-8 sequence, then never answers
invalid-json    writes its response with a stray comma, then never answers
duplicate       writes its response, then answers again (the SDK writes the same response)
exit            exits with status 0 mid-call, answering nothing (``disconnect close-stdin``)
==============  =========================================================================

The JSON-RPC error and the ``isError`` result are the ``failing`` preset's ``protocol_error``
and ``fail``; a kill is the ``crash`` preset.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning

from mcp_proxy.testing.client import make_client, tool_text
from mcp_proxy.testing.presets import wire_fd
from mcp_proxy.testing.process import SERVER_PYTHON_ENV
from mcp_proxy.testing.server import build_server

__all__ = [
    "Kind",
    "LiveClient",
    "apply_misbehave",
    "faulty_params",
    "main",
    "outcome",
    "response_line",
]

Kind = Literal["late", "silent", "truncate", "cut-utf8", "invalid-json", "duplicate", "exit"]
NEVER = 3600.0


def _wire(data: bytes) -> None:
    fd = wire_fd()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def response_line(request_id: Any, text: str) -> bytes:
    """The line the SDK server writes for a ``str`` tool result (initialize era)."""
    result = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"result": text},
        "isError": False,
    }
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def _request_id(ctx: Context) -> Any:
    rid = ctx.request_id
    return int(rid) if rid.lstrip("-").isdigit() else rid


def apply_misbehave(server: MCPServer) -> MCPServer:
    """Add the ``misbehave`` tool to ``server``."""
    wire_fd()  # the real stdout, captured before the stdio transport diverts fd 1

    @server.tool(description="Misbehave on purpose, the way a fault rule fakes it (see module).")
    async def misbehave(ctx: Context, kind: Kind, text: str = "hello", ms: float = 0.0) -> str:
        line = response_line(_request_id(ctx), text)
        if kind == "late":
            await anyio.sleep(ms / 1000)
            return text
        if kind == "silent":
            await anyio.sleep(NEVER)
        if kind == "truncate":
            _wire(line[: (len(line) - 1) // 2] + b"\n")
        elif kind == "cut-utf8":
            _wire(line[: (len(line) - 1) // 2] + b"\xe2\x82\n")  # a lead byte and one more
        elif kind == "invalid-json":
            _wire(b"{," + line[1:])
        elif kind == "duplicate":
            _wire(line)
            return text
        elif kind == "exit":
            os._exit(0)
        await anyio.sleep(NEVER)
        return text

    return server


def faulty_params(
    presets: str = "basic,slow,failing,crash", **kwargs: Any
) -> StdioServerParameters:
    """``StdioServerParameters`` that launch this server (``kwargs`` go to the parameters)."""
    args = ["-m", "mcp_proxy.testing.faulty", "--preset", presets]
    python = os.environ.get(SERVER_PYTHON_ENV) or sys.executable
    return StdioServerParameters(command=python, args=args, **kwargs)


async def outcome(call: Awaitable[Any]) -> tuple[Any, ...]:
    """What a client saw of one call, comparable across runs: a result or an exception.

    ``("result", is_error, text)`` for a tool result, ``("raised", type, message)`` for an
    exception (a JSON-RPC error, a timeout, a lost connection).
    """
    try:
        result = await call
    except Exception as exc:
        code = getattr(getattr(exc, "error", None), "code", None)
        return ("raised", type(exc).__name__, code, str(exc))
    if hasattr(result, "is_error"):
        return ("result", bool(result.is_error), tool_text(result))
    return ("result", False, repr(result))


class LiveClient:
    """An SDK ``Client`` kept open on a background event loop, for sync module fixtures.

    One relay subprocess per test module instead of one per test: the client is entered once in
    a long-lived task on its own loop (anyio cancel scopes must be left by the task that entered
    them), and each test runs a coroutine on that loop with :meth:`run`.
    """

    def __init__(self, params: StdioServerParameters, **client_kwargs: Any) -> None:
        self.params = params
        self.client_kwargs = {"mode": "legacy", **client_kwargs}
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._closing: asyncio.Event | None = None
        self._task: asyncio.Future[None] | None = None
        self.client: Client | None = None

    async def _hold(self, ready: asyncio.Future[None]) -> None:
        self._closing = asyncio.Event()
        try:
            async with make_client(self.params, **self.client_kwargs) as client:
                self.client = client
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                raise

    def __enter__(self) -> LiveClient:
        self._thread.start()

        async def start() -> None:
            ready: asyncio.Future[None] = self.loop.create_future()
            self._task = asyncio.ensure_future(self._hold(ready))
            await ready

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(60)
        return self

    def run[T](self, fn: Callable[[Client], Awaitable[T]], timeout: float = 30.0) -> T:
        """Run ``fn(client)`` on the client's loop and return its result."""
        assert self.client is not None

        async def call() -> T:
            assert self.client is not None
            return await fn(self.client)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._closing is not None:
                self._closing.set()
            if self._task is not None:
                try:
                    await asyncio.wait_for(self._task, 15)
                except Exception:  # the connection may already be broken; nothing to keep
                    pass

        try:
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(20)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(5)
            self.loop.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_proxy.testing.faulty")
    parser.add_argument("--preset", default="basic,slow,failing,crash")
    parser.add_argument("--name", default="faulty")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=MCPDeprecationWarning)
    server = apply_misbehave(build_server(args.preset, args.name))
    try:
        server.run("stdio")
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
