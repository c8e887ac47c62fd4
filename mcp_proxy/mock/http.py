"""The mock over HTTP: Streamable HTTP (both eras) and the legacy HTTP+SSE transport.

- ``POST`` (any path but the legacy ones): one :class:`MockSession` per MCP session, created on
  ``initialize`` (which hands out an ``Mcp-Session-Id``), or one shared session for sessionless
  (2026-07-28) clients. Replies are SSE when the exchange has notifications or nested requests,
  plain JSON otherwise.
- SSE events carry ids (``<stream>-<n>``) and are kept per session, so a client that lost a
  stream can ``GET`` with ``Last-Event-ID`` and receive what followed that event (then the
  rest of the stream if it is still open) — the resumption the SDK's event store offers.
- ``GET /sse`` opens a legacy (2024-11-05) session: an ``endpoint`` event names
  ``/messages/?session_id=…``; POSTs there answer 202 and the replies ride the GET stream.
- Fault rules (:mod:`.faults`) apply to each POST's message and to each frame the mock sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from mcp_proxy.errors import UserError
from mcp_proxy.mcp_client import compact
from mcp_proxy.mock.faults import REORDER_WAIT, Gate, MockFaults, Verdict
from mcp_proxy.mock.session import MockSession

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def encode(msg: dict[str, Any]) -> bytes:
    """A message as bytes for the wire; an answer too deep to re-encode becomes an error."""
    try:
        return compact(msg)
    except (RecursionError, ValueError):
        err = {
            "code": -32603,
            "message": "mcptape mock: the recorded answer nests too deep to re-send",
        }
        return compact({"jsonrpc": "2.0", "id": msg.get("id"), "error": err})


@dataclass
class _Stream:
    """One SSE stream's events, kept so that ``Last-Event-ID`` can resume it."""

    number: int
    events: list[tuple[str, bytes]] = field(default_factory=list)
    done: bool = False
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, data: bytes) -> tuple[str, bytes]:
        event = (f"{self.number}-{len(self.events) + 1}", data)
        self.events.append(event)
        self.changed.set()
        return event

    def finish(self) -> None:
        self.done = True
        self.changed.set()


def sse_event(event_id: str | None, data: bytes, name: str = "message") -> bytes:
    head = f"id: {event_id}\r\n" if event_id else ""
    return f"{head}event: {name}\r\n".encode() + b"data: " + data + b"\r\n\r\n"


@dataclass
class _State:
    """Everything the HTTP mock keeps across requests."""

    factory: Callable[[], MockSession]
    sessions: dict[str, MockSession] = field(default_factory=dict)
    shared: list[MockSession] = field(default_factory=list)
    every: list[MockSession] = field(default_factory=list)
    streams: dict[str, _Stream] = field(default_factory=dict)
    legacy: dict[str, asyncio.Queue[dict[str, Any] | bytes | None]] = field(default_factory=dict)
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new_session(self) -> MockSession:
        s = self.factory()
        self.every.append(s)
        return s

    def session_for(self, request: web.Request, msg: Any) -> tuple[MockSession, str | None]:
        sid = request.headers.get("Mcp-Session-Id")
        if sid and sid in self.sessions:
            return self.sessions[sid], None
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            new = uuid.uuid4().hex
            self.sessions[new] = self.new_session()
            return self.sessions[new], new
        if not self.shared:
            self.shared.append(self.new_session())
        return self.shared[0], None

    def new_stream(self) -> _Stream:
        stream = _Stream(next(self.numbers))
        self.streams[str(stream.number)] = stream
        return stream


def _release(gate: Gate, queue: asyncio.Queue[dict[str, Any] | bytes | None]) -> None:
    """Held (reordered) frames nothing overtook go out late, on the legacy stream."""
    for data in gate.flush():
        queue.put_nowait(data)


async def _discard(msg: dict[str, Any]) -> None:
    return None


def _parse_error() -> web.Response:
    err = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
    return web.json_response(err, status=400)


def _parse(body: bytes) -> tuple[bool, Any]:
    from mcp_proxy.normalize import safe_loads

    msg = safe_loads(body)
    return msg is not None or body.strip() == b"null", msg


class HttpMock:
    """The aiohttp handlers over one :class:`_State`."""

    def __init__(
        self,
        factory: Callable[[], MockSession],
        faults: MockFaults | None = None,
        stop: asyncio.Event | None = None,
    ) -> None:
        self.state = _State(factory)
        self.faults = faults
        self.stop = stop or asyncio.Event()

    async def injected(
        self, request: web.Request, verdict: Verdict, headers: dict[str, str], wait: float
    ) -> web.StreamResponse:
        """A client message a fault rule dealt with before the mock saw it."""
        if verdict.status is not None:
            return web.Response(status=verdict.status, headers=verdict.headers, body=verdict.body)
        if verdict.disconnect:
            return self.cut(request, verdict.disconnect)
        if verdict.payloads:
            return web.Response(
                body=verdict.payloads[0], headers=headers, content_type="application/json"
            )
        # Dropped: a server that never answers; the client's own timeout decides.
        resp = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
        await resp.prepare(request)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), wait)
        return resp

    def cut(self, request: web.Request, mode: str) -> web.StreamResponse:
        """``disconnect``: abort the connection (``close-stdin`` also stops serving)."""
        if mode == "close-stdin":
            self.stop.set()
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=204)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET" and request.path.rstrip("/").endswith("/sse"):
            return await self.legacy_stream(request)
        if request.method == "POST" and request.path.rstrip("/").endswith("/messages"):
            return await self.legacy_post(request)
        if request.method == "DELETE":
            self.state.sessions.pop(request.headers.get("Mcp-Session-Id", ""), None)
            return web.Response(status=200)
        if request.method == "GET" and request.headers.get("Last-Event-ID"):
            return await self.resume(request)
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        body = await request.read()
        verdict = await self.faults.inbound(body) if self.faults else None
        if verdict is not None and verdict.payloads and not verdict.consumed:
            body = verdict.payloads[0]  # an intercepted message, edited
        ok, msg = _parse(body)
        if not ok and not (verdict and verdict.consumed):
            return _parse_error()
        mock, new_sid = self.state.session_for(request, msg)
        headers = {"Mcp-Session-Id": new_sid} if new_sid else {}
        if verdict is not None and verdict.consumed:
            return await self.injected(request, verdict, headers, mock.ask_timeout)
        if verdict is not None and verdict.disconnect == "end-stream":
            return await self.answer(request, mock, msg, headers, end_after=verdict.after)
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("method"), str)
            or msg.get("id") is None
        ):
            await mock.on_client_message(msg, _discard)
            return web.Response(status=202, headers=headers)
        return await self.answer(request, mock, msg, headers)

    async def answer(
        self,
        request: web.Request,
        mock: MockSession,
        msg: dict[str, Any],
        headers: dict[str, str],
        end_after: int | None = None,
    ) -> web.StreamResponse:
        out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def run() -> None:
            try:
                await mock.on_client_message(msg, out.put)
            finally:
                await out.put(None)

        task = asyncio.create_task(run())
        gate = self.faults.gate() if self.faults else None

        async def drain() -> None:
            while await out.get() is not None:
                pass
            await task

        first = await out.get()
        if first is None:
            await task
            return web.Response(status=202, headers=headers)
        raw = encode(first)
        verdict = await gate.out(raw) if gate else Verdict()
        if verdict.status is not None:  # the response had not started: a status instead
            await drain()
            return web.Response(status=verdict.status, headers=verdict.headers, body=verdict.body)
        limit = verdict.after if verdict.disconnect == "end-stream" else end_after
        if verdict.disconnect and limit is None:
            await drain()
            return self.cut(request, verdict.disconnect)
        payloads = [raw] if limit is not None else verdict.sends(raw)
        is_response = "method" not in first and first.get("id") == msg.get("id")
        if is_response and len(payloads) == 1 and limit is None and not (gate and gate.held):
            await task
            return web.Response(body=payloads[0], headers=headers, content_type="application/json")
        resp = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
        await resp.prepare(request)
        stream = self.state.new_stream()
        await self._stream_out(request, resp, stream, out, payloads, gate, limit)
        await task
        if is_response and not payloads and gate is not None:
            # The response was dropped: the client waits, as for a server that never answers.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), mock.ask_timeout)
        with contextlib.suppress(ConnectionResetError, RuntimeError):
            await resp.write_eof()
        return resp

    async def _stream_out(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        stream: _Stream,
        out: asyncio.Queue[dict[str, Any] | None],
        payloads: list[bytes],
        gate: Gate | None,
        limit: int | None = None,
    ) -> None:
        """Write the exchange's frames as SSE events, through the fault gate when there is one.

        Every event is kept on the stream (resumable with ``Last-Event-ID``) even once the
        client is gone or a fault ended the stream early.
        """
        ended = False  # the client's stream is over (a fault ended it, or the client left)
        # ``limit``: with end-stream, the events still to write before the stream ends.
        try:
            while True:
                for data in payloads:
                    event_id, data = stream.add(data)
                    if ended:
                        continue
                    if limit is not None and limit <= 0:
                        await resp.write_eof()
                        ended = True
                        continue
                    await resp.write(sse_event(event_id, data))
                    limit = None if limit is None else limit - 1
                item = await out.get()
                if item is None:
                    payloads = gate.flush() if gate else []
                    if not payloads:
                        break
                    continue
                raw = encode(item)
                verdict = await gate.out(raw) if gate else Verdict()
                if verdict.disconnect == "end-stream":
                    limit = verdict.after
                    payloads = [raw]
                    continue
                if verdict.disconnect and not ended:
                    self.cut(request, verdict.disconnect)
                    ended = True
                payloads = [raw] if verdict.disconnect else verdict.sends(raw)
        except (ConnectionResetError, RuntimeError):
            # The client went away; the exchange goes on, and a GET with Last-Event-ID
            # can pick up what it missed.
            while (item := await out.get()) is not None:
                stream.add(encode(item))
        finally:
            stream.finish()

    async def resume(self, request: web.Request) -> web.StreamResponse:
        """``GET`` with ``Last-Event-ID``: what followed that event on its stream."""
        last = request.headers.get("Last-Event-ID", "")
        stream = self.state.streams.get(last.split("-", 1)[0])
        known = [eid for eid, _ in stream.events] if stream is not None else []
        if stream is None or last not in known:
            return web.Response(status=404, text=f"unknown event id {last!r}")
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await resp.prepare(request)
        sent = known.index(last) + 1
        while True:
            stream.changed.clear()
            for event_id, data in stream.events[sent:]:
                await resp.write(sse_event(event_id, data))
            sent = len(stream.events)
            if stream.done:
                break
            await stream.changed.wait()
        await resp.write_eof()
        return resp

    async def legacy_stream(self, request: web.Request) -> web.StreamResponse:
        """``GET /sse``: a legacy session; the endpoint event, then every reply."""
        sid = uuid.uuid4().hex
        queue: asyncio.Queue[dict[str, Any] | bytes | None] = asyncio.Queue()
        self.state.legacy[sid] = queue
        self.state.sessions[f"legacy:{sid}"] = self.state.new_session()
        base = request.path.rstrip("/")[: -len("/sse")]
        resp = web.StreamResponse(status=200, headers=SSE_HEADERS)
        await resp.prepare(request)
        await resp.write(sse_event(None, f"{base}/messages/?session_id={sid}".encode(), "endpoint"))
        gate = self.faults.gate() if self.faults else None
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, bytes):  # answered by a fault rule in the server's place
                    await resp.write(sse_event(None, item))
                    continue
                raw = encode(item)
                verdict = await gate.out(raw) if gate else Verdict()
                if verdict.disconnect:
                    self.cut(request, verdict.disconnect)
                    break
                for data in verdict.sends(raw):
                    await resp.write(sse_event(None, data))
                if gate is not None and gate.held:
                    asyncio.get_running_loop().call_later(REORDER_WAIT, _release, gate, queue)
        except (ConnectionResetError, RuntimeError):
            pass
        finally:
            self.state.legacy.pop(sid, None)
            self.state.sessions.pop(f"legacy:{sid}", None)
        return resp

    async def legacy_post(self, request: web.Request) -> web.StreamResponse:
        """``POST /messages/?session_id=…``: 202 at once; the reply goes on the GET stream."""
        sid = request.query.get("session_id", "")
        queue = self.state.legacy.get(sid)
        mock = self.state.sessions.get(f"legacy:{sid}")
        if queue is None or mock is None:
            return web.Response(status=404, text="Could not find session")
        body = await request.read()
        verdict = await self.faults.inbound(body) if self.faults else None
        if verdict is not None and verdict.consumed:
            if verdict.status is not None:
                return web.Response(
                    status=verdict.status, headers=verdict.headers, body=verdict.body
                )
            if verdict.disconnect:
                queue.put_nowait(None)  # the server went away: its stream ends
                return self.cut(request, verdict.disconnect)
            for payload in verdict.payloads or []:
                queue.put_nowait(payload)
            return web.Response(status=202, text="Accepted")
        if verdict is not None and verdict.payloads:
            body = verdict.payloads[0]  # an intercepted message, edited
        ok, msg = _parse(body)
        if not ok:
            return web.Response(status=400, text="Could not parse message")
        task = asyncio.create_task(mock.on_client_message(msg, queue.put))
        mock.tasks.add(task)
        task.add_done_callback(mock.tasks.discard)
        return web.Response(status=202, text="Accepted")


async def serve_http(
    factory: Callable[[], MockSession],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
    faults: MockFaults | None = None,
) -> list[MockSession]:
    """Serve HTTP on ``host:port`` until ``stop`` is set (or the task is cancelled)."""
    stop = stop or asyncio.Event()
    mock = HttpMock(factory, faults, stop)
    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", mock.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        why = "address already in use" if exc.errno in (48, 98, 10048) else exc.strerror or exc
        raise UserError(f"cannot serve on {host}:{port}: {why}") from exc
    server = site._server
    bound = port
    sockets = getattr(server, "sockets", None) if server is not None else None
    if sockets:
        bound = sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    if ready is not None:
        ready(f"http://{shown}:{bound}/mcp")
    try:
        await stop.wait()
    finally:
        for q in list(mock.state.legacy.values()):
            q.put_nowait(None)
        await runner.cleanup()
    return mock.state.every


__all__ = ["HttpMock", "serve_http"]
