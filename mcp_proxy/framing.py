"""Incremental, byte-exact framing: stdio lines and Server-Sent Events.

Transports read arbitrary chunks; these classes turn them into frames without ever changing a
byte. Concatenating the ``raw`` of every frame a framer produced (including :meth:`flush`)
reproduces the input exactly. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass


class LineFramer:
    """Split a byte stream into lines, each kept *with* its ``\\n`` terminator.

    A last line without a terminator comes out of :meth:`flush` (marked incomplete by the caller).
    A partial line is held as a list of chunks while small; past :data:`BIG` it moves into one
    ``bytearray`` that grows in place, so a 64 MiB line is never held twice (chunks + join).
    Lines that went through that path are returned as ``bytearray``.
    """

    BIG = 1 << 20
    __slots__ = ("_big", "_parts", "_size")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._big: bytearray | None = None
        self._size = 0

    @property
    def pending(self) -> int:
        """Bytes held for a line that has not ended yet."""
        return self._size

    def _hold(self, piece: bytes) -> None:
        self._size += len(piece)
        if self._big is not None:
            self._big += piece
        elif self._size > self.BIG:
            self._big = bytearray().join(self._parts)
            self._big += piece
            self._parts = []
        else:
            self._parts.append(piece)

    def _take(self) -> bytes | bytearray:
        data: bytes | bytearray
        if self._big is not None:
            data = self._big
            self._big = None
        else:
            data = b"".join(self._parts)
            self._parts = []
        self._size = 0
        return data

    def feed(self, chunk: bytes) -> list[bytes | bytearray]:
        lines: list[bytes | bytearray] = []
        find = chunk.find
        nl = find(b"\n")
        if nl < 0:
            if chunk:
                self._hold(chunk)
            return lines
        start = 0
        if self._size:
            self._hold(chunk[: nl + 1])
            lines.append(self._take())
            start = nl + 1
            nl = find(b"\n", start)
        if b"\r" not in chunk:
            # Without a CR, bytes.splitlines cuts exactly at each LF (it knows no other line
            # end for bytes): one C call for the whole read instead of a find and a slice per
            # line in Python, the hot path of a relay's 64 KiB reads.
            more = (chunk[start:] if start else chunk).splitlines(True)
            if more and more[-1][-1] != 10:  # the read ends inside a line
                self._hold(more.pop())
            if lines:
                lines += more
                return lines
            return more  # type: ignore[return-value]  # list[bytes] is what it holds
        while nl >= 0:
            lines.append(chunk[start : nl + 1])
            start = nl + 1
            nl = find(b"\n", start)
        if start < len(chunk):
            self._hold(chunk[start:] if start else chunk)
        return lines

    def flush(self) -> bytes | bytearray | None:
        """Return what is left of an unterminated last line, if anything."""
        if not self._size:
            return None
        return self._take()


@dataclass(slots=True)
class SSEEvent:
    """One Server-Sent Event, with the exact bytes it occupied on the wire."""

    raw: bytes  # every byte of the event including its terminating blank line
    data: bytes  # the data field lines joined with b"\n" (the JSON-RPC message, if any)
    event: str | None = None  # the `event:` type ("message", "endpoint", …)
    id: str | None = None  # the `id:` field, if present
    retry: int | None = None
    comment_only: bool = False  # only comment lines (": ping - …" keep-alives)


class SSEParser:
    """Incremental SSE parser (WHATWG event-stream rules) that keeps raw bytes.

    Accepts LF, CRLF and CR line ends (sse-starlette sends CRLF). Chunk boundaries can fall
    anywhere, including between CR and LF. A trailing event without its blank line is returned by
    :meth:`flush` so an SSE stream that ends early still yields what it carried.
    """

    __slots__ = ("_buf", "_cr_pending", "_lines_raw", "_pos")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0
        self._lines_raw: list[bytes] = []  # raw lines (with terminators) of the current event
        self._cr_pending = False  # last chunk ended in CR: an LF at the next start belongs to it

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        events: list[SSEEvent] = []
        if not chunk:
            return events
        if self._cr_pending:
            self._cr_pending = False
            if chunk[:1] == b"\n":
                # Complete the CRLF whose CR ended the previous chunk.
                # If the CR closed an event, the LF is kept as leading bytes of the next one.
                if self._lines_raw:
                    self._lines_raw[-1] += b"\n"
                else:
                    self._lines_raw.append(b"\n")
                chunk = chunk[1:]
        buf = self._buf
        buf += chunk
        pos = 0
        n = len(buf)
        while pos < n:
            i_lf = buf.find(b"\n", pos)
            i_cr = buf.find(b"\r", pos)
            if i_lf < 0 and i_cr < 0:
                break
            if i_cr >= 0 and (i_lf < 0 or i_cr < i_lf):
                if i_cr + 1 < n:
                    end = i_cr + 2 if buf[i_cr + 1] == 0x0A else i_cr + 1
                else:
                    # CR at the very end: the line ends here; an LF may follow in the next chunk.
                    end = i_cr + 1
                    self._cr_pending = True
                content_end = i_cr
            else:
                end = i_lf + 1
                content_end = i_lf
            line_raw = bytes(buf[pos:end])
            content = bytes(buf[pos:content_end])
            pos = end
            self._lines_raw.append(line_raw)
            if content == b"":
                events.append(self._build())
        del buf[:pos]
        return events

    def flush(self) -> SSEEvent | None:
        """An event cut off by the end of the stream (no blank line), if there is one."""
        if self._buf:
            self._lines_raw.append(bytes(self._buf))
            self._buf.clear()
        if not self._lines_raw:
            return None
        return self._build()

    def _build(self) -> SSEEvent:
        raw = b"".join(self._lines_raw)
        self._lines_raw = []
        data_lines: list[bytes] = []
        event: str | None = None
        ev_id: str | None = None
        retry: int | None = None
        saw_field = False
        for line in raw.splitlines():
            if not line or line.startswith(b":"):
                continue  # blank, or a comment line
            saw_field = True
            name, sep, value = line.partition(b":")
            if sep and value.startswith(b" "):
                value = value[1:]
            match name:
                case b"data":
                    data_lines.append(value)
                case b"event":
                    event = value.decode("utf-8", "replace")
                case b"id":
                    ev_id = value.decode("utf-8", "replace")
                case b"retry":
                    retry = _int_or_none(value)
        return SSEEvent(
            raw=raw,
            data=b"\n".join(data_lines),
            event=event,
            id=ev_id,
            retry=retry,
            comment_only=not saw_field,
        )


def _int_or_none(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
