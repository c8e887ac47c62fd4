"""A body as it arrives on one of the relay's connections: the host's request body (``front.py``)
and the upstream's response body (``upstream.py``) are the same thing — the chunks llhttp gave,
then the end or what broke it — so they are one class.

Bounded: reading from the peer pauses while more than ``high`` bytes wait here and resumes when
half of that was taken (:data:`~mcp_proxy.limits.BODY_HIGH` for a host's request,
:data:`~mcp_proxy.limits.UPSTREAM_BODY_HIGH` for an upstream's response).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

__all__ = ["Chunks", "Reading"]


class Reading(Protocol):
    """The connection a body arrives on: it stops and resumes reading from its peer."""

    def pause_body(self) -> None: ...

    def resume_body(self) -> None: ...


class Chunks:
    """A body as it arrives: ``readany``/``iter_any``/``read``, with back-pressure on its
    connection; ``feed``/``feed_eof``/``set_exception`` from the connection's parser."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_discard",
        "_eof",
        "_exc",
        "_high",
        "_paused",
        "_size",
        "_waiter",
        "total_bytes",
    )

    def __init__(self, conn: Reading, high: int) -> None:
        self._conn = conn
        self._high = high
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._discard = False
        #: Bytes received so far.
        self.total_bytes = 0

    def _wake(self) -> None:
        w = self._waiter
        if w is not None:
            self._waiter = None
            if not w.done():
                w.set_result(None)

    def feed(self, data: bytes) -> None:
        if self._discard:
            return
        self._chunks.append(data)
        n = len(data)
        self._size += n
        self.total_bytes += n
        if self._size > self._high and not self._paused:
            self._paused = True
            self._conn.pause_body()
        if self._waiter is not None:
            self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        if self._waiter is not None:
            self._wake()

    def set_exception(self, exc: BaseException) -> None:
        if not self._eof:
            self._exc = exc
        self._wake()

    def discard(self) -> None:
        """Drop what is buffered and what still comes (the response is already out)."""
        self._discard = True
        self._chunks.clear()
        self._taken(self._size)

    def exception(self) -> BaseException | None:
        return self._exc

    @property
    def complete(self) -> bool:
        """The body's end arrived."""
        return self._eof

    def is_eof(self) -> bool:
        """The body's end arrived (bytes may still wait to be read)."""
        return self._eof

    def at_eof(self) -> bool:
        """The body ended and every byte of it was read."""
        return self._eof and not self._chunks

    def _taken(self, n: int) -> None:
        self._size -= n
        if self._paused and self._size <= self._high // 2:
            self._paused = False
            self._conn.resume_body()

    def read_nowait(self) -> bytes:
        """Every byte waiting here, at once."""
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._taken(len(data))
        return data

    async def readany(self) -> bytes:
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._chunks.popleft()
        self._taken(len(data))
        return data

    async def iter_any(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.readany()
            if not chunk:
                return
            yield chunk

    async def read(self) -> bytes:
        parts = [c async for c in self.iter_any()]
        return b"".join(parts)
