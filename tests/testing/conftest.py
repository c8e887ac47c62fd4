"""Fixtures for the test-server tests: HTTP servers shared per module and a raw stdio peer.

HTTP servers start once per module (each costs ~1.5 s: ``import mcp`` plus uvicorn), and every
test talks to them with fresh clients, so sharing them costs no isolation.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any, Literal

import pytest

from mcp_proxy.testing.process import server_argv, start_http_server

#: Every well-behaved preset plus the two misbehaving ones that do not break the connection.
HTTP_PRESETS = "all,huge,burst"


SERVER_KINDS: dict[str, tuple[Literal["http", "sse"], dict[str, bool]]] = {
    "http": ("http", {}),
    "sse": ("sse", {}),
    "stateless": ("http", {"stateless": True}),
    "json": ("http", {"json_response": True}),
}


@pytest.fixture(scope="module")
def http_servers() -> Iterator[dict[str, str]]:
    """One server per HTTP flavour (see ``SERVER_KINDS``), started in parallel; kind → URL."""
    with ExitStack() as stack, ThreadPoolExecutor(len(SERVER_KINDS)) as pool:
        futures = {
            kind: pool.submit(stack.enter_context, start_http_server(HTTP_PRESETS, t, **kw))
            for kind, (t, kw) in SERVER_KINDS.items()
        }
        urls = {kind: future.result()[0] for kind, future in futures.items()}
        yield urls


class RawStdio:
    """A byte-level stdio peer: write JSON-RPC lines, read exactly what the server wrote.

    The SDK client would hide (or choke on) the very bytes the misbehaving presets produce, so
    those presets are checked with this instead.
    """

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._next_id = 0

    @classmethod
    async def start(cls, presets: str, **opts: Any) -> RawStdio:
        argv = server_argv(presets, "stdio", **opts)
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=16 * 1024 * 1024,
        )
        return cls(proc)

    async def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()

    async def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return self._next_id

    async def line(self, within: float = 15.0) -> bytes:
        assert self.proc.stdout is not None
        return await asyncio.wait_for(self.proc.stdout.readline(), within)

    async def lines_until_response(self, rid: int, within: float = 15.0) -> list[bytes]:
        """Every line up to and including the response to ``rid`` (raw bytes, newline kept)."""
        seen: list[bytes] = []
        while True:
            raw = await self.line(within)
            if not raw:
                raise AssertionError(f"EOF before the response to {rid}; saw {seen!r}")
            seen.append(raw)
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == rid and "method" not in message:
                return seen

    async def initialize(self) -> None:
        rid = await self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw-test", "version": "0"},
            },
        )
        await self.lines_until_response(rid)
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def close(self, within: float = 10.0) -> int:
        """Close stdin (the server exits on EOF), reap it, and return the exit code."""
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            return await asyncio.wait_for(self.proc.wait(), within)
        except TimeoutError:
            self.proc.kill()  # by pid: asyncio's Process signals only its own child
            return await self.proc.wait()

    async def stderr_text(self) -> str:
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode("utf-8", "replace")


@pytest.fixture
def python() -> str:
    return sys.executable
