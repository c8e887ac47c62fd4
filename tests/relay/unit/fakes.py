"""A scripted upstream for unit tests of the HTTP relay, at its seam (``upstream.Upstream``).

:class:`FakeUpstream` answers each request with the next :class:`Script`: a status, headers, and
a body given as steps — bytes (a chunk), a float (a pause, in seconds), an exception (the
upstream breaks the body there) — or fails the request itself (``error``: refused, reset before
the head, timed out). No socket is opened; what the relay sent is kept in ``sent``.

:func:`host_request` is the host: one raw HTTP/1.1 exchange with the relay's own front server
on 127.0.0.1 (the host side of the relay is the production code under test).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy

from mcp_proxy.relay.http.common import RelayConfig
from mcp_proxy.relay.http.server import HTTPRelay

Step = bytes | float | BaseException


@dataclass
class Script:
    """One upstream answer."""

    status: int = 200
    headers: list[tuple[str, str]] = field(
        default_factory=lambda: [("Content-Type", "application/json")]
    )
    body: list[Step] = field(default_factory=list)
    #: Add ``Content-Length`` (the sum of the body's bytes) unless headers carry one.
    length: bool = True
    reason: str = "OK"
    #: Raised by ``request`` instead of answering (the request still counts as sent).
    error: BaseException | None = None
    #: Seconds before the head comes back.
    delay: float = 0.0
    #: Answer before reading the request body (an early 413).
    early: bool = False


class FakeBody:
    """The body of a :class:`FakeReply`, step by step."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = deque(steps)
        self.read_all = not steps

    def is_eof(self) -> bool:
        return not any(isinstance(s, bytes | BaseException) for s in self.steps)

    def at_eof(self) -> bool:
        return not self.steps

    async def next_chunk(self) -> bytes:
        """The next chunk of bytes (pauses waited out, errors raised); ``b""`` at the end."""
        while self.steps:
            step = self.steps.popleft()
            if isinstance(step, float | int):
                await asyncio.sleep(step)
            elif isinstance(step, BaseException):
                raise step
            elif step:
                return step
        return b""

    async def readany(self) -> bytes:
        chunk = await self.next_chunk()
        if not chunk:
            self.read_all = True
        return chunk

    async def iter_any(self) -> AsyncIterator[bytes]:
        while chunk := await self.next_chunk():
            yield chunk
        self.read_all = True


class FakeReply:
    """An :class:`~mcp_proxy.relay.http.upstream.UpstreamReply` from a script."""

    def __init__(self, script: Script) -> None:
        self.status = script.status
        self.reason = script.reason
        pairs = list(script.headers)
        size = sum(len(s) for s in script.body if isinstance(s, bytes))
        if script.length and not any(k.lower() == "content-length" for k, _ in pairs):
            pairs.append(("Content-Length", str(size)))
        self.headers = CIMultiDictProxy(CIMultiDict(pairs))
        self.raw_headers = tuple((k.encode(), v.encode()) for k, v in pairs)
        self.content_type = self.headers.get("Content-Type", "")
        self.content_encoding = self.headers.get("Content-Encoding", "")
        length = self.headers.get("Content-Length")
        self.content_length = int(length) if length is not None and length.isdigit() else None
        self.content = FakeBody(script.body)
        self.sock = None
        self.released = False
        self.closed = False

    def has_buffered_body(self) -> bool:
        steps = self.content.steps
        return not steps or isinstance(steps[0], bytes)

    async def read(self) -> bytes:
        return b"".join([c async for c in self.content.iter_any()])

    def release(self) -> None:
        if not (self.released or self.closed):  # once, as the real reply: later calls are no-ops
            self.released = True

    def close(self) -> None:
        if not (self.released or self.closed):
            self.closed = True


class FakeUpstream:
    """An :class:`~mcp_proxy.relay.http.upstream.Upstream` that answers from scripts."""

    def __init__(self, *scripts: Script) -> None:
        self.scripts = deque(scripts)
        #: (request head, body bytes) of each request, in order.
        self.sent: list[tuple[bytes, bytes]] = []
        self.replies: list[FakeReply] = []
        self.closed = False

    async def request(
        self,
        head: bytes,
        body: bytes | AsyncIterator[bytes] | None,
        *,
        head_only: bool = False,
        chunked: bool = False,
        on_sent: Callable[[], None] | None = None,
    ) -> FakeReply:
        script = self.scripts.popleft() if self.scripts else Script(body=[b"{}"])
        got = b""
        if isinstance(body, bytes):
            got = body
        elif body is not None and not script.early:
            got = b"".join([c async for c in body])
        self.sent.append((head, got))
        if on_sent is not None:
            on_sent()
        if script.delay:
            await asyncio.sleep(script.delay)
        if script.error is not None:
            raise script.error
        reply = FakeReply(script)
        if head_only:
            reply.content = FakeBody([])
        self.replies.append(reply)
        return reply

    async def close(self) -> None:
        self.closed = True


@dataclass
class HostReply:
    """What the host got: the raw bytes, and the head and body parsed from them."""

    raw: bytes
    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def parse_reply(raw: bytes) -> HostReply:
    head, sep, rest = raw.partition(b"\r\n\r\n")
    if not sep:
        return HostReply(raw)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [(k, v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    body = rest
    if any(k.lower() == "transfer-encoding" for k, _ in headers):
        out = b""
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            out += rest[:n]
            rest = rest[n + 2 :]
            if n == 0:
                break
        body = out
    return HostReply(raw, status, headers, body)


async def host_request(
    port: int,
    method: str = "POST",
    path: str = "/mcp",
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    read_until: Callable[[bytes], bool] | None = None,
    raw_body: list[bytes] | None = None,
) -> HostReply:
    """One request from the host; reads until the relay closes (``Connection: close``) or
    ``read_until`` says the bytes so far suffice (the host then closes: a stream abandoned)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    h = {"Host": f"127.0.0.1:{port}", "Connection": "close", **(headers or {})}
    if body or method == "POST":
        h.setdefault("Content-Type", "application/json")
        if raw_body is None:
            h["Content-Length"] = str(len(body))
        else:
            h["Transfer-Encoding"] = "chunked"
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    writer.write(head.encode() + b"\r\n" + body)
    for piece in raw_body or []:
        writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
    if raw_body is not None:
        writer.write(b"0\r\n\r\n")
    got = b""
    try:
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            got += chunk
            if read_until is not None and read_until(got):
                break
    finally:
        writer.close()
    return parse_reply(got)


class Relay:
    """An in-process relay on a :class:`FakeUpstream`, recording into ``recorder``."""

    def __init__(self, upstream: FakeUpstream, recorder: Any, **config: Any) -> None:
        self.upstream = upstream
        self.relay = HTTPRelay(
            RelayConfig("http://upstream.test/mcp", port=0, **config), recorder, pool=upstream
        )
        self.port = 0

    async def __aenter__(self) -> Relay:
        url = await self.relay.start()
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.relay.close()


class Recorder:
    """A recorder that keeps every call (the relay's whole conversation with it)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.findings: list[dict[str, Any]] = []
        self._n = 0

    def new_session(self, *, transport: str, **fields: Any) -> str:
        self._n += 1
        self.calls.append(("new_session", fields))
        return f"s{self._n}"

    def put(self, session_id: str, frame: Any) -> None:
        self.calls.append(("put", frame))

    def new_exchange(self, session_id: str, **fields: Any) -> int:
        self.calls.append(("new_exchange", fields))
        return len(self.calls)

    def update_exchange(self, local_id: int, **fields: Any) -> None:
        self.calls.append(("update_exchange", fields))

    def record_exchange(self, session_id: str, *, frames: list[Any], **fields: Any) -> int:
        self.calls.append(("record_exchange", (frames, fields)))
        return len(self.calls)

    def update_session(self, session_id: str, **fields: Any) -> None:
        self.calls.append(("update_session", fields))

    def end_session(self, session_id: str, **fields: Any) -> None:
        self.calls.append(("end_session", fields))

    def add_finding(self, session_id: str, **finding: Any) -> None:
        self.findings.append(finding)

    def exchange(self) -> dict[str, Any]:
        """The exchange's row as recorded: its fields, every update folded in."""
        row: dict[str, Any] = {}
        for kind, data in self.calls:
            if kind == "record_exchange":
                row.update(data[1])
            elif kind in ("new_exchange", "update_exchange"):
                row.update(data)
        return row

    def frames(self) -> list[Any]:
        out: list[Any] = []
        for kind, data in self.calls:
            if kind == "record_exchange":
                out += data[0]
            elif kind == "put":
                out.append(data)
        return out


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Wait (on the loop) until ``predicate()`` holds; fail after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)
