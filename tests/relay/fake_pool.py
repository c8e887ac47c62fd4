"""A fake upstream for unit tests of the HTTP relay: the real pool, without a socket.

:class:`FakeUpstreamPool` is :class:`~mcp_proxy.relay.http.upstream.UpstreamPool` with only the
connection replaced: each request is written to a :class:`ScriptedTransport` that records the
bytes and answers with the next scripted response, fed to the production protocol
(``UpstreamConnection``: llhttp through httptools). Everything above the socket — request
writing, response parsing, keep-alive reuse,
release/close — is the production code.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from mcp_proxy.relay.http.upstream import UpstreamConnection, UpstreamPool


class ScriptedTransport(asyncio.Transport):
    """Records what the relay writes; answers each complete request with scripted bytes."""

    def __init__(self, pool: FakeUpstreamPool, proto: UpstreamConnection) -> None:
        super().__init__()
        self.pool = pool
        self.proto = proto
        self.closed = False
        self.pauses = 0
        self.resumes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.pool.written.append(bytes(data))
        if self.pool.responses:
            answer = self.pool.responses.popleft()
            loop = asyncio.get_running_loop()
            if isinstance(answer, bytes):
                loop.call_later(self.pool.delay, self.proto.data_received, answer)
                return
            for delay, piece in answer:  # an answer in pieces, each after its delay
                loop.call_later(delay, self.proto.data_received, piece)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.proto.connection_lost, None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        self.pauses += 1

    def resume_reading(self) -> None:
        self.resumes += 1


class FakeUpstreamPool(UpstreamPool):
    """An upstream pool whose connections answer from a script (one response per request)."""

    def __init__(self, *responses: bytes | list[tuple[float, bytes]]) -> None:
        super().__init__("upstream.test", 80, tls=False)
        #: One answer per request: bytes, or ``[(delay s, bytes), …]`` pieces.
        self.responses: deque[bytes | list[tuple[float, bytes]]] = deque(responses)
        self.written: list[bytes] = []
        self.connections = 0
        #: The connections made, in order.
        self.live: list[UpstreamConnection] = []
        #: Seconds before each answer arrives (a slow call: the exchange registers live).
        self.delay = 0.0

    async def _connect(self) -> UpstreamConnection:
        proto = UpstreamConnection(asyncio.get_running_loop())
        proto.connection_made(ScriptedTransport(self, proto))
        self.connections += 1
        self.live.append(proto)
        return proto
