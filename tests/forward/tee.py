"""What the client saw: an httpx2 transport that keeps every byte of every exchange.

Wraps the real proxy-using transport; each request body and each response chunk is kept as it
reaches the SDK client (with the monotonic time it arrived), so a test can compare the recording
with what the client actually got, byte for byte and event by event.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

from mcp_proxy.framing import SSEParser


@dataclass
class Seen:
    method: str
    url: str
    request_body: bytes
    status: int = 0
    content_type: str = ""
    chunks: list[tuple[int, bytes]] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(c for _, c in self.chunks)

    def messages(self) -> list[bytes]:
        """The JSON-RPC messages of the response, as the client got them."""
        if self.content_type.startswith("text/event-stream"):
            parser = SSEParser()
            events = parser.feed(self.body)
            rest = parser.flush()
            if rest is not None:
                events.append(rest)
            return [e.data for e in events if not e.comment_only]
        body = self.body
        return [body] if body.lstrip()[:1] in (b"{", b"[") else []


class _TeeStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, seen: Seen) -> None:
        self.inner = inner
        self.seen = seen

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.seen.chunks.append((time.monotonic_ns(), bytes(chunk)))
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class TeeTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.seen: list[Seen] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        seen = Seen(request.method, str(request.url), body)
        self.seen.append(seen)
        response = await self.inner.handle_async_request(request)
        seen.status = response.status_code
        seen.content_type = response.headers.get("content-type", "")
        response.stream = _TeeStream(response.stream, seen)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
