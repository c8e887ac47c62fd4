"""One exchange: an HTTP request/response through the relay, and what it owes the recording.

The exchange owns its life, as an explicit state machine (:class:`RecState`, the allowed moves
in :data:`TRANSITIONS`; any other move raises :class:`IllegalTransition`):

``UNPLACED``  its session is not known yet (``initialize`` waits for the response's
              ``Mcp-Session-Id``; a legacy ``GET /sse`` for its ``endpoint`` event);
``WANTED``    still unplaced, but asked to be registered: it registers the moment it is placed;
``HELD``      placed in a session; row and frames kept in memory — a quick exchange is handed to
              the recorder once, complete (one record instead of four);
``LIVE``      registered with the recorder (a long call, an open stream, or another stream of
              the session needs wire order): frames and updates flow as they happen;
``DONE``      finished and handed over; nothing more is recorded for it (except the tail of an
              event stream the host left, see ``response.ResponsePath``).

It describes its request (:meth:`describe`, once, just after the request went upstream: the
work is :func:`~mcp_proxy.relay.http.request_side.describe_request`), registers, frames and
finishes itself; what it needs of the relay is an :class:`ExchangeContext` (recorder, session
router, redactor, origins) — it never calls back into the relay.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Frame
from mcp_proxy.recorder.httpraw import decode_pairs, describe
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.common import RecorderLike, cut_findings
from mcp_proxy.relay.http.request_side import describe_request
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE, BodyFacts, SessionEntry, SessionRouter

if TYPE_CHECKING:
    from mcp_proxy.relay.http.request_side import RequestBody

__all__ = [
    "REGISTER_AFTER",
    "TRANSITIONS",
    "Exchange",
    "ExchangeContext",
    "IllegalTransition",
    "RecState",
]

#: A request still waiting for its response after this long is handed to the recorder (so that
#: long calls show while they run); quicker exchanges are handed over once, complete.
REGISTER_AFTER = 0.25


class RecState(enum.Enum):
    UNPLACED = "unplaced"
    WANTED = "wanted"
    HELD = "held"
    LIVE = "live"
    DONE = "done"

    # Members are singletons compared by identity: hashed by identity too (C), not by
    # ``Enum.__hash__`` (Python), for the TRANSITIONS look-ups of every move.
    __hash__ = object.__hash__


#: Every allowed move of an exchange's recording state.
TRANSITIONS: dict[RecState, frozenset[RecState]] = {
    RecState.UNPLACED: frozenset({RecState.WANTED, RecState.HELD}),
    RecState.WANTED: frozenset({RecState.HELD}),
    RecState.HELD: frozenset({RecState.LIVE, RecState.DONE}),
    RecState.LIVE: frozenset({RecState.DONE}),
    RecState.DONE: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow (a bug in the relay, never the peer's doing)."""


@dataclass(slots=True)
class ExchangeContext:
    """What every exchange of one relay needs of it: where its recording goes."""

    recorder: RecorderLike | None
    router: SessionRouter
    redactor: Redactor
    #: The upstream's origin, and the relay's own (known once it listens).
    origin: str
    local_origin: str = ""
    #: Exchanges finished so far (the relay's statistics).
    finished: int = 0


class Exchange:
    """One HTTP request/response going through the relay, and its recording state."""

    __slots__ = (
        "authorization",
        "body",
        "ctx",
        "entry",
        "facts",
        "fallback",
        "fields",
        "is_mcp",
        "late",
        "local_id",
        "meta",
        "mono0",
        "outcome",
        "pending",
        "pre",
        "raw_req",
        "raw_resp",
        "raw_sent",
        "req_coding",
        "req_ctype",
        "request_size",
        "responded",
        "response_size",
        "sse_comments",
        "state",
        "streaming",
        "timer",
        "wall0",
    )

    def __init__(self, ctx: ExchangeContext, fields: dict[str, Any], meta: dict[str, Any]) -> None:
        self.ctx = ctx
        self.state = RecState.UNPLACED
        self.fields = fields
        self.meta = meta
        self.entry: SessionEntry | None = None
        self.local_id: int | None = None
        self.pending: list[Frame] = []
        self.request_size = 0
        self.response_size = 0
        self.facts: BodyFacts | None = None
        self.fallback: tuple[str, str, dict[str, Any]] | None = None
        self.sse_comments = 0
        self.wall0 = fields["started_at"]
        self.mono0 = 0
        #: A streamed request body (what is kept of it for the recording), or None.
        self.body: RequestBody | None = None
        self.req_ctype: str | None = None
        #: The request's Content-Encoding (its body is decoded, bounded, for the recording).
        self.req_coding: str | None = None
        self.is_mcp = False
        self.outcome: str | None = None
        self.late: dict[str, Any] = {}
        #: What describing the request for the recording needs (see :meth:`describe`).
        self.pre: tuple[Any, ...] | None = None
        #: The request's head as sent (upstream origin, local origin, raw path, header pairs,
        #: any Mcp-* header) and the upstream's response header pairs, not described yet: the
        #: recorder process describes them (recorder/httpraw.py), or :meth:`materialize` here
        #: when the exchange goes to the recorder while it runs.
        self.raw_req: tuple[str, str, str, Any, bool] | None = None
        self.raw_resp: Any = None
        #: The raw heads handed over with a quick exchange (see :meth:`described_meta`).
        self.raw_sent: Any = None
        #: Registers a request still waiting for its response after a moment (long calls show
        #: up while they run); cancelled when the exchange ends first.
        self.timer: asyncio.TimerHandle | None = None
        #: Streaming its response (other exchanges of the session then register at once, so
        #: that frames stay in wire order across them).
        self.streaming = False
        #: A JSON-RPC response went back on this exchange's event stream (label of a host close).
        self.responded = False
        #: Kept in memory only, to tell credentials apart when grouping (never recorded).
        self.authorization: str | None = None

    # ------------------------------------------------------------------ state
    def move(self, new: RecState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"exchange {self.state.value} → {new.value}")
        self.state = new

    @property
    def attached(self) -> bool:
        return self.entry is not None

    @property
    def finished(self) -> bool:
        return self.state is RecState.DONE

    # ------------------------------------------------------------------ description
    def describe(self) -> None:
        """Describe the request for the recording, once, just after it was sent upstream."""
        if self.pre is None:
            return
        describe_request(self)
        if self.finished:
            return
        if self.local_id is None and self.timer is None:
            # Held: a quick exchange is handed over once, complete. Frames another exchange of
            # the session records meanwhile (a GET stream's events) flush it first, so the
            # request stays ahead of what answers it (see _flush_held).
            self.timer = asyncio.get_running_loop().call_later(REGISTER_AFTER, self.register)

    # ------------------------------------------------------------------ placing
    def attach(self, entry: SessionEntry) -> None:
        """Place the exchange in its session (and register it if that was asked for)."""
        if self.entry is not None:
            return
        wanted = self.state is RecState.WANTED
        self.move(RecState.HELD)
        self.entry = entry
        entry.held.append(self)
        self.ctx.router.begin(entry)
        if wanted:
            self.register()

    def attach_key(self, key: str, rule: str, **kw: Any) -> None:
        """Place the exchange in the session of ``key`` (made by ``rule`` when new)."""
        if self.entry is None:
            self.attach(self.ctx.router.get(key, rule, **kw))

    def attach_fallback(self) -> None:
        """Place the exchange where nothing better names its session (client, credential)."""
        if self.entry is not None:
            return
        if self.pre is not None:
            self.describe()  # it may name the client (and attach)
            if self.entry is not None:
                return
        router = self.ctx.router
        key, rule, grouping = self.fallback or router.keyless(self.authorization)
        self.attach(router.get(key, rule, grouping=grouping))

    # ------------------------------------------------------------------ recording
    def register(self) -> None:
        """Hand the exchange row and its frames so far to the recorder.

        Called a moment after the request was handed to the upstream (long calls show while
        they run), or when wire order across the session's exchanges needs it. An exchange
        whose session is not known yet registers when it is placed.
        """
        if self.local_id is not None or self.state is RecState.DONE:
            return
        if self.entry is None:
            if self.state is RecState.UNPLACED:
                self.move(RecState.WANTED)
            return
        if self.pre is not None:
            self.describe()  # flushed before its own description ran: describe now
            if self.local_id is not None:
                return
        self._flush_held(self.mono0)
        rec = self.ctx.recorder
        if rec is None:
            self.pending = []
            return
        self.materialize()
        self.local_id = rec.new_exchange(self.entry.session_id, **self.fields, meta=self.meta)
        self.move(RecState.LIVE)
        pending, self.pending = self.pending, []
        for frame in pending:
            self.frame(frame)  # each after the held requests that came before it

    def _flush_held(self, before: int) -> None:
        """Register the session's held exchanges whose request came by ``before`` (a
        ``time.monotonic_ns()``), so that request frames keep the host's wire order.

        Called before this exchange puts anything in the recording (its frames once it
        registers, a live frame, a quick exchange's one record), with the time that thing
        came in: a held exchange whose request arrived earlier goes first; one that arrived
        later stays held (it is not this exchange's to put ahead of itself). Sequential calls
        never meet another held exchange, so each is still one record.
        """
        assert self.entry is not None
        held = self.entry.held
        if self in held:
            held.remove(self)
        for other in list(held):
            if other.mono0 <= before and other in held:
                other.register()

    def hold_stream(self) -> None:
        """A streaming response: count it, and hold its recording back for a moment.

        Most event streams of a POST carry one response and end within milliseconds; those are
        then recorded in one record at their end, like quick exchanges. A stream still open
        after ``REGISTER_AFTER`` (a GET stream, a slow tool with progress) registers then and
        its frames flow live; a later exchange of the session recording first flushes it.
        """
        entry = self.entry
        if entry is None:
            return
        if not self.streaming:
            self.streaming = True
            entry.streams += 1
        if self.local_id is None and self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(REGISTER_AFTER, self.register)

    def materialize(self) -> None:
        """Describe the raw heads into the row (URL, headers, MCP headers), here in the relay.

        For an exchange handed to the recorder while it runs, or to a sink that takes no raw
        exchanges; a quick exchange on the recorder process skips this (the recorder does it).
        """
        raw = self.raw_req
        if raw is not None:
            self.raw_req = None
            resp, self.raw_resp = self.raw_resp, None
            describe((*raw, resp), self.fields, self.meta, self.ctx.redactor)
        elif self.raw_resp is not None:
            resp, self.raw_resp = self.raw_resp, None
            self.fields["response_headers"] = self.ctx.redactor.headers(decode_pairs(resp))

    def described_meta(self) -> dict[str, Any]:
        """The whole ``meta`` as recorded, for an update after the exchange was handed over.

        An update replaces the recorded ``meta``; after a raw hand-over the relay's own copy
        lacks what the recorder described (local URL, MCP headers), so it is described here."""
        meta = dict(self.meta)
        if self.raw_sent is not None:
            describe(self.raw_sent, {}, meta, self.ctx.redactor)
        return meta

    def response_headers(self, pairs: Any) -> dict[str, Any]:
        """The upstream's response header pairs: kept raw, or described now if already live.

        Returns the row fields to send with an update (empty when kept raw)."""
        if self.local_id is None:
            self.raw_resp = pairs
            return {}
        return {"response_headers": self.ctx.redactor.headers(decode_pairs(pairs))}

    def later(self, **fields: Any) -> None:
        """Fields for the final update (saves a record for exchanges that end quickly)."""
        self.late.update(fields)

    @property
    def redactor(self) -> Redactor:
        return self.ctx.redactor

    def add_finding(self, session_id: str, **finding: Any) -> None:
        """A finding of the exchange's session (for hooks: :class:`~.hooks.HookExchange`)."""
        add = getattr(self.ctx.recorder, "add_finding", None)
        if add is not None:
            add(session_id, **finding)

    def _add_cut_findings(self) -> None:
        """A body cut for the recording (a decompression bomb) says so with a finding."""
        add = getattr(self.ctx.recorder, "add_finding", None)
        if add is None or self.entry is None:
            return
        for finding in cut_findings(self.meta):
            add(self.entry.session_id, **finding)

    def frame(self, frame: Frame) -> None:
        if self.local_id is None:
            self.pending.append(frame)
            return
        rec = self.ctx.recorder
        if rec is not None and self.entry is not None:
            if self.entry.held:
                self._flush_held(frame.mono_ns)
            frame.http_exchange = self.local_id
            rec.put(self.entry.session_id, frame)

    def update(self, **fields: Any) -> None:
        if self.local_id is None:
            # Not registered yet: fold into the row to insert.
            self.fields.update(fields)
            return
        rec = self.ctx.recorder
        if rec is not None:
            rec.update_exchange(self.local_id, **fields)

    def finish(self, outcome: str, error: str | None = None) -> None:
        """The exchange ended: hand it over (one record when still held), once."""
        if self.state is RecState.DONE:
            return
        self.describe()
        self.attach_fallback()
        if self.state is RecState.DONE:  # describing it finished it (never, but be sure)
            return
        live = self.state is RecState.LIVE
        self.move(RecState.DONE)
        self.outcome = outcome
        self._add_cut_findings()
        if self.sse_comments:
            self.meta["sse_comments"] = self.sse_comments
        final = {
            "ended_at": time.time(),
            "outcome": outcome,
            "error": error,
            "request_size": self.request_size if self.body is None else self.body.size,
            "response_size": self.response_size,
        }
        if self.late:
            final.update(self.late)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        entry = self.entry
        assert entry is not None
        if not live:
            self.fields.update(final)
            self._flush_held(self.mono0)
            self._hand_over(entry)
        else:
            if self.raw_resp is not None:
                resp, self.raw_resp = self.raw_resp, None
                final["response_headers"] = self.ctx.redactor.headers(decode_pairs(resp))
            self.update(**final, meta=self.meta)
        if self.streaming:
            entry.streams -= 1
        router = self.ctx.router
        router.done(entry)
        self.ctx.finished += 1
        if entry.rule == RULE_LEGACY_SSE and self.fields["method"] == "GET":
            # The legacy session lives exactly as long as its event stream.
            router.end(entry.key, reason="legacy SSE stream closed")

    def _hand_over(self, entry: SessionEntry) -> None:
        """A quick exchange: row and frames in one record; its heads described by the
        recorder process when it takes them raw."""
        rec = self.ctx.recorder
        if rec is None:
            return
        raw = self.raw_req
        record_http = getattr(rec, "record_http", None)  # RecorderClient has it
        if raw is not None and record_http is not None:
            self.raw_req = None
            resp, self.raw_resp = self.raw_resp, None
            self.raw_sent = (*raw, resp)
            self.local_id = record_http(
                entry.session_id,
                frames=self.pending,
                raw=self.raw_sent,
                fields=self.fields,
                meta=self.meta,
            )
        else:
            self.materialize()
            self.local_id = rec.record_exchange(
                entry.session_id, frames=self.pending, **self.fields, meta=self.meta
            )
        self.pending = []
