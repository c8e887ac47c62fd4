"""Bounded helpers: the means by which the limits of :mod:`mcp_proxy.limits` are kept.

A peer's bytes are never trusted to be small. Each helper here holds at most a stated number of
bytes or entries, whatever the peer sends, and says when it had to stop (so the caller can
record what fits and add a finding). Core: imports nothing of the project but ``limits``.
"""

from __future__ import annotations

# --- Bounded decoding of bodies (inflate) ---
import zlib
from dataclasses import dataclass
from typing import Any

from mcp_proxy.limits import INFLATE_STEP, MAX_INFLATED_BODY

#: The content codings :func:`inflate` decodes (``x-gzip`` is gzip's old name).
CODINGS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})


class InflateError(ValueError):
    """A body :func:`inflate` cannot decode: a coding it does not know (or whose decoder is not
    installed), or bytes that are not in that coding from their first byte on."""


@dataclass(frozen=True, slots=True)
class Inflated:
    """What :func:`inflate` got out of a body: never more than its ``limit`` bytes."""

    #: The decoded bytes: the whole body, or its first ``limit`` bytes when ``cut``.
    data: bytes
    #: The decoded body goes on past the limit; decoding stopped there.
    cut: bool
    #: The coded stream came to its end (False when it was cut, or the body stops mid-stream or
    #: turns to garbage part-way: ``data`` is then what decoded before that).
    ended: bool


class _Out:
    """Decoded pieces up to ``limit`` bytes; one byte more is asked for, to tell a body of
    exactly ``limit`` bytes from a longer one."""

    __slots__ = ("cut", "limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.cut = False

    def want(self) -> int:
        """Bytes to ask of the decoder next (never 0: zlib reads 0 as "no limit")."""
        return min(INFLATE_STEP, self.limit - self.size + 1)

    def add(self, chunk: bytes) -> bool:
        """Keep a decoded piece; True once the output went past the limit (stop decoding)."""
        if chunk:
            self.parts.append(chunk)
            self.size += len(chunk)
        if self.size > self.limit:
            self.cut = True
            return True
        return False

    def data(self) -> bytes:
        parts = self.parts
        if self.cut:
            over = self.size - self.limit
            parts[-1] = parts[-1][: len(parts[-1]) - over]
        if len(parts) == 1:
            return parts[0]
        out = b"".join(parts)
        parts.clear()
        return out


def inflate(body: bytes, coding: str, limit: int = MAX_INFLATED_BODY) -> Inflated:
    """Decode a ``Content-Encoding``'d body for the recording, to at most ``limit`` bytes.

    Incremental: the decoder is fed :data:`~mcp_proxy.limits.INFLATE_STEP` bytes at a time and
    asked for no more output than still fits, so a decompression bomb costs ``limit`` bytes of
    memory, not what it inflates to. gzip (every member), deflate (zlib-wrapped or raw, as
    browsers accept), br and zstd (every frame). Raises :class:`InflateError` for an unknown or
    uninstalled coding and for bytes that are not in the coding at all; a body that breaks off
    or turns to garbage part-way returns what decoded before, with ``ended`` False.
    """
    coding = coding.strip().lower()
    out = _Out(max(0, limit))
    if coding in ("gzip", "x-gzip"):
        run = _gzip
    elif coding == "deflate":
        run = _deflate
    elif coding == "br":
        run = _brotli
    elif coding == "zstd":
        run = _zstd
    else:
        raise InflateError(f"content coding {coding!r} is not decoded")
    view = memoryview(body)
    try:
        ended = run(view, out)
    except InflateError:
        raise
    except Exception as exc:  # zlib.error, brotli.error, ZstdError, EOFError …
        if not out.size:
            raise InflateError(f"not {coding} data ({exc})") from exc
        ended = False
    return Inflated(out.data(), out.cut, ended and not out.cut)


def _zlib_stream(data: memoryview, wbits: int, out: _Out) -> int | None:
    """One zlib/gzip/raw-deflate stream from the head of ``data``: the offset just past its end,
    or None when the output went past the limit or the input ran out first."""
    d = zlib.decompressobj(wbits)
    pos = 0
    pending: bytes | memoryview = b""
    while not d.eof:
        if not pending:
            if pos >= len(data):
                return None
            pending = data[pos : pos + INFLATE_STEP]
            pos += len(pending)
        if out.add(d.decompress(pending, out.want())):
            return None
        pending = d.unconsumed_tail
    return pos - len(d.unused_data) - len(pending)


def _gzip(data: memoryview, out: _Out) -> bool:
    pos = 0
    while True:
        used = _zlib_stream(data[pos:], 16 + zlib.MAX_WBITS, out)
        if used is None:
            return False
        pos += used
        # Another member may follow (zero padding between members is skipped, as gzip does);
        # anything else after a complete member is ignored, as zlib and browsers do.
        while pos < len(data) and data[pos] == 0:
            pos += 1
        if data[pos : pos + 2] != b"\x1f\x8b":
            return True


def _deflate(data: memoryview, out: _Out) -> bool:
    # RFC 9110's "deflate" is zlib-wrapped; many servers send raw deflate. Browsers accept
    # both: the zlib header decides.
    try:
        return _zlib_stream(data, zlib.MAX_WBITS, out) is not None
    except zlib.error:
        if out.size:
            raise
    return _zlib_stream(data, -zlib.MAX_WBITS, out) is not None


def _brotli(data: memoryview, out: _Out) -> bool:
    try:
        import brotli  # mitmproxy's dependency (Google's binding)
    except ImportError as exc:
        raise InflateError("br bodies are not decoded: the brotli module is not installed") from exc
    d = brotli.Decompressor()
    pos = 0
    while not d.is_finished():
        if d.can_accept_more_data():
            if pos >= len(data):
                return False
            chunk: bytes | memoryview = data[pos : pos + INFLATE_STEP]
            pos += len(chunk)
        else:
            chunk = b""
        # The output buffer stops growing at the limit asked for (it may pass it by one growth
        # step, which _Out trims).
        if out.add(d.process(chunk, output_buffer_limit=out.want())):
            return False
    return True


def _zstd_module() -> Any:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python ≥ 3.14
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,no-redef]  # mitmproxy's
        except ImportError as exc:
            raise InflateError(
                "zstd bodies are not decoded: neither compression.zstd nor backports.zstd is there"
            ) from exc
    return zstd


def _zstd(data: memoryview, out: _Out) -> bool:
    zstd = _zstd_module()
    pos = 0
    while True:
        d = zstd.ZstdDecompressor()
        while not d.eof:
            if d.needs_input:
                if pos >= len(data):
                    return False
                chunk: bytes | memoryview = data[pos : pos + INFLATE_STEP]
                pos += len(chunk)
            else:
                chunk = b""
            if out.add(d.decompress(chunk, out.want())):
                return False
        pos -= len(d.unused_data)
        if pos >= len(data):
            return True  # frames follow one another; the body ends after one


# --- Bounded maps and pools (LRU, idle sweep) ---
