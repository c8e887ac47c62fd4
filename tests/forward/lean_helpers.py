"""A tiny HTTP/1.1 origin for the lean forward engine's tests: what the SDK servers never do.

:class:`RawOrigin` runs an ``asyncio`` server (plain or TLS, with the test CA's certificate)
on its own event loop in a thread, so a test's client and the origin never share a loop. It
keeps what the proxy-side tests need to assert on: every connection it accepted (a count: the
proxy's upstream pooling is visible there), and every request exactly as it arrived on the wire
(head bytes, body wire bytes, decoded body).

Routes (by path):

- ``/echo``: a JSON-RPC result whose text is the request body's length and SHA-256, with a
  ``Content-Length``; the connection stays open (keep-alive).
- ``/hold?respond=0|1``: an event stream: one ``notifications/progress`` event (and, with
  ``respond=1``, the JSON-RPC response event), then nothing until the peer goes away; records
  when it did (``gone`` is set).
- ``/cut``: ``Content-Length: 1000`` with 100 bytes of it, then a TCP reset.
- ``/streamed-head``: (for ``HEAD``) a head with ``Transfer-Encoding: chunked`` and no body;
  ``/head-length``: (for ``HEAD``) ``Content-Length: 42`` and no body.
- ``/no-content``: ``204``; ``/not-modified``: ``304`` with an ``ETag``.
- ``/sink``: a body of any size hashed as it arrives (never held): answers its size and SHA-256.
- ``/big-json?mib=N``: an ``application/json`` JSON-RPC answer of N MiB, chunked (no length).
- ``/blob?mib=N``: N MiB of octets, chunked (traffic that is not MCP).
- ``/secret-hop``: a JSON answer whose ``Connection`` names ``X-Secret-Hop`` (hop-by-hop: it
  must not reach the host).
- anything else: ``404``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    """One request as the origin received it."""

    head: bytes
    wire_body: bytes
    body: bytes

    def header(self, name: str) -> str | None:
        want = name.lower().encode()
        for line in self.head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == want:
                return v.strip().decode("latin-1")
        return None


@dataclass
class RawOrigin:
    """The running origin (see the module docstring)."""

    host: str
    port: int
    tls: bool
    connections: int = 0
    requests: list[Seen] = field(default_factory=list)
    gone: threading.Event = field(default_factory=threading.Event)

    @property
    def origin(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


def rpc_result(body: bytes) -> bytes:
    digest = hashlib.sha256(body).hexdigest()
    text = f"{len(body)}:{digest}"
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": text}]}},
        separators=(",", ":"),
    ).encode()


PROGRESS = (
    b'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
    b'"params":{"progressToken":1,"progress":1}}\n\n'
)
ANSWER = b'event: message\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\n\n'


def big_json(mib: int) -> Iterator[bytes]:
    """A JSON-RPC result of about ``mib`` MiB, in 1 MiB pieces (the same bytes every time)."""
    yield b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"'
    piece = (bytes(range(97, 123)) * 40330)[: 1 << 20]  # 1 MiB of letters
    for _ in range(mib):
        yield piece
    yield b'"}]}}'


async def _hash_body(reader: asyncio.StreamReader, head: bytes) -> tuple[int, str]:
    """(size, SHA-256) of a request body with a length or chunked, read piece by piece."""
    h = hashlib.sha256()
    size = 0
    if b"\r\ntransfer-encoding: chunked" in head.lower():
        while True:
            line = await reader.readuntil(b"\r\n")
            n = int(line.split(b";")[0].strip(), 16)
            while n:
                data = await reader.read(min(n, 1 << 20))
                if not data:
                    raise asyncio.IncompleteReadError(b"", n)
                h.update(data)
                size += len(data)
                n -= len(data)
            await reader.readexactly(2)
            if line.split(b";")[0].strip() == b"0":
                return size, h.hexdigest()
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v.strip())
    while n:
        data = await reader.read(min(n, 1 << 20))
        if not data:
            raise asyncio.IncompleteReadError(b"", n)
        h.update(data)
        size += len(data)
        n -= len(data)
    return size, h.hexdigest()


async def _read_body(reader: asyncio.StreamReader, head: bytes) -> tuple[bytes, bytes]:
    """(wire bytes, decoded body) of a request whose head is ``head``."""
    lower = head.lower()
    if b"\r\ntransfer-encoding: chunked" in lower:
        wire = bytearray()
        body = bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            wire += line
            size = int(line.split(b";")[0].strip(), 16)
            data = await reader.readexactly(size + 2)
            wire += data
            body += data[:size]
            if size == 0:
                return bytes(wire), bytes(body)
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v.strip())
            data = await reader.readexactly(n)
            return data, data
    return b"", b""


async def _serve(
    origin: RawOrigin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    origin.connections += 1
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            target = head.split(b" ", 2)[1].decode("latin-1")
            parts = urlsplit(target)
            query = parse_qs(parts.query)
            if parts.path == "/sink":
                # A large upload, hashed as it arrives (never held): its size and SHA-256.
                size, digest = await _hash_body(reader, head)
                origin.requests.append(Seen(head, b"", b""))
                out = json.dumps({"size": size, "sha256": digest}).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(out), out)
                )
                await writer.drain()
                continue
            wire, body = await _read_body(reader, head)
            origin.requests.append(Seen(head, wire, body))
            if parts.path == "/big-json":
                # An MCP answer of N MiB, application/json, chunked (no Content-Length).
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                for piece in big_json(int(query.get("mib", ["1"])[0])):
                    writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            elif parts.path == "/echo":
                out = rpc_result(body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(out), out)
                )
                await writer.drain()
            elif parts.path == "/hold":
                events = PROGRESS + (ANSWER if query.get("respond") == ["1"] else b"")
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"%x\r\n%b\r\n" % (len(events), events)
                )
                await writer.drain()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reader.read(), 30)  # until the proxy lets go
                origin.gone.set()
                return
            elif parts.path == "/cut":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n"
                    + b'{"jsonrpc":"2.0","id":1,"result":'
                    + b"x" * 67
                )
                await writer.drain()
                await asyncio.sleep(0.2)
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            elif parts.path == "/streamed-head":
                # What a streaming server answers to HEAD: the GET's head, no length, no body.
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                await writer.drain()
            elif parts.path == "/head-length":
                # HEAD's answer: the GET's Content-Length, no body.
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 42\r\n\r\n"
                )
                await writer.drain()
            elif parts.path == "/blob":
                # N MiB of octets, chunked: other traffic (no MCP in it), large.
                size = int(query.get("mib", ["1"])[0]) << 20
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
                piece = b"\xab" * (1 << 20)
                for _ in range(size >> 20):
                    writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            elif parts.path == "/secret-hop":
                out = rpc_result(body)
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Connection: close, X-Secret-Hop\r\nX-Secret-Hop: 1\r\nX-Kept: 2\r\n"
                    b"Content-Length: %d\r\n\r\n%b" % (len(out), out)
                )
                await writer.drain()
                return
            elif parts.path == "/no-content":
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
            elif parts.path == "/not-modified":
                writer.write(b'HTTP/1.1 304 Not Modified\r\nETag: "v1"\r\n\r\n')
                await writer.drain()
            else:
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
    except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
        return
    except asyncio.CancelledError:
        return  # the origin stops: end quietly (asyncio logs a cancelled handler as an error)
    finally:
        with contextlib.suppress(Exception):
            writer.close()


@contextlib.contextmanager
def raw_origin(ssl_context: ssl.SSLContext | None = None) -> Iterator[RawOrigin]:
    """Run a :class:`RawOrigin` on 127.0.0.1 (TLS when ``ssl_context``) until the block ends."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, object] = {}

    async def start() -> None:
        origin = RawOrigin("127.0.0.1", 0, ssl_context is not None)
        server = await asyncio.start_server(
            lambda r, w: _serve(origin, r, w), "127.0.0.1", 0, ssl=ssl_context
        )
        origin.port = server.sockets[0].getsockname()[1]
        box["origin"] = origin
        box["server"] = server
        started.set()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    if not started.wait(10):
        raise RuntimeError("the raw origin did not start")
    try:
        yield box["origin"]  # type: ignore[misc]
    finally:
        server = box["server"]

        async def stop() -> None:
            server.close()  # type: ignore[attr-defined]
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        loop.close()


async def connect_tunnel(
    proxy_url: str, authority: str, *, head_extra: bytes = b""
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, bytes]:
    """A raw connection to the proxy with ``CONNECT authority`` sent; (reader, writer, answer
    head)."""
    host, port = proxy_url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"CONNECT %b HTTP/1.1\r\nHost: %b\r\n%b\r\n"
        % (authority.encode(), authority.encode(), head_extra)
    )
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    return reader, writer, head


async def read_response(reader: asyncio.StreamReader, within: float = 10.0) -> tuple[bytes, bytes]:
    """(head, body) of one HTTP/1.1 response with a Content-Length or chunked body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), within)
    _, body = await asyncio.wait_for(
        _read_body(reader, b"X\r\n" + head.split(b"\r\n", 1)[1]), within
    )
    return head, body
