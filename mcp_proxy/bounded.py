"""Bounded helpers: the means by which the limits of :mod:`mcp_proxy.limits` are kept.

A peer's bytes are never trusted to be small. Each helper here holds at most a stated number of
bytes or entries, whatever the peer sends, and says when it had to stop (so the caller can
record what fits and add a finding). Core: imports nothing of the project but ``limits``.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from mcp_proxy.limits import INFLATE_STEP, MAX_INFLATED_BODY

# --- Bounded decoding of bodies (inflate) ---

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


def remember[K: Hashable, V](table: OrderedDict[K, V], key: K, value: V, limit: int) -> None:
    """``table[key] = value``, the oldest entry (in insertion order) forgotten past ``limit``.

    An ``OrderedDict``, not a plain ``dict``: deleting a plain dict's first entry leaves a
    dummy slot that every later ``next(iter(table))`` walks past until the dict is resized, so
    a full table of ``limit`` entries cost O(``limit``) per insert (the pairing's 50,000 request
    ids made ``check`` quadratic on a long session); ``popitem(last=False)`` is O(1)."""
    table[key] = value
    if len(table) > limit:
        table.popitem(last=False)


class IdleLru[K: Hashable, V]:
    """A map of at most ``max_entries``, whose entries also go once unused for ``idle`` seconds.

    Kept in order of last use (an ``OrderedDict``): :meth:`get` and :meth:`put` move an entry to
    the end, so the least recently used is first. Past ``max_entries`` the least recently used
    entry goes at once; :meth:`sweep` removes the entries unused for ``idle`` seconds, looking at
    the stale ones only (it stops at the first fresh entry). Each entry removed is handed to
    ``on_evict`` (to close a pool, a socket…). ``clock`` is injectable for tests.

    :meth:`arm` runs :meth:`sweep` on an event loop's timer every ``interval`` seconds while the
    map holds anything — a timer, not a scan per use — so an entry idle for ``idle`` seconds is
    gone at most ``interval`` seconds later, even when nothing else happens.
    """

    def __init__(
        self,
        max_entries: int,
        idle: float,
        on_evict: Callable[[K, V], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.idle = idle
        self.on_evict = on_evict
        self.clock = clock
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interval = 0.0
        self._each: Callable[[V], object] | None = None
        #: Entries removed so far because the map was full (the rest went idle or were popped).
        self.evicted_full = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries[key] = (found[0], self.clock())
        self._entries.move_to_end(key)
        return found[0]

    def touch(self, key: K) -> None:
        """Mark ``key`` used now (an entry still busy must not look idle)."""
        self.get(key)

    def put(self, key: K, value: V) -> None:
        """Add (or replace) ``key``; the least recently used entry goes when the map is full."""
        self._entries[key] = (value, self.clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            old_key, (old, _) = self._entries.popitem(last=False)
            self.evicted_full += 1
            self.on_evict(old_key, old)
        self._schedule()

    def pop(self, key: K) -> V | None:
        """Remove ``key`` without calling ``on_evict``."""
        found = self._entries.pop(key, None)
        return None if found is None else found[0]

    def values(self) -> list[V]:
        return [v for v, _ in self._entries.values()]

    def sweep(self) -> int:
        """Remove the entries unused for ``idle`` seconds or more; how many went."""
        limit = self.clock() - self.idle
        gone = 0
        entries = self._entries
        while entries:
            key, (value, used) = next(iter(entries.items()))
            if used > limit:
                break
            del entries[key]
            gone += 1
            self.on_evict(key, value)
        return gone

    def clear(self) -> list[V]:
        """Remove everything (no ``on_evict``) and stop the timer; the values removed."""
        self.disarm()
        out = self.values()
        self._entries.clear()
        return out

    # ------------------------------------------------------------------ the timer
    def arm(
        self,
        loop: asyncio.AbstractEventLoop,
        interval: float,
        each: Callable[[V], object] | None = None,
    ) -> None:
        """Sweep on ``loop`` every ``interval`` s while the map is not empty; ``each`` is then
        called with every value left (a pool closing its own idle connections)."""
        self._loop = loop
        self._interval = interval
        self._each = each
        self._schedule()

    @property
    def armed(self) -> bool:
        """A sweep is scheduled (only while the map holds anything)."""
        return self._timer is not None

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _schedule(self) -> None:
        if self._loop is None or self._timer is not None or not self._entries:
            return
        self._timer = self._loop.call_later(self._interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.sweep()
        each = self._each
        if each is not None:
            for value in self.values():
                each(value)
        self._schedule()


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when ``value`` nests deeper than ``limit`` containers (iterative: never recurses)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
