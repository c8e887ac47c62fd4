"""What the lean forward engine keeps of a body that streams through it: at most
``MAX_RECORDED_BODY`` bytes for the addon, whatever the body's size (issue #22, "Bounded").

The body itself goes on through :class:`~mcp_proxy.relay.http.upstream.UpstreamPool`'s streamed
body writer (the reverse relay's path) or, for a response, the engine's write loop; only the
capped copy stays here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from mcp_proxy.limits import MAX_RECORDED_BODY, REQUEST_DRAIN
from mcp_proxy.relay.http.front import FrontRequest

__all__ = ["Kept", "drain", "stream_body"]


class Kept:
    """What the recording keeps of a body that streams through: its first
    ``MAX_RECORDED_BODY`` bytes, and the size of the whole."""

    __slots__ = ("kept", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.kept = 0
        self.size = 0

    def add(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.kept < MAX_RECORDED_BODY:
            piece = chunk[: MAX_RECORDED_BODY - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)

    def take(self) -> bytes:
        """The kept bytes, once (the parts are let go)."""
        parts, self.parts = self.parts, []
        return parts[0] if len(parts) == 1 else b"".join(parts)

    @property
    def cut(self) -> bool:
        return self.size > self.kept


async def stream_body(
    req: FrontRequest, kept: Kept, done: Callable[[], None]
) -> AsyncIterator[bytes]:
    """The host's body, chunk by chunk, for the upstream pool's body writer; a copy of its first
    ``MAX_RECORDED_BODY`` bytes kept after each chunk went; ``done`` once the last one went."""
    async for chunk in req.content.iter_any():
        yield chunk
        kept.add(chunk)
    done()


async def drain(req: FrontRequest, kept: Kept) -> None:
    """Read what the host still sends (``REQUEST_DRAIN`` s at most), keeping the capped copy."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(REQUEST_DRAIN):
            async for chunk in req.content.iter_any():
                kept.add(chunk)
