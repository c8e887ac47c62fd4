"""The host's request as it arrives at the front (``front.py``): its headers and its body.

:class:`Headers` is a case-insensitive view of the raw header pairs the relay forwards as they
came; :class:`Body` is the request body as llhttp hands it over, with back-pressure on the
host's connection (:data:`~mcp_proxy.limits.BODY_HIGH`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Protocol

from mcp_proxy.limits import BODY_HIGH

__all__ = ["Body", "Headers", "Reading"]


class Reading(Protocol):
    """The connection a body arrives on: it stops and resumes reading from the host."""

    def pause_body(self) -> None: ...

    def resume_body(self) -> None: ...


class Headers:
    """A case-insensitive, read-only view of the host's headers (first value wins).

    A linear scan per lookup: the relay asks for two or three names per request, cheaper than
    decoding every header into a mapping.
    """

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower().encode("latin-1")
        n = len(key)
        for k, v in self._raw:
            if len(k) == n and k.lower() == key:
                return v.decode("utf-8", "surrogateescape")
        return default

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None


class Body:
    """The request body as it arrives: ``readany``/``iter_any``/``at_eof``, with back-pressure."""

    __slots__ = ("_chunks", "_conn", "_discard", "_eof", "_exc", "_size", "_waiter")

    def __init__(self, conn: Reading) -> None:
        self._conn = conn
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._discard = False

    def discard(self) -> None:
        """Drop what is buffered and what still comes (the response is already out)."""
        self._discard = True
        self._chunks.clear()
        self._size = 0
        self._conn.resume_body()

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
        self._size += len(data)
        if self._size > BODY_HIGH:
            self._conn.pause_body()
        self._wake()

    def feed_eof(self) -> None:
        self._eof = True
        self._wake()

    def set_exception(self, exc: BaseException) -> None:
        if not self._eof:
            self._exc = exc
        self._wake()

    @property
    def complete(self) -> bool:
        return self._eof

    def at_eof(self) -> bool:
        return self._eof and not self._chunks

    async def readany(self) -> bytes:
        while not self._chunks:
            if self._eof:
                return b""
            if self._exc is not None:
                raise self._exc
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        data = self._chunks.popleft()
        self._size -= len(data)
        if self._size <= BODY_HIGH // 2:
            self._conn.resume_body()
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
