"""Forwarding to a real server (record modes): stdio or Streamable HTTP, captured frame by frame.

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


class StdioUpstream(Upstream):
    """A server subprocess spoken to over stdio; its traffic is captured frame by frame."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        self.argv = argv
        self.timeout = timeout
        self.captured = Captured("stdio", command=list(argv))
        self.proc: asyncio.subprocess.Process | None = None
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.handlers: dict[str, OnEvent] = {}
        self.reader: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

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
            found = messages_in(line)
            if len(found) != 1:
                continue
            msg = found[0]
            if "method" in msg:
                # Events belong to the one forwarded request in flight (stdio has no routing).
                handler = next(iter(self.handlers.values()), None)
                if handler is None:
                    continue
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
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(UserError("the upstream server closed its output"))

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
    """The real server misses go to: a command (stdio) or a URL (HTTP), or none."""
    if command:
        return StdioUpstream(command, timeout)
    if upstream:
        return HttpUpstream(upstream, timeout)
    return None


__all__ = ["Captured", "HttpUpstream", "OnEvent", "StdioUpstream", "Upstream", "make_upstream"]
