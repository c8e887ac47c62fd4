"""The recorder contract: the one interface every producer of traffic hands bytes to.

A *producer* is anything that sees traffic — the stdio relay, the HTTP relay, the mitmproxy
addon, ``import`` — and a *sink* is what records it: the in-process :class:`Recorder` (a writer
thread), the :class:`RecorderClient` (a pipe to a recorder process), or a test's list. Producers
call the methods of :class:`Producer`; each call becomes one typed *item*:

========================  ====================================================================
item                      meaning
========================  ====================================================================
:class:`SessionStart`     a new session row (its id is chosen by the producer, at once)
:class:`Chunk`            bytes read from a stream (stdio); the recorder cuts them into lines
:class:`EndOfStream`      the stream ended: an unterminated last line becomes a frame
:class:`FrameItem`        one frame whose boundaries the producer knows (HTTP body, SSE event)
:class:`ExchangeStart`    an HTTP exchange row (method, URL, headers…), by a local id
:class:`ExchangeUpdate`   more columns of that exchange (status, timings, outcome)
:class:`HttpExchange`     an exchange row and its frames so far (finished, or registered while it runs)
:class:`SessionUpdate`    more columns of a session (end, exit status, metadata)
:class:`FindingItem`      a fact the producer knows (a transport failure, a refused request)
:class:`LostFrames`       frames the producer relayed but could not hand over (counted gaps)
:class:`Resume`           a restarted recorder process takes over sessions already begun
========================  ====================================================================

Producers never wait for the database and never see an error from the sink: recording is a
copy made after forwarding. Sinks implement one method, :meth:`Producer.submit`.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy import __version__
from mcp_proxy.frames import Channel, Direction, Frame


@dataclass(slots=True)
class SessionStart:
    row: dict[str, Any]


@dataclass(slots=True)
class Chunk:
    session_id: str
    direction: Direction
    channel: Channel
    data: bytes
    mono_ns: int
    wall: float


@dataclass(slots=True)
class EndOfStream:
    session_id: str
    direction: Direction
    channel: Channel
    mono_ns: int
    wall: float


@dataclass(slots=True)
class FrameItem:
    session_id: str
    frame: Frame


@dataclass(slots=True)
class ExchangeStart:
    session_id: str
    local_id: int
    fields: dict[str, Any]


@dataclass(slots=True)
class ExchangeUpdate:
    local_id: int
    fields: dict[str, Any]


@dataclass(slots=True)
class HttpExchange:
    session_id: str
    local_id: int
    fields: dict[str, Any]
    frames: list[Frame]


@dataclass(slots=True)
class SessionUpdate:
    session_id: str
    fields: dict[str, Any]


@dataclass(slots=True)
class FindingItem:
    session_id: str
    fields: dict[str, Any]


@dataclass(slots=True)
class LostFrames:
    """Frames a producer relayed but could not hand over (``{sid: count}``), and why."""

    counts: dict[str, int]
    reason: str


@dataclass(slots=True)
class Resume:
    """Sessions a previous recorder process had begun: ``{sid: {"row": …, "sent": n}}``.

    ``row`` is the session row as first handed over (written again if the database never got
    it); ``sent`` counts the frames handed over before the restart — what the database lacks of
    them is recorded as a gap.
    """

    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    reason: str = ""


Item = (
    SessionStart
    | Chunk
    | EndOfStream
    | FrameItem
    | ExchangeStart
    | ExchangeUpdate
    | HttpExchange
    | SessionUpdate
    | FindingItem
    | LostFrames
    | Resume
)


def new_session_id() -> str:
    """A random (version 4) UUID as 32 hex digits, what ``uuid.uuid4().hex`` gives — without
    importing :mod:`uuid` (and :mod:`platform`, :mod:`socket`…) into every relay's start-up."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return b.hex()


def _hostname() -> str:
    """``socket.gethostname()``; on POSIX the same name from ``uname`` without :mod:`socket`."""
    uname = getattr(os, "uname", None)
    if uname is not None:
        return str(uname().nodename)
    import socket

    return socket.gethostname()


def session_row(transport: str, session_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A new session row with what the producer's process knows (pid, host, clock)."""
    return {
        "id": session_id,
        "transport": transport,
        "status": "live",
        "started_at": time.time(),
        "pid": os.getpid(),
        "hostname": _hostname(),
        "recorder_version": __version__,
        **fields,
    }


class Producer:
    """The producer API, built on one abstract method, :meth:`submit`.

    Ids are chosen here, in the producer's process (session ids are UUIDs, exchange ids a
    counter), so producers never wait for a database round trip.
    """

    def __init__(self) -> None:
        self._local_ids = itertools.count(1)

    def submit(self, item: Item) -> None:
        """Hand one item to the sink. Must not block on the database nor raise."""
        raise NotImplementedError

    def new_session(self, *, transport: str, session_id: str | None = None, **fields: Any) -> str:
        """Begin a session; returns its id at once."""
        sid = session_id or new_session_id()
        self.submit(SessionStart(session_row(transport, sid, fields)))
        return sid

    def put(self, session_id: str, frame: Frame) -> None:
        self.submit(FrameItem(session_id, frame))

    def put_chunk(
        self,
        session_id: str,
        direction: Direction,
        channel: Channel,
        data: bytes,
        mono_ns: int | None = None,
        wall: float | None = None,
    ) -> None:
        """Bytes read from a stream; each frame cut from them gets the time of its last read."""
        self.submit(
            Chunk(
                session_id,
                direction,
                channel,
                data,
                mono_ns if mono_ns is not None else time.monotonic_ns(),
                wall if wall is not None else time.time(),
            )
        )

    def end_stream(self, session_id: str, direction: Direction, channel: Channel) -> None:
        self.submit(EndOfStream(session_id, direction, channel, time.monotonic_ns(), time.time()))

    def new_exchange(self, session_id: str, *, local_id: int | None = None, **fields: Any) -> int:
        """An HTTP exchange row; returns the local id frames and updates refer to."""
        local = local_id if local_id is not None else next(self._local_ids)
        self.submit(ExchangeStart(session_id, local, fields))
        return local

    def update_exchange(self, local_id: int, **fields: Any) -> None:
        self.submit(ExchangeUpdate(local_id, fields))

    def record_exchange(
        self, session_id: str, *, frames: list[Frame], local_id: int | None = None, **fields: Any
    ) -> int:
        """A finished HTTP exchange and its frames in one item (one hand-over, not four)."""
        local = local_id if local_id is not None else next(self._local_ids)
        self.submit(HttpExchange(session_id, local, fields, frames))
        return local

    def update_session(self, session_id: str, **fields: Any) -> None:
        self.submit(SessionUpdate(session_id, fields))

    def end_session(self, session_id: str, *, status: str = "ended", **fields: Any) -> None:
        fields.setdefault("ended_at", time.time())
        self.submit(SessionUpdate(session_id, {"status": status, **fields}))

    def add_finding(self, session_id: str, **fields: Any) -> None:
        self.submit(FindingItem(session_id, fields))


def _reduce(self: Any) -> tuple[Any, tuple[Any, ...]]:
    """Pickle an item as ``Type(*fields)``: far cheaper than the slotted-dataclass default."""
    return (type(self), tuple(getattr(self, name) for name in self.__slots__))


for _cls in (
    SessionStart,
    Chunk,
    EndOfStream,
    FrameItem,
    ExchangeStart,
    ExchangeUpdate,
    HttpExchange,
    SessionUpdate,
    FindingItem,
    LostFrames,
    Resume,
):
    _cls.__reduce__ = _reduce  # type: ignore[method-assign,assignment]

#: Every item type, for sinks that check what they are handed.
ITEM_TYPES: frozenset[type] = frozenset(
    (
        SessionStart,
        Chunk,
        EndOfStream,
        FrameItem,
        ExchangeStart,
        ExchangeUpdate,
        HttpExchange,
        SessionUpdate,
        FindingItem,
        LostFrames,
        Resume,
    )
)
