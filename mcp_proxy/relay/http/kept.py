"""What the recording keeps of a body that streams through: one path for the reverse relay
and the lean forward engine (request bodies streamed upstream, response bodies copied).

:class:`Kept` holds at most ``MAX_RECORDED_BODY`` bytes of a body, whatever its size, and the
size of the whole; :func:`streamed` hands a host's request body to the upstream's body writer
chunk by chunk, each chunk kept *before* it is handed on — when the upstream answers right after
a chunk went (an early 413), the generator is not resumed, and a copy taken after the ``yield``
would lose bytes that crossed the wire; :func:`drain` reads what a host still sends when the
upstream could not be reached (briefly), so the failed exchange is recorded with its body.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from mcp_proxy.limits import MAX_RECORDED_BODY, REQUEST_DRAIN
from mcp_proxy.relay.http.chunks import Chunks

__all__ = ["Kept", "drain", "streamed"]


class Kept:
    """The first ``MAX_RECORDED_BODY`` bytes of a body that streams through, and its size."""

    __slots__ = ("kept", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.kept = 0
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.kept < MAX_RECORDED_BODY:
            piece = (
                chunk
                if len(chunk) <= MAX_RECORDED_BODY - self.kept
                else chunk[: MAX_RECORDED_BODY - self.kept]
            )
            self.parts.append(piece)
            self.kept += len(piece)

    def head(self, limit: int) -> bytes:
        """Up to ``limit`` of the first bytes kept (a look at a body still streaming)."""
        return b"".join(self.parts[:64])[:limit]

    def take(self) -> bytes:
        """The kept bytes, once (the parts are let go)."""
        parts, self.parts = self.parts, []
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @property
    def cut(self) -> bool:
        """Less was kept than went through."""
        return self.size > self.kept


async def streamed(content: Chunks, kept: Kept, went: Callable[[], None]) -> AsyncIterator[bytes]:
    """The host's body for the upstream's body writer, each chunk kept before it is handed
    on (see the module doc); ``went`` once the last chunk went."""
    async for chunk in content.iter_any():
        kept.add(chunk)
        yield chunk
    went()


async def drain(content: Chunks, kept: Kept) -> None:
    """Read what the host still sends (``REQUEST_DRAIN`` s at most), keeping the capped copy."""
    if content.at_eof():
        return
    with contextlib.suppress(Exception):
        async with asyncio.timeout(REQUEST_DRAIN):
            async for chunk in content.iter_any():
                kept.add(chunk)
