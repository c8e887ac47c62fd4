"""Frame rows → messages, and what the whole session establishes (era, version, capabilities).

The first two steps of the analysis, before pairing (:mod:`mcp_proxy.analysis.exchanges`):
:func:`decode` turns stored frame rows into :class:`~mcp_proxy.analysis.model.Msg` objects
(bodies parsed lazily, batch elements unrolled) and :func:`session_facts` reads the handshake
from them. The era decision is the recorder's (:func:`mcp_proxy.protocol.era_of`, which the recorder uses too): the frames
decide, the session row only fills in what frames cannot say. Pure: rows in, objects out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple

from mcp_proxy.analysis.model import ERA_INITIALIZE, META, UNPARSED, Msg, SessionFacts
from mcp_proxy.frames import Channel, classify_message
from mcp_proxy.protocol import era_of
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.stream import SHAPE_FLAGS, RowShapes, split_flags

__all__ = [
    "DECODER_COLUMNS",
    "FRAME_COLUMNS",
    "Decoder",
    "FactsBuilder",
    "Injected",
    "decode",
    "header",
    "session_facts",
]


# ---------------------------------------------------------------------------------- decoding
#: The one row the :class:`Decoder` reads, from every store (``frame_rows`` as stored, SQLite
#: and PostgreSQL alike, :func:`~mcp_proxy.store.stream.shaped_pages`; frames held in memory
#: through :class:`~mcp_proxy.store.stream.RowShapes`): :data:`FRAME_COLUMNS` without
#: ``sse_id``, which no message carries, and with direction, channel, kind, method,
#: ``complete`` and ``partial_parse`` as one integer
#: (:data:`~mcp_proxy.store.stream.SHAPE_FLAGS`): each column fetched costs every row a value
#: handed over by the driver (with sqlite3, a release of the GIL), ~0.1 µs even for a NULL.
DECODER_COLUMNS: tuple[str, ...] = (
    "seq", "ts", "mono_ns", SHAPE_FLAGS, "msg_id", "error_code", "size", "raw",
    "http_exchange_id", "sse_event",
)  # fmt: skip

#: Frames held in memory turned into rows of :data:`DECODER_COLUMNS` at a time (:func:`decode`).
MEMORY_BATCH = 5000


def decode(frames: Iterable[Any]) -> list[Msg]:
    """Turn frames held in memory into :class:`Msg` objects, in order (see :class:`Decoder`)."""
    decoder = Decoder()
    decoder.feed_frames(frames)
    return decoder.msgs


INJECT = Channel.INJECT.value


class Injected(NamedTuple):
    """A frame mcptape injected (``Channel.INJECT``): what the exchange views show of it."""

    seq: int
    ts: float
    direction: str
    kind: str
    method: str | None
    msg_id: str | None
    #: An injected answer (s2c response or error): its error code, or a tool result with
    #: ``isError: true`` (``tool-error``). What the host got instead of the server's answer.
    error_code: int | None = None
    tool_error: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "injected": True,
            "seq": self.seq,
            "ts": self.ts,
            "direction": self.direction,
            "kind": self.kind,
            "method": self.method,
            "msg_id": self.msg_id,
        }


def _injected(
    seq: int,
    ts: float,
    direction: str,
    kind: str,
    method: str | None,
    msg_id: str | None,
    code: int | None,
    raw: bytes | None,
) -> Injected:
    tool_error = False
    if kind == "response" and raw:  # rare (faults only): parse to tell a tool-error apart
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            body = None
        result = body.get("result") if isinstance(body, dict) else None
        tool_error = isinstance(result, dict) and result.get("isError") is True
    return Injected(seq, ts, direction, kind, method, msg_id, code, tool_error)


def injected_answers(injected: Iterable[Injected]) -> dict[str, list[Injected]]:
    """Answers mcptape injected in the server's place (``error``, ``tool-error`` faults), by
    the id of the host request they answer: the host got them, so the request is answered."""
    out: dict[str, list[Injected]] = {}
    for i in injected:
        if i.direction == "s2c" and i.kind in ("response", "error") and i.msg_id is not None:
            out.setdefault(i.msg_id, []).append(i)
    return out


class Decoder:
    """Frame rows → :class:`Msg` objects, fed batch by batch so that a session is never held
    twice (rows and messages) in memory.

    Rows are of :data:`DECODER_COLUMNS`, whichever store they come from (frames held in
    memory: :meth:`feed_frames`). Bodies are parsed lazily; a batch frame is kept and
    followed by one message per element (same ``seq``), so that pairing sees every request and
    response it carried. Rows without ``raw`` still pair; only body-level checks go quiet.

    The few distinct strings of a session (directions, channels, kinds, methods, SSE event
    names) are shared: the database driver makes a new string for every value of every row,
    and at a million frames those copies alone cost hundreds of megabytes.
    """

    __slots__ = (
        "_put", "_shared", "first_ts", "frames", "injected", "last_ts", "msgs", "reads",
    )  # fmt: skip

    def __init__(
        self,
        emit: Callable[[Msg], None] | None = None,
        *,
        reads: Callable[[str, str, str | None], bool] | None = None,
    ) -> None:
        """``emit``: hand each message to it instead of keeping it in :attr:`msgs` (a
        streaming consumer such as ``stats``, which never holds the session). ``reads``
        (channel, kind, method): whether the consumer reads such a message at all (one it does
        not read is counted and dropped). :attr:`first_ts` and :attr:`last_ts` are the times of the
        first and last rows fed, read or not."""
        self.msgs: list[Msg] = []
        self._put = self.msgs.append if emit is None else emit
        self.reads = reads
        self.frames = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        #: Frames on the ``inject`` channel, set aside (see :class:`Injected`).
        self.injected: list[Injected] = []
        self._shared: dict[str, str] = {}

    def feed_frames(self, frames: Iterable[Any]) -> None:
        """:meth:`feed` for frames held in memory (mappings of :data:`FRAME_COLUMNS`, named
        rows, or tuples in that order), made rows of :data:`DECODER_COLUMNS` a batch at a time
        (:class:`~mcp_proxy.store.stream.RowShapes`)."""
        shapes = RowShapes()
        it = iter(frames)
        while batch := list(islice(it, MEMORY_BATCH)):
            self.feed(shapes.rows(batch, DECODER_COLUMNS), shapes)

    def feed(self, rows: Iterable[Sequence[Any]], shapes: Callable[[int], Any]) -> None:
        """Decode these rows of :data:`DECODER_COLUMNS` (the next ones of the session, in seq
        order): direction, channel, kind and method as one integer that ``shapes`` decodes,
        with the frame's ``complete`` and ``partial_parse`` flags above it
        (:func:`~mcp_proxy.store.stream.split_flags`). The four strings and two flags are
        decoded once per value, not once per row."""
        decoded: dict[int, Any] = {}
        if isinstance(rows, Sequence) and rows:
            if self.first_ts is None:
                self.first_ts = rows[0][1]
            self.last_ts = rows[-1][1]
        put = self._put
        shared = self._shared
        frames = 0
        # One message a row, made here (a call per row was a tenth of ``check``'s time):
        # the rare rows (injected frames, batches) take their own steps below.
        for seq, ts, mono, shape, msg_id, code, size, raw, http, ev in rows:
            found = decoded.get(shape)
            if found is None:
                found = decoded[shape] = self._shape(shapes, shape)
            d, ch, kind, method, complete, partial, read, plain = found
            frames += 1
            if not read:
                continue
            if ev is not None:
                ev = shared.setdefault(ev, ev)
            if raw is not None and type(raw) is not bytes:
                raw = bytes(raw)
            if plain:
                put(Msg(seq, ts, mono, d, ch, kind, method, msg_id, code, size or 0, complete,
                        partial, http, raw, UNPARSED, ev))  # fmt: skip
            else:
                self._rare(seq, ts, mono, d, ch, kind, method, msg_id, code, size, complete,
                           partial, raw, http, ev)  # fmt: skip
        self.frames += frames

    def _shape(self, shapes: Callable[[int], Any], value: int) -> tuple[Any, ...]:
        """What every row of this shape decodes to: the four strings (shared), the two flags
        as the message keeps them, whether it is read, whether it is plain (neither injected
        nor a batch: one message of the row, nothing set aside)."""
        shape, complete, partial = split_flags(value)
        d, ch, kind, method = (
            None if v is None else self._shared.setdefault(v, v) for v in shapes(shape)
        )
        read = self.reads is None or ch == INJECT or self.reads(str(ch), str(kind), method)
        plain = ch != INJECT and kind != "batch"
        return (d, ch, kind, method, complete is None or bool(complete), bool(partial), read,
                plain)  # fmt: skip

    def _rare(
        self, seq: int, ts: float, mono: int, direction: str, channel: str, kind: str,
        method: str | None, msg_id: str | None, code: int | None, size: int | None,
        complete: bool, partial: bool, raw: bytes | None, http: int | None, event: str | None,
    ) -> None:  # fmt: skip
        """A row that is not one plain message: an injected frame, or a batch."""
        if channel == INJECT:
            # Bytes mcptape put on the wire in a peer's place (fault injection): not the
            # peer's messages, so neither paired nor checked; kept aside for the views.
            self.injected.append(_injected(seq, ts, direction, kind, method, msg_id, code, raw))
            return
        m = Msg(seq, ts, mono, direction, channel, kind, method, msg_id, code, size or 0,
                complete, partial, http, raw, UNPARSED, event)  # fmt: skip
        self._put(m)
        if kind == "batch":
            self._unroll(m)

    def _unroll(self, m: Msg) -> None:
        body = m.body
        if not isinstance(body, list):
            return
        for element in body:
            c = classify_message(element)
            self._put(
                Msg(m.seq, m.ts, m.mono_ns, m.direction, m.channel, c.kind.value, c.method,
                    c.msg_id, c.error_code, 0, True, False, m.http, None, element, m.event)
            )  # fmt: skip


# ---------------------------------------------------------------------------------- facts
def header_pairs(headers: Any) -> list[tuple[str, str]]:
    """``[[name, value], …]`` as ``(lower-case name, value)``, skipping malformed items."""
    out: list[tuple[str, str]] = []
    if isinstance(headers, (str, bytes)):
        # A raw SQL read of the JSON column (the store's API decodes it; be lenient anyway).
        try:
            headers = json.loads(headers)
        except ValueError:
            return out
    if not isinstance(headers, (list, tuple)):
        return out
    for item in headers:
        if isinstance(item, (list, tuple)) and len(item) >= 2:
            out.append((str(item[0]).lower(), str(item[1])))
    return out


def header(headers: Any, name: str) -> str | None:
    """The first value of header ``name`` (case-insensitive) from ``[[name, value], …]``."""
    if not headers:
        return None
    lname = name.lower()
    for k, v in header_pairs(headers):
        if k == lname:
            return v
    return None


def session_facts(
    msgs: list[Msg],
    session: Mapping[str, Any] | None = None,
    http: Mapping[int, Mapping[str, Any]] | None = None,
) -> SessionFacts:
    """Establish era, negotiated version, capabilities and end state from the frames
    (:class:`FactsBuilder` fed these messages)."""
    b = FactsBuilder(session, http)
    feed = b.feed
    for m in msgs:
        feed(m)
    return b.finish()


#: The kinds :class:`FactsBuilder` reads (requests, their answers; a batch's elements).
_FACT_KINDS = frozenset({"request", "response", "error", "batch"})


class FactsBuilder:
    """What the whole session establishes, read one message at a time.

    The frames decide (they are the source of truth); the session row only fills in what frames
    cannot say (how the process ended) or what they do not show (a session with no handshake).
    A successful ``initialize`` makes the initialize era even after a ``server/discover`` probe
    failed (the auto client's fallback); otherwise requests carrying the 2026-07-28 envelope
    make the modern era. ``facts`` is one object, filled in by :meth:`finish`.
    """

    def __init__(
        self,
        session: Mapping[str, Any] | None = None,
        http: Mapping[int, Mapping[str, Any]] | None = None,
    ) -> None:
        s = session or {}
        self.session = s
        self.http = http
        self.facts = SessionFacts(
            status=str(s.get("status") or "ended"),
            exit_code=s.get("exit_code"),
            exit_signal=s.get("exit_signal"),
            fault_end=s.get("fault_end"),
            transport=str(s.get("transport") or "stdio"),
        )
        self.init_id: str | None = None
        self.discover_ids: set[str] = set()
        self.envelope_version: str | None = None
        self.init_version: str | None = None
        self.discover_caps: dict[str, Any] | None = None
        self.discover_seq: int | None = None
        self.init_http: int | None = None
        self.saw_http = False
        self.first_ts: float | None = None
        self.last_ts: float | None = None

    @staticmethod
    def reads(channel: str, kind: str, method: str | None) -> bool:
        """The messages :meth:`feed` reads anything of but their time (a :class:`Decoder`'s
        ``reads``): the rest of a session's frames need not become messages for it; their
        times come from :meth:`span`."""
        return (
            kind in _FACT_KINDS
            or method == "notifications/initialized"
            or channel == "http"
            or channel == "sse"
        )

    def span(self, first_ts: float | None, last_ts: float | None) -> None:
        """The times of the session's first and last frames, when not every frame was fed
        (:meth:`reads`: the :class:`Decoder`'s ``first_ts`` and ``last_ts``)."""
        if first_ts is not None:
            self.first_ts = first_ts
            self.last_ts = last_ts

    def feed(self, m: Msg) -> None:
        facts = self.facts
        if self.first_ts is None:
            self.first_ts = m.ts
        self.last_ts = m.ts
        if m.channel in ("http", "sse"):
            self.saw_http = True
            if m.event == "endpoint":
                facts.legacy_sse = True
        kind = m.kind
        if m.direction == "c2s":
            if kind == "request":
                self._request(m)
            elif (
                kind == "notification"
                and m.method == "notifications/initialized"
                and facts.initialized_seq is None
            ):
                facts.initialized_seq = m.seq
                facts.initialized_mono = m.mono_ns
        elif kind in ("response", "error") and m.msg_id is not None:
            self._answer(m)

    def _request(self, m: Msg) -> None:
        facts = self.facts
        if m.method == "initialize" and facts.initialize_seq is None:
            facts.initialize_seq = m.seq
            self.init_id = m.msg_id
            p = m.params
            caps = p.get("capabilities")
            facts.client_caps = caps if isinstance(caps, dict) else {}
            rv = p.get("protocolVersion")
            facts.requested_version = rv if isinstance(rv, str) else None
        elif m.method == "server/discover" and m.msg_id is not None:
            self.discover_ids.add(m.msg_id)
        self.envelope(m)

    def envelope(self, m: Msg) -> None:
        """The first host request (by ``seq``) that carries the 2026-07-28 envelope: what
        :meth:`feed` does with a request besides the handshake. Also fed on its own: the
        service's handshake pass reads the handshake's frames (``store.stream.FACTS_ROWS``),
        then the host's requests in order (``REQUEST_ROWS``) only until this is settled, so
        a request may come after a later one was fed: the smallest ``seq`` wins."""
        if m.kind != "request" or m.direction != "c2s":
            return
        facts = self.facts
        first = facts.first_envelope_seq
        if first is not None and m.seq >= first:
            return
        raw = m.raw
        if raw is not None and b"protocolVersion" not in raw and b"\\u" not in raw:
            return  # no envelope in these bytes: no need to parse them
        v = m.meta.get(META + "protocolVersion")
        if isinstance(v, str):
            facts.first_envelope_seq = m.seq
            self.envelope_version = v

    def _answer(self, m: Msg) -> None:
        facts = self.facts
        if m.msg_id == self.init_id and facts.initialize_result_seq is None:
            if m.kind == "response" and m.result is not None:
                facts.initialize_result_seq = m.seq
                facts.initialize_result_mono = m.mono_ns
                r = m.result
                v = r.get("protocolVersion")
                self.init_version = v if isinstance(v, str) else None
                caps = r.get("capabilities")
                facts.server_caps = caps if isinstance(caps, dict) else {}
                facts.server_caps_seq = m.seq
                self.init_http = m.http
            else:
                facts.initialize_failed = True
        elif m.msg_id in self.discover_ids and m.kind == "response" and m.result is not None:
            caps = m.result.get("capabilities")
            if isinstance(caps, dict):
                self.discover_caps = caps
                self.discover_seq = m.seq

    def finish(self) -> SessionFacts:
        facts, s, http = self.facts, self.session, self.http
        if facts.initialize_result_seq is not None:
            facts.era = ERA_INITIALIZE
            facts.version = self.init_version
        elif self.envelope_version is not None:
            facts.era = era_of(self.envelope_version)
            facts.version = self.envelope_version
            facts.server_caps = self.discover_caps
            facts.server_caps_seq = self.discover_seq
        else:
            facts.era = s.get("era")
            facts.version = s.get("protocol_version")
        if self.first_ts is not None:
            facts.first_ts = self.first_ts
            facts.last_ts = self.last_ts
        if self.saw_http and facts.transport == "stdio":
            facts.transport = "http"
        if facts.transport != "stdio" and not facts.live:
            facts.open_ended = _grouping(s).get("open_ended") is True or not any(
                str(r.get("method") or "").upper() == "DELETE" for r in (http or {}).values()
            )
        if facts.transport == "sse":
            facts.legacy_sse = True
        if self.init_http is not None and http:
            row = http.get(self.init_http)
            if row is not None:
                facts.session_id_header = header(row.get("response_headers"), "mcp-session-id")
        return facts


def _grouping(session: Mapping[str, Any]) -> dict[str, Any]:
    """The HTTP relay's grouping notes in the session's ``meta`` (how and why it ended)."""
    meta = session.get("meta")
    if isinstance(meta, (str, bytes)):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    grouping = meta.get("grouping") if isinstance(meta, dict) else None
    return grouping if isinstance(grouping, dict) else {}
