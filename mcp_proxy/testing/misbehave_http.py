"""An MCP server over HTTP that fails on purpose — the reference the fault tests compare with.

Fault injection promises that a host sees an injected fault exactly as it would see the same
failure from a real server. To check that, a test needs a server that *really* fails that way:
:class:`MisbehavingServer` is one. It stands in front of a real SDK test server (so everything
it does not break is the SDK's own behaviour) and breaks ``tools/call`` the way the URL's query
asks — written by hand here, independently of mcptape's fault code, so a test comparing the
two compares two implementations, not one with itself.

The client connects to ``server.url("status", status="429", header="Retry-After: 7")``
(``…/mcp?misbehave=status&status=429&header=Retry-After%3A%207``); the SDK client keeps the
query on every request of the session. Misbehaviours (on ``tools/call`` only; every other
message passes through untouched):

=================  ==============================================================================
``status``         answer ``status`` (+ ``header`` lines, optional ``body``) instead of the server
``error``          a JSON-RPC error (``code``, ``message``) with the call's id
``tool-error``     a tool result with ``isError: true`` (``text``)
``hang``           never answer (the request is held until the client leaves)
``delay``          answer ``ms`` milliseconds late
``reset``          close the connection before answering (request not forwarded)
``corrupt``        the answer's JSON-RPC message broken (``mode``: truncate, cut-utf8,
                   invalid-json); JSON bodies get a matching ``Content-Length``
``end-stream``     an event-stream answer ends (cleanly) just before the response event
``duplicate``      the response event sent twice
``reorder``        the response event sent before the event that preceded it
``drop-event``     the response event left out, the stream otherwise intact
``cut-stream``     the connection closed abruptly just before the response event
=================  ==============================================================================
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from mcp_proxy.framing import SSEEvent, SSEParser

__all__ = ["MisbehavingServer"]

_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"}


def _break(content: bytes, mode: str) -> bytes:
    """A JSON-RPC message broken by hand (the server's own mistakes, not mcptape's)."""
    if mode == "truncate":
        return content[: len(content) // 2]
    if mode == "cut-utf8":
        for i, byte in enumerate(content):
            if byte >= 0xC0:
                return content[: i + 1]
        return content[: len(content) // 2] + "€".encode()[:2]
    if mode == "invalid-json":
        return content.replace(b"{", b"{,", 1)
    raise ValueError(mode)


def _event(ev: SSEEvent, data: bytes) -> bytes:
    out = b""
    if ev.id is not None:
        out += b"id: " + ev.id.encode() + b"\n"
    if ev.event is not None:
        out += b"event: " + ev.event.encode() + b"\n"
    return out + b"".join(b"data: " + line + b"\n" for line in data.split(b"\n")) + b"\n"


def _modern(msg: dict[str, Any]) -> bool:
    """A 2026-07-28 request (its ``_meta`` names the protocol version)."""
    meta = (msg.get("params") or {}).get("_meta") or {}
    return meta.get("io.modelcontextprotocol/protocolVersion") == "2026-07-28"


def _is_response(ev: SSEEvent) -> bool:
    try:
        msg = json.loads(ev.data)
    except ValueError:
        return False
    return isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg)


class MisbehavingServer:
    """A reverse proxy to ``upstream`` (an SDK server's URL) that breaks ``tools/call``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.split("?", 1)[0]
        self.path = "/" + upstream.split("/", 3)[3] if upstream.count("/") >= 3 else "/"
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.ServerRunner | None = None

    # ------------------------------------------------------------------ lifecycle
    def url(self, behaviour: str | None = None, **params: str) -> str:
        """The URL a client uses to get ``behaviour`` (None: a well-behaved pass-through)."""
        base = f"http://127.0.0.1:{self.port}{self.path}"
        if behaviour is None:
            return base
        return base + "?" + urlencode({"misbehave": behaviour, **params})

    def start(self) -> MisbehavingServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the misbehaving server did not start")
        return self

    def stop(self) -> None:
        async def cleanup() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
            if self._session is not None:
                await self._session.close()

        fut = asyncio.run_coroutine_threadsafe(cleanup(), self.loop)
        with contextlib.suppress(Exception):
            fut.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        self._session = aiohttp.ClientSession(auto_decompress=False)
        server = web.Server(self._handle, handler_cancellation=True)
        self._runner = web.ServerRunner(server)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    # ------------------------------------------------------------------ requests
    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read() if request.body_exists else b""
        behaviour = request.query.get("misbehave")
        try:
            msg = json.loads(body) if body else None
        except ValueError:
            msg = None
        is_call = isinstance(msg, dict) and msg.get("method") == "tools/call"
        if not behaviour or not is_call:
            return await self._proxy(request, body, None)
        assert isinstance(msg, dict)
        q = request.query
        if behaviour == "status":
            resp = web.Response(status=int(q["status"]), body=q.get("body", "").encode())
            for line in q.getall("header", []):
                name, _, value = line.partition(":")
                resp.headers.add(name.strip(), value.strip())
            return resp
        if behaviour == "error":
            error = {"code": int(q.get("code", "-32603")), "message": q.get("message", "boom")}
            return web.json_response({"jsonrpc": "2.0", "id": msg.get("id"), "error": error})
        if behaviour == "tool-error":
            content = [{"type": "text", "text": q.get("text", "tool failed")}]
            result: dict[str, Any] = {"content": content, "isError": True}
            if _modern(msg):
                result["resultType"] = "complete"  # 2026-07-28 results say what they are
            return web.json_response({"jsonrpc": "2.0", "id": msg.get("id"), "result": result})
        if behaviour == "hang":
            await asyncio.Future()
        if behaviour == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if behaviour == "delay":
            await asyncio.sleep(int(q.get("ms", "0")) / 1000)
        return await self._proxy(request, body, behaviour)

    async def _proxy(
        self, request: web.BaseRequest, body: bytes, behaviour: str | None
    ) -> web.StreamResponse:
        assert self._session is not None
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP]
        async with self._session.request(
            request.method, self.upstream, headers=headers, data=body or None
        ) as up:
            out_headers = [(k, v) for k, v in up.headers.items() if k.lower() not in _HOP]
            ctype = up.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                data = await up.read()
                if behaviour == "corrupt" and data:
                    data = _break(data, request.query.get("mode", "truncate"))
                resp = web.Response(status=up.status, body=data)
                for k, v in out_headers:
                    resp.headers.add(k, v)
                return resp
            sresp = web.StreamResponse(status=up.status)
            for k, v in out_headers:
                sresp.headers.add(k, v)
            await sresp.prepare(request)
            await self._stream(up, sresp, behaviour, request)
            await sresp.write_eof()
            return sresp

    async def _stream(
        self,
        up: aiohttp.ClientResponse,
        sresp: web.StreamResponse,
        behaviour: Any,
        request: web.BaseRequest,
    ) -> None:
        mode = request.query.get("mode", "truncate")
        parser = SSEParser()
        previous: SSEEvent | None = None  # reorder: the event before the response, held
        async for chunk in up.content.iter_any():
            for ev in parser.feed(chunk):
                if behaviour is None or not _is_response(ev):
                    if behaviour == "reorder" and not ev.comment_only:
                        if previous is not None:
                            await sresp.write(previous.raw)
                        previous = ev
                        continue
                    await sresp.write(ev.raw)
                    continue
                if behaviour == "end-stream":
                    return
                if behaviour == "cut-stream":
                    if request.transport is not None:
                        request.transport.abort()
                    return
                if behaviour == "drop-event":
                    continue
                if behaviour == "corrupt":
                    await sresp.write(_event(ev, _break(ev.data, mode)))
                elif behaviour == "duplicate":
                    await sresp.write(ev.raw + ev.raw)
                elif behaviour == "reorder":
                    await sresp.write(ev.raw)
                    if previous is not None:
                        await sresp.write(previous.raw)
                        previous = None
                else:
                    await sresp.write(ev.raw)
        if previous is not None:
            await sresp.write(previous.raw)
