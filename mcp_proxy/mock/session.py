"""One client connection of the mock: match, replay the recorded exchange, forward, or miss.

- **Replay**: the recorded notifications and nested server requests of the exchange are sent
  first, in wire order (progress re-addressed to the live progress token; a nested request waits
  for the live client's answer), then the recorded response with the live request's id.
- **A miss** is a JSON-RPC error (-32601 when the method was never recorded, -32050 otherwise)
  whose ``data`` lists the nearest recorded requests and how each differs.
- **Record modes** as VCR has them: ``none`` serves only; ``once``/``new_episodes`` forward
  misses to the real server; ``all`` forwards everything.

``send`` writes one message to the client (stdio line or SSE event, the transport decides).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_proxy.diff import Step
from mcp_proxy.errors import UserError
from mcp_proxy.frames import id_key
from mcp_proxy.mock.index import Entry, MockIndex
from mcp_proxy.mock.upstream import Upstream

#: How long a replayed nested request (sampling, elicitation, roots) waits for the client.
ASK_TIMEOUT = 30.0


def _progress_token(params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


Send = Callable[[dict[str, Any]], Awaitable[None]]


class MockSession:
    """One client connection: matches, replays, forwards, and answers misses.

    ``send`` writes one message to the client (stdio line or SSE event, the transport decides).
    """

    def __init__(
        self,
        index: MockIndex,
        *,
        mode: str = "none",
        upstream: Upstream | None = None,
        ask_timeout: float = ASK_TIMEOUT,
    ) -> None:
        self.index = index
        self.mode = mode
        self.upstream = upstream
        self.ask_timeout = ask_timeout
        self.asks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.handshake: list[dict[str, Any]] = []  # the live client's handshake, for upstream
        self._upstream_ready = False
        self._upstream_lock = asyncio.Lock()
        self.misses = 0
        self.forwarded = 0
        #: Message handlers still running (a transport waits for them before it closes).
        self.tasks: set[asyncio.Task[None]] = set()

    # ---------------------------------------------------------------- client → mock
    async def on_client_message(self, msg: Any, send: Send) -> None:
        """Handle one parsed message from the client; requests are answered through ``send``."""
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if not isinstance(method, str):
            if msg.get("id") is not None:  # the client answering one of our asks
                fut = self.asks.pop(id_key(msg["id"]) or "", None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
            return
        if method in ("initialize", "notifications/initialized"):
            self.handshake.append(msg)
        if msg.get("id") is None:
            if self.mode == "all" and self.upstream is not None and self._upstream_ready:
                await self.upstream.notify(msg)
            return
        await self._serve_request(msg, send)

    async def _serve_request(self, msg: dict[str, Any], send: Send) -> None:
        method, params, live_id = msg["method"], msg.get("params"), msg["id"]
        if self.mode == "all" and self.upstream is not None:
            await self._forward(msg, send)
            return
        found = self.index.lookup(method, params)
        if isinstance(found, Entry):
            await self._replay(found.step, msg, send)
            return
        if self.mode in ("new_episodes", "once") and self.upstream is not None:
            await self._forward(msg, send)
            return
        if method == "ping":
            await send({"jsonrpc": "2.0", "id": live_id, "result": {}})
            return
        self.misses += 1
        await send({"jsonrpc": "2.0", "id": live_id, "error": found.error()})

    async def _replay(self, step: Step, live: dict[str, Any], send: Send) -> None:
        token = _progress_token(live.get("params"))
        for kind, event in step.events:
            if kind == "notify":
                if event.get("method") == "notifications/progress":
                    if token is None:
                        continue
                    event = {
                        **event,
                        "params": {**(event.get("params") or {}), "progressToken": token},
                    }
                await send(event)
            else:
                await self._ask(event, send)
        response = step.response or {}
        await send({**response, "id": live["id"]})

    async def _ask(self, request: dict[str, Any], send: Send) -> dict[str, Any] | None:
        """Send a nested server request to the client and wait (bounded) for its answer."""
        ask_id = f"mcptape-mock-{next(self._ids)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asks[id_key(ask_id) or ""] = fut
        await send({**request, "id": ask_id})
        try:
            return await asyncio.wait_for(fut, self.ask_timeout)
        except TimeoutError:
            self.asks.pop(id_key(ask_id) or "", None)
            return None

    async def _forward(self, msg: dict[str, Any], send: Send) -> None:
        assert self.upstream is not None
        async with self._upstream_lock:
            if not self._upstream_ready:
                await self.upstream.start()
                self._upstream_ready = True
                # A fresh upstream must see the client's handshake before anything else.
                for hs in self.handshake:
                    if hs is msg:
                        continue
                    if hs.get("id") is not None:
                        await self.upstream.request(hs, self._no_events)
                    else:
                        await self.upstream.notify(hs)
        self.forwarded += 1

        async def on_event(kind: str, event: dict[str, Any]) -> dict[str, Any] | None:
            if kind == "notify":
                await send(event)
                return None
            answer = await self._ask(event, send)
            if answer is None:
                return {
                    "jsonrpc": "2.0",
                    "error": {"code": -32603, "message": "no answer from the client"},
                }
            return {k: v for k, v in answer.items() if k != "id"}

        try:
            reply = await self.upstream.request(msg, on_event)
        except (UserError, TimeoutError) as exc:
            await send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "error": {"code": -32603, "message": f"mcptape mock: forwarding failed: {exc}"},
                }
            )
            return
        await send({**reply, "id": msg["id"]})

    @staticmethod
    async def _no_events(kind: str, event: dict[str, Any]) -> None:
        return None


__all__ = ["ASK_TIMEOUT", "MockSession", "Send"]
