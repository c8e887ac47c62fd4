"""Decompression bombs through both HTTP paths (issue #22, defect 1).

A compressed body of a few MB that inflates past 5 GiB went through ``record --upstream`` and
``record --forward`` and took their memory with it (3.1 GiB peak for 768 MiB inflated; 5 GiB
killed them). Each test runs the real subprocess (relay or forward proxy, and its recorder
process) against a raw origin that sends a bomb (gzip, deflate, br) as an MCP response, and a
host that posts one as its request body. The host must receive exactly the compressed bytes the
origin sent (and the origin exactly the ones the host sent), the next request must be answered,
and every mcptape process must peak (VmHWM) at no more than 300 MiB. The recording keeps the
first ``MAX_INFLATED_BODY`` decoded bytes as an incomplete frame, with a ``recorder.body_cut``
finding.

The bombs are built cheaply and once: a flushed, dictionary-reset compressed MiB of zeros is the
same bytes every time, so it is repeated (gzip and deflate as one stream each, the trailer's
CRC-32 or Adler-32 computed; brotli as one stream of repeated flushed 16 MiB blocks).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import brotli
import pytest

from mcp_proxy.limits import MAX_INFLATED_BODY
from mcp_proxy.relay.http.common import cut_findings, decode_for_record
from tests.conftest import matrix
from tests.forward.conftest import run_forward
from tests.helpers.db import wait_until
from tests.relay.conftest import Proxy, run_proxy

pytestmark = pytest.mark.timeout(120)

#: What every bomb inflates to: past 5 GiB.
INFLATED = (5 << 30) + (64 << 20)
#: The most any mcptape process may peak at (VmHWM) while a bomb goes through.
PEAK_MIB = 300
CODINGS = ("gzip", "deflate", "br")
PING = b'{"jsonrpc":"2.0","id":2,"method":"ping"}'
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big","arguments":{}}}'
ANSWER = b'{"jsonrpc":"2.0","id":2,"result":{}}'
MIB = 1 << 20


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def _crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A + B from CRC(A), CRC(B) and len(B) (zlib's ``crc32_combine``)."""
    odd = [0xEDB88320] + [1 << n for n in range(31)]
    even = _gf2_square(odd)
    odd = _gf2_square(even)
    while len2:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
    return crc1 ^ crc2


def _crc32_zeros(n: int) -> int:
    """CRC-32 of ``n`` zero bytes without reading them (doubling from one byte)."""
    crc, piece, plen = 0, zlib.crc32(b"\0"), 1
    first = True
    while n:
        if n & 1:
            crc = piece if first else _crc32_combine(crc, piece, plen)
            first = False
        n >>= 1
        if n:
            piece = _crc32_combine(piece, piece, plen)
            plen *= 2
    return crc


def _repeated(wbits: int, size: int) -> tuple[bytes, bytes, bytes]:
    """(head, the flushed MiB of zeros that repeats, the last block) of a zlib-family stream."""
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(MIB)
    first = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)  # (with the gzip or zlib header)
    again = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    assert again == z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    return first, again * (size // MIB - 1), z.flush()


def _gzip_stream(size: int) -> bytes:
    """One gzip member of ``size`` zeros (a multiple of a MiB); its trailer computed."""
    head, body, end = _repeated(16 + zlib.MAX_WBITS, size)
    return head + body + end[:-8] + struct.pack("<II", _crc32_zeros(size), size & 0xFFFFFFFF)


def _deflate_stream(size: int) -> bytes:
    """One zlib stream of ``size`` zeros (RFC 9110's deflate); its Adler-32 computed."""
    head, body, end = _repeated(zlib.MAX_WBITS, size)
    adler = ((size % 65521) << 16) | 1  # Adler-32 of zeros: a = 1, b = n mod 65521
    return head + body + end[:-4] + struct.pack(">I", adler)


def _brotli_stream(size: int) -> bytes:
    """One brotli stream of ``size`` zeros: a flushed 16 MiB block repeated."""
    block = 16 * MIB
    b = brotli.Compressor(quality=1, lgwin=24)
    zeros = bytes(block)
    first = b.process(zeros) + b.flush()
    again = b.process(zeros) + b.flush()
    assert again == b.process(zeros) + b.flush()
    return first + again * (size // block - 1) + b.finish()


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    out = {
        "gzip": _gzip_stream(INFLATED),
        "deflate": _deflate_stream(INFLATED),
        "br": _brotli_stream(INFLATED),
    }
    assert all(len(b) < 6 * MIB for b in out.values()), {k: len(v) for k, v in out.items()}
    return out


def test_the_cheap_bombs_are_valid_streams() -> None:
    """The cheap constructions are real streams, checked whole on small ones."""
    for n in (1, 3, 1000, MIB, 3 * MIB):
        assert _crc32_zeros(n) == zlib.crc32(bytes(n))
    assert gzip.decompress(_gzip_stream(8 * MIB)) == bytes(8 * MIB)
    assert zlib.decompress(_deflate_stream(8 * MIB)) == bytes(8 * MIB)
    assert brotli.decompress(_brotli_stream(48 * MIB)) == bytes(48 * MIB)


def test_decode_for_record_keeps_the_limit_whole_and_cuts_past_it() -> None:
    """The near miss and the trigger of ``recorder.body_cut``, without a process (fast)."""
    exact = decode_for_record(_gzip_stream(MAX_INFLATED_BODY), "gzip", "response", None)
    assert exact.complete and exact.note is None and exact.data == bytes(MAX_INFLATED_BODY)
    over = decode_for_record(_gzip_stream(MAX_INFLATED_BODY + MIB), "gzip", "request", None)
    assert not over.complete and over.data == bytes(MAX_INFLATED_BODY)
    assert over.note is not None
    cut = over.note["request_body_inflate_cut"]
    assert cut == {"coding": "gzip", "wire_size": cut["wire_size"], "recorded": MAX_INFLATED_BODY}
    (finding,) = cut_findings(over.note)
    assert finding["code"] == "recorder.body_cut" and finding["severity"] == "warning"
    assert "request body (gzip" in finding["detail"]
    assert cut_findings({"response_body_inflate_broken": {}}) == []
    broken = decode_for_record(_gzip_stream(8 * MIB)[:-100], "gzip", "response", None)
    assert not broken.complete and broken.note and "response_body_inflate_broken" in broken.note
    junk = decode_for_record(b"not gzip", "gzip", "response", "application/json")
    assert junk.data is None and junk.note and "not decoded" in junk.note["response_body"]["note"]


# --------------------------------------------------------------------------- the origin
@dataclass
class BombOrigin:
    """An HTTP/1.1 origin on 127.0.0.1: ``?bomb=CODING`` answers with that bomb; anything
    else with a small JSON-RPC result. Keeps the SHA-256 of every request body it got."""

    bombs: dict[str, bytes]
    port: int = 0
    got: list[tuple[str, str]] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                digest = hashlib.sha256()
                while length:
                    piece = await reader.read(min(length, MIB))
                    if not piece:
                        return
                    digest.update(piece)
                    length -= len(piece)
                target = head.split(b" ", 2)[1].decode()
                self.got.append((target, digest.hexdigest()))
                coding = target.partition("bomb=")[2]
                body = self.bombs[coding] if coding else ANSWER
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%bContent-Length: %d"
                    b"\r\n\r\n"
                    % (b"Content-Encoding: %b\r\n" % coding.encode() if coding else b"", len(body))
                )
                view = memoryview(body)
                for i in range(0, len(body), MIB):
                    writer.write(view[i : i + MIB])
                    await writer.drain()
                await writer.drain()


@contextlib.contextmanager
def bomb_origin(bombs: dict[str, bytes]) -> Iterator[BombOrigin]:
    origin = BombOrigin(bombs)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: list[asyncio.Server] = []

    async def start() -> None:
        server = await asyncio.start_server(origin.serve, "127.0.0.1", 0)
        origin.port = server.sockets[0].getsockname()[1]
        holder.append(server)
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()))
    thread.daemon = True
    thread.start()
    assert ready.wait(10)
    try:
        yield origin
    finally:

        async def stop() -> None:
            holder[0].close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


# --------------------------------------------------------------------------- the host
def exchange(
    addr: tuple[str, int], target: str, body: bytes, extra: bytes = b""
) -> tuple[bytes, bytes]:
    """One request on a fresh connection: (response head, response body exactly as received)."""
    netloc = urlsplit(target).netloc or f"{addr[0]}:{addr[1]}"
    with socket.create_connection(addr, timeout=60) as s:
        s.sendall(
            b"POST %b HTTP/1.1\r\nHost: %b\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n"
            b"%bContent-Length: %d\r\n\r\n" % (target.encode(), netloc.encode(), extra, len(body))
        )
        view = memoryview(body)
        for i in range(0, len(body), MIB):
            s.sendall(view[i : i + MIB])
        data = bytearray()
        while b"\r\n\r\n" not in data:
            got = s.recv(MIB)
            assert got, bytes(data)
            data += got
        head, _, rest = bytes(data).partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        )
        out = bytearray(rest)
        while len(out) < length:
            got = s.recv(MIB)
            assert got, len(out)
            out += got
    return head, bytes(out)


# --------------------------------------------------------------------------- measuring
def _children(pid: int) -> list[int]:
    out = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (p / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(p.name))
    return out


def peaks_mib(pid: int) -> dict[int, float]:
    """VmHWM of ``pid`` and of every process under it (its recorder process)."""
    out: dict[int, float] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(_children(p))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    out[p] = int(line.split()[1]) / 1024
    return out


def recorded(px: Proxy) -> dict[str, Any]:
    """What the recording says of the bombs (queried while the process still runs)."""
    frames = px.query(
        "SELECT direction, complete, size, length(raw) AS n, substr(raw, 1, 16) AS head"
        " FROM frames ORDER BY session_id, seq"
    )
    findings = px.query("SELECT code, detail FROM findings WHERE code = 'recorder.body_cut'")
    return {"frames": [dict(r) for r in frames], "findings": [dict(r) for r in findings]}


def _bombs_recorded(px: Proxy) -> bool:
    rec = recorded(px)
    big = [f for f in rec["frames"] if f["n"] == MAX_INFLATED_BODY]
    return len(big) == 2 and len(rec["findings"]) == 2


def run_bombs(
    px: Proxy, addr: tuple[str, int], origin: BombOrigin, coding: str, bomb: bytes, mcp_path: str
) -> None:
    """The host's three requests, and every assertion on the wire, the memory and the record."""
    sha = hashlib.sha256(bomb).hexdigest()
    # 1. The response is a bomb: the host gets its exact bytes.
    head, body = exchange(addr, f"{mcp_path}?bomb={coding}", CALL)
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"content-encoding: " + coding.encode() in head.lower(), head
    assert len(body) == len(bomb) and hashlib.sha256(body).hexdigest() == sha
    # 2. The request is a bomb: the origin gets its exact bytes.
    extra = b"Content-Encoding: %b\r\n" % coding.encode()
    head, body = exchange(addr, mcp_path, bomb, extra)
    assert head.startswith(b"HTTP/1.1 200") and body == ANSWER, (head, body)
    assert origin.got[-1][1] == sha
    # 3. The next request is answered.
    head, body = exchange(addr, mcp_path, PING)
    assert head.startswith(b"HTTP/1.1 200") and body == ANSWER, (head, body)
    assert wait_until(lambda: _bombs_recorded(px), 60), recorded(px)
    peaks = peaks_mib(px.proc.pid)
    assert len(peaks) >= 2, peaks  # the relay and its recorder process
    print(f"{coding}: peak RSS (MiB) by pid: {peaks}")
    assert max(peaks.values()) <= PEAK_MIB, peaks
    rec = recorded(px)
    big = [f for f in rec["frames"] if f["n"] == MAX_INFLATED_BODY]
    assert sorted(f["direction"] for f in big) == ["c2s", "s2c"]
    assert all(f["complete"] == 0 and f["head"] == bytes(16) for f in big), big
    assert all(coding in f["detail"] for f in rec["findings"]), rec["findings"]
    assert px.stop() == 0


@pytest.mark.parametrize("coding", matrix(CODINGS, keep={"gzip"}))
def test_bomb_through_the_reverse_relay(
    coding: str, bombs: dict[str, bytes], tmp_path: Path
) -> None:
    with bomb_origin(bombs) as origin:
        with run_proxy(f"http://127.0.0.1:{origin.port}/mcp", tmp_path / "rec.db") as px:
            port = int(px.url.rsplit(":", 1)[1].split("/", 1)[0])
            run_bombs(px, ("127.0.0.1", port), origin, coding, bombs[coding], "/mcp")


@pytest.fixture(scope="module")
def mitm_confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mitmproxy's configuration directory (its CA is made on first start; the origin is
    plain HTTP, so no upstream CA is needed)."""
    return tmp_path_factory.mktemp("mitm")


# Under --full: the default run keeps the reverse relay's gzip bomb end to end, the forward
# proxy's flat memory under a 512 MiB answer (tests/forward/test_bounded.py) and inflate's unit
# tests for every coding (tests/test_bounded.py); both proxies record through the one
# decode_for_record (relay/http/common.py).
@pytest.mark.parametrize("coding", matrix(CODINGS, keep=set()))
def test_bomb_through_the_forward_proxy(
    coding: str, bombs: dict[str, bytes], tmp_path: Path, mitm_confdir: Path
) -> None:
    with bomb_origin(bombs) as origin:
        with run_forward(tmp_path / "rec.db", mitm_confdir) as fw:
            host, port = fw.url.removeprefix("http://").rsplit(":", 1)
            # Absolute-form requests (``HTTP_PROXY`` for an http:// server): the same addon and
            # recording path as a tunnel's, without a TLS handshake per request.
            run_bombs(
                fw,
                (host, int(port)),
                origin,
                coding,
                bombs[coding],
                f"http://127.0.0.1:{origin.port}/mcp",
            )
