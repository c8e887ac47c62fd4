"""Forwarding to a real server (record modes): stdio, Streamable HTTP or legacy HTTP+SSE, captured
frame by frame.

In the record modes ``once``, ``new_episodes`` and ``all`` the mock forwards requests to a real
server and keeps what crossed the wire (:class:`Captured`), to append it to the recording as a
new session. The HTTP side is an MCP client, with the one header rule of
:mod:`mcp_proxy.mcp_client` (the same replay uses).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction, classify, id_key
from mcp_proxy.mcp_client import ClientState, compact, messages_in
from mcp_proxy.recording.model import SessionRecording

#: What a forwarded request reports while it is open: ``("notify", msg)`` or ``("ask", msg)``
#: (a nested server request; the handler returns the client's answer, or None).
OnEvent = Callable[[str, dict[str, Any]], Awaitable[Any]]


@dataclass
class Captured:
    """Frames of forwarded traffic, kept to write the new episodes into the recording."""

    transport: str
    command: list[str] | None = None
    upstream: str | None = None
    frames: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def add(self, direction: Direction, raw: bytes, channel: Channel = Channel.STDIO) -> None:
        c = classify(raw, channel)
        self.frames.append(
            {
                "seq": len(self.frames) + 1,
                "ts": time.time(),
                "mono_ns": time.monotonic_ns(),
                "direction": direction.value,
                "channel": channel.value,
                "kind": c.kind.value,
                "method": c.method,
                "msg_id": c.msg_id,
                "error_code": c.error_code,
                "size": len(raw),
                "complete": True,
                "partial_parse": c.partial,
                "raw": raw,
                "http_exchange_id": None,
                "sse_id": None,
                "sse_event": None,
            }
        )

    def session(self, name: str | None) -> SessionRecording:
        """The forwarded traffic as a session (era and peers read off its handshake)."""
        import uuid

        from mcp_proxy.handshake import HandshakeTracker

        tracker = HandshakeTracker()
        facts: dict[str, Any] = {}
        for f in self.frames:
            c = classify(f["raw"], f["channel"])
            changes = tracker.observe(Direction(f["direction"]), c)
            if changes:
                facts.update(changes)
        from mcp_proxy import __version__

        row = {
            "id": uuid.uuid4().hex,
            "name": name,
            "transport": self.transport,
            "status": "ended",
            "started_at": self.started_at,
            "ended_at": time.time(),
            "updated_at": self.frames[-1]["ts"] if self.frames else None,
            "command": self.command,
            "upstream": self.upstream,
            "frame_count": len(self.frames),
            "gap_count": 0,
            "recorder_version": __version__,
            **facts,
        }
        row["meta"] = {**(facts.get("meta") or {}), "recorded_by": "mcptape mock"}
        return SessionRecording(row, frames=list(self.frames))


class Upstream:
    """A real server that misses are forwarded to (recording modes)."""

    captured: Captured

    async def start(self) -> None: ...

    async def request(self, msg: dict[str, Any], on_event: OnEvent) -> dict[str, Any]:
        raise NotImplementedError

    async def notify(self, msg: dict[str, Any]) -> None: ...

    async def close(self) -> None: ...


class _RoutedUpstream(Upstream):
    """An upstream whose messages arrive on one shared channel (a pipe, a legacy SSE stream).

    Responses are routed to the waiting request by id; a server request or notification belongs
    to the forwarded request in flight (neither stdio nor legacy SSE says which one).
    """

    def __init__(self, timeout: float, captured: Captured) -> None:
        self.timeout = timeout
        self.captured = captured
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.handlers: dict[str, OnEvent] = {}
        self.reader: asyncio.Task[None] | None = None

    async def _write(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    async def _route(self, data: bytes) -> None:
        """One message from the server: a response settles its request, the rest go to it."""
        found = messages_in(data)
        if len(found) != 1:
            return
        msg = found[0]
        if "method" in msg:
            handler = next(iter(self.handlers.values()), None)
            if handler is None:
                return
            if msg.get("id") is not None:
                answer = await handler("ask", msg)
                if answer is not None:
                    await self._write({**answer, "id": msg["id"]})
            else:
                await handler("notify", msg)
        elif msg.get("id") is not None:
            fut = self.waiting.pop(id_key(msg["id"]) or "", None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    def _closed(self, why: str) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(UserError(why))

    async def request(self, msg: dict[str, Any], on_event: OnEvent) -> dict[str, Any]:
        key = id_key(msg.get("id")) or ""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[key] = fut
        self.handlers[key] = on_event
        try:
            await self._write(msg)
            return await asyncio.wait_for(fut, self.timeout)
        finally:
            self.handlers.pop(key, None)
            self.waiting.pop(key, None)

    async def notify(self, msg: dict[str, Any]) -> None:
        await self._write(msg)


class StdioUpstream(_RoutedUpstream):
    """A server subprocess spoken to over stdio; its traffic is captured frame by frame."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        super().__init__(timeout, Captured("stdio", command=list(argv)))
        self.argv = argv
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=1 << 30,
            )
        except OSError as exc:
            raise UserError(f"cannot start the upstream server {self.argv[0]}: {exc}") from exc
        self.reader = asyncio.create_task(self._read())

    async def _write(self, msg: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        raw = compact(msg) + b"\n"
        self.captured.add(Direction.C2S, raw)
        self.proc.stdin.write(raw)
        await self.proc.stdin.drain()

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            self.captured.add(Direction.S2C, line)
            await self._route(line)
        self._closed("the upstream server closed its output")

    async def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            await self.proc.wait()
        if self.reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.reader, 2)


class LegacySseUpstream(_RoutedUpstream):
    """A legacy HTTP+SSE (2024-11-05) server: ``GET …/sse`` names where to POST; every reply,
    server request and notification rides that one GET stream (the POSTs answer 202).
    """

    def __init__(self, url: str, timeout: float) -> None:
        super().__init__(timeout, Captured("http", upstream=url))
        self.url = url
        self.client: Any = None
        self.post_url: str | None = None
        self._endpoint: asyncio.Future[str] | None = None
        self._stream: Any = None

    async def start(self) -> None:
        import aiohttp

        # No total timeout: the GET stream lives as long as the session.
        self.client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._endpoint = asyncio.get_running_loop().create_future()
        try:
            self._stream = await asyncio.wait_for(
                self.client.get(self.url, headers={"Accept": "text/event-stream"}), self.timeout
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise UserError(f"upstream {self.url}: {exc or type(exc).__name__}") from exc
        if self._stream.status != 200:
            raise UserError(f"upstream {self.url}: HTTP {self._stream.status} on GET")
        self.reader = asyncio.create_task(self._read())
        self.post_url = await asyncio.wait_for(asyncio.shield(self._endpoint), self.timeout)

    async def _read(self) -> None:
        from urllib.parse import urljoin

        from mcp_proxy.framing import SSEParser

        assert self._endpoint is not None
        parser = SSEParser()
        try:
            async for chunk in self._stream.content.iter_any():
                for ev in parser.feed(chunk):
                    if ev.event == "endpoint":
                        if not self._endpoint.done():
                            self._endpoint.set_result(urljoin(self.url, ev.data.decode().strip()))
                        continue
                    if not ev.data.strip():
                        continue
                    self.captured.add(Direction.S2C, ev.data, Channel.SSE)
                    await self._route(ev.data)
        except Exception:  # the stream broke: whoever waits is told below
            pass
        if not self._endpoint.done():
            self._endpoint.set_exception(UserError(f"upstream {self.url} sent no endpoint event"))
        self._closed(f"upstream {self.url} closed its SSE stream")

    async def _write(self, msg: dict[str, Any]) -> None:
        import aiohttp

        assert self.post_url is not None
        raw = compact(msg)
        self.captured.add(Direction.C2S, raw, Channel.HTTP)
        try:
            async with self.client.post(
                self.post_url,
                data=raw,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            ) as resp:
                if resp.status >= 400:
                    raise UserError(f"upstream {self.post_url}: HTTP {resp.status}")
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UserError(f"upstream {self.post_url}: {exc or type(exc).__name__}") from exc

    async def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(BaseException):
                await self.reader
        if self.client is not None:
            await self.client.close()


class HttpUpstream(Upstream):
    """A Streamable HTTP server; the session id and protocol version are carried over."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.captured = Captured("http", upstream=url)
        self.state = ClientState()
        self.client: Any = None

    async def start(self) -> None:
        import aiohttp

        self.client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    async def _post(
        self,
        msg: dict[str, Any],
        on_event: OnEvent | None,
    ) -> dict[str, Any] | None:
        import aiohttp

        raw = compact(msg)
        self.captured.add(Direction.C2S, raw, Channel.HTTP)
        try:
            headers = self.state.headers_for(msg)
            async with self.client.post(self.url, data=raw, headers=headers) as resp:
                self.state.learn_headers(resp.headers)
                return await self._reply(resp, on_event)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise UserError(f"upstream {self.url}: {exc or type(exc).__name__}") from exc

    async def _reply(self, resp: Any, on_event: OnEvent | None) -> dict[str, Any] | None:
        """The response message of a POST: from its SSE stream (events handled) or JSON body."""
        from mcp_proxy.framing import SSEParser

        if "text/event-stream" in resp.headers.get("Content-Type", ""):
            parser = SSEParser()
            async for chunk in resp.content.iter_any():
                for ev in parser.feed(chunk):
                    out = await self._event(ev.data, on_event)
                    if out is not None:
                        return out
            return None
        body = await resp.read()
        if body.strip():
            self.captured.add(Direction.S2C, body, Channel.HTTP)
        for reply in messages_in(body):
            self.state.learn_message(reply)
            return reply
        return None

    async def _event(self, data: bytes, on_event: OnEvent | None) -> dict[str, Any] | None:
        if not data.strip():
            return None
        self.captured.add(Direction.S2C, data, Channel.SSE)
        found = messages_in(data)
        if not found:
            return None
        msg = found[0]
        if "method" not in msg:
            self.state.learn_message(msg)
            return msg
        if on_event is not None:
            if msg.get("id") is not None:
                answer = await on_event("ask", msg)
                if answer is not None:
                    await self._post({**answer, "id": msg["id"]}, None)
            else:
                await on_event("notify", msg)
        return None

    async def request(self, msg: dict[str, Any], on_event: OnEvent) -> dict[str, Any]:
        reply = await self._post(msg, on_event)
        if reply is None:
            raise UserError(f"upstream {self.url} gave no response to {msg.get('method')}")
        return reply

    async def notify(self, msg: dict[str, Any]) -> None:
        await self._post(msg, None)

    async def close(self) -> None:
        if self.client is not None:
            if self.state.session_id:
                headers = {"Mcp-Session-Id": self.state.session_id}
                with contextlib.suppress(Exception):
                    await self.client.delete(self.url, headers=headers)
            await self.client.close()


def make_upstream(
    command: list[str] | None, upstream: str | None, timeout: float
) -> Upstream | None:
    """The real server misses go to: a command (stdio), a URL (Streamable HTTP, or legacy
    HTTP+SSE when its path ends in ``/sse``, as ``replay --upstream`` decides), or none."""
    if command:
        return StdioUpstream(command, timeout)
    if upstream and urlsplit(upstream).path.rstrip("/").endswith("/sse"):
        return LegacySseUpstream(upstream, timeout)
    if upstream:
        return HttpUpstream(upstream, timeout)
    return None


__all__ = [
    "Captured",
    "HttpUpstream",
    "LegacySseUpstream",
    "OnEvent",
    "StdioUpstream",
    "Upstream",
    "make_upstream",
]
