"""One exchange: an HTTP request/response through the relay, and what it owes the recording.

The exchange owns its recording state, explicitly (:class:`RecState`):

``UNPLACED``  its session is not known yet (``initialize`` waits for the response's
              ``Mcp-Session-Id``; a legacy ``GET /sse`` for its ``endpoint`` event);
``HELD``      placed in a session; row and frames kept in memory — a quick exchange is handed to
              the recorder once, complete (one record instead of four);
``LIVE``      registered with the recorder (a long call, an open stream, or another stream of
              the session needs wire order): frames and updates flow as they happen;
``DONE``      finished and handed over; nothing more is recorded for it (except the tail of an
              event stream the host left, see ``response.read_rest``).

It also owns its description for the recording (fields of the row, ``meta``, the pending frames);
the relay never writes the recorder for an exchange except through these methods.
"""

from __future__ import annotations

import asyncio
import enum
import time
from typing import TYPE_CHECKING, Any

from mcp_proxy.frames import Frame
from mcp_proxy.recorder.httpraw import decode_pairs, describe
from mcp_proxy.relay.http.common import cut_findings
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE, BodyFacts, SessionEntry

if TYPE_CHECKING:
    from mcp_proxy.relay.http.core import RelayCore

__all__ = ["REGISTER_AFTER", "Exchange", "RecState"]

#: A request still waiting for its response after this long is handed to the recorder (so that
#: long calls show while they run); quicker exchanges are handed over once, complete.
REGISTER_AFTER = 0.25


class RecState(enum.Enum):
    UNPLACED = "unplaced"
    HELD = "held"
    LIVE = "live"
    DONE = "done"


class Exchange:
    """One HTTP request/response going through the relay, and its recording state.

    The exchange row and the request's frames are held back until the exchange knows its
    session: at once for most requests, at the response headers for ``initialize`` (the
    session id comes back there), at the first event for a legacy ``GET /sse``.
    """

    __slots__ = (
        "authorization",
        "body_done",
        "body_parts",
        "body_streaming",
        "entry",
        "facts",
        "fallback",
        "fields",
        "finished",
        "handed_off",
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
        "relay",
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
        "want_register",
    )

    def __init__(self, relay: RelayCore, fields: dict[str, Any], meta: dict[str, Any]) -> None:
        self.relay = relay
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
        self.finished = False
        self.sse_comments = 0
        self.wall0 = fields["started_at"]
        self.mono0 = 0
        #: A streamed request body: the parts kept for the recording, and whether it ended.
        self.body_parts: list[bytes] | None = None
        self.body_streaming = False
        self.body_done = False
        self.req_ctype: str | None = None
        #: The request's Content-Encoding (its body is decoded, bounded, for the recording).
        self.req_coding: str | None = None
        self.is_mcp = False
        self.outcome: str | None = None
        self.want_register = False
        self.handed_off = False
        self.late: dict[str, Any] = {}
        #: What describing the request for the recording needs (see RelayCore._describe).
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

    @property
    def attached(self) -> bool:
        return self.entry is not None

    def attach(self, entry: SessionEntry) -> None:
        """Place the exchange in its session (and register it if that was asked for)."""
        if self.entry is not None:
            return
        self.entry = entry
        self.state = RecState.HELD
        entry.held.append(self)
        self.relay.router.begin(entry)
        if self.want_register:
            self.register()

    def register(self) -> None:
        """Hand the exchange row and its frames so far to the recorder.

        Called (``call_soon``) right after the request was handed to the upstream: the
        recording work runs while the upstream thinks, never before the bytes moved, and the
        request frame is queued before anything the upstream answers. An exchange whose session
        is not known yet registers when it is attached.
        """
        if self.local_id is not None:
            return
        if self.entry is None:
            self.want_register = True
            return
        if self.pre is not None:
            self.relay._describe(self)  # flushed before its own description ran: describe now
            if self.local_id is not None:
                return
        self._flush_held()
        rec = self.relay.recorder
        if rec is None:
            self.pending = []
            return
        self.materialize()
        self.local_id = rec.new_exchange(self.entry.session_id, **self.fields, meta=self.meta)
        self.state = RecState.LIVE
        sid = self.entry.session_id
        for frame in self.pending:
            frame.http_exchange = self.local_id
            rec.put(sid, frame)
        self.pending = []

    def _flush_held(self) -> None:
        """Register the session's other exchanges still held back, so frames keep wire order.

        Called before this exchange puts anything in the recording out of turn (registering,
        a live frame, a quick exchange's one record): whatever the session's held exchanges
        have (their request frames) came first on the wire. Sequential calls never meet
        another held exchange, so each is still one record.
        """
        assert self.entry is not None
        held = self.entry.held
        if self in held:
            held.remove(self)
        if not held:
            return
        for other in list(held):
            other.register()

    def hold_stream(self) -> None:
        """A streaming response: count it, and hold its recording back for a moment.

        Most event streams of a POST carry one response and end within milliseconds; those are
        then recorded in one record at their end, like quick exchanges. A stream still open
        after ``REGISTER_AFTER`` (a GET stream, a slow tool with progress) registers then and
        its frames flow live; another exchange of the session registering first flushes it.
        """
        entry = self.entry
        if entry is None:
            return
        if not self.streaming:
            self.streaming = True
            entry.streams += 1
        if self.local_id is None:
            if self.timer is None:
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
            describe((*raw, resp), self.fields, self.meta, self.relay.redactor)
        elif self.raw_resp is not None:
            resp, self.raw_resp = self.raw_resp, None
            self.fields["response_headers"] = self.relay.redactor.headers(decode_pairs(resp))

    def described_meta(self) -> dict[str, Any]:
        """The whole ``meta`` as recorded, for an update after the exchange was handed over.

        An update replaces the recorded ``meta``; after a raw hand-over the relay's own copy
        lacks what the recorder described (local URL, MCP headers), so it is described here."""
        meta = dict(self.meta)
        if self.raw_sent is not None:
            describe(self.raw_sent, {}, meta, self.relay.redactor)
        return meta

    def response_headers(self, pairs: Any) -> dict[str, Any]:
        """The upstream's response header pairs: kept raw, or described now if already live.

        Returns the row fields to send with an update (empty when kept raw)."""
        if self.local_id is None:
            self.raw_resp = pairs
            return {}
        return {"response_headers": self.relay.redactor.headers(decode_pairs(pairs))}

    def later(self, **fields: Any) -> None:
        """Fields for the final update (saves a record for exchanges that end quickly)."""
        self.late.update(fields)

    def attach_fallback(self) -> None:
        if self.entry is not None:
            return
        if self.pre is not None:
            self.relay._describe(self)  # it may name the client (and attach)
            if self.entry is not None:
                return
        router = self.relay.router
        key, rule, grouping = self.fallback or router.keyless(self.authorization)
        self.attach(router.get(key, rule, grouping=grouping))

    def _add_cut_findings(self) -> None:
        """A body cut for the recording (a decompression bomb) says so with a finding."""
        add = getattr(self.relay.recorder, "add_finding", None)
        if add is None or self.entry is None:
            return
        for finding in cut_findings(self.meta):
            add(self.entry.session_id, **finding)

    def frame(self, frame: Frame) -> None:
        if self.local_id is None:
            self.pending.append(frame)
            return
        rec = self.relay.recorder
        if rec is not None and self.entry is not None:
            if self.entry.held:
                self._flush_held()
            frame.http_exchange = self.local_id
            rec.put(self.entry.session_id, frame)

    def update(self, **fields: Any) -> None:
        if self.local_id is None:
            # Not registered yet: fold into the row to insert.
            self.fields.update(fields)
            return
        rec = self.relay.recorder
        if rec is not None and self.local_id is not None:
            rec.update_exchange(self.local_id, **fields)

    def finish(self, outcome: str, error: str | None = None) -> None:
        if self.finished:
            return
        self.relay._describe(self)
        self.finished = True
        self.state = RecState.DONE
        self.outcome = outcome
        self.attach_fallback()
        self._add_cut_findings()
        if self.sse_comments:
            self.meta["sse_comments"] = self.sse_comments
        final = {
            "ended_at": time.time(),
            "outcome": outcome,
            "error": error,
            "request_size": self.request_size,
            "response_size": self.response_size,
        }
        if self.late:
            final.update(self.late)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.local_id is None:
            self.fields.update(final)
            rec = self.relay.recorder
            if self.entry is not None:
                self._flush_held()
            if rec is not None and self.entry is not None:
                # A quick exchange: row and frames in one record; its heads described by the
                # recorder process when it takes them raw.
                raw = self.raw_req
                record_http = getattr(rec, "record_http", None)  # RecorderClient has it
                if raw is not None and record_http is not None:
                    self.raw_req = None
                    resp, self.raw_resp = self.raw_resp, None
                    self.raw_sent = (*raw, resp)
                    self.local_id = record_http(
                        self.entry.session_id,
                        frames=self.pending,
                        raw=self.raw_sent,
                        fields=self.fields,
                        meta=self.meta,
                    )
                else:
                    self.materialize()
                    self.local_id = rec.record_exchange(
                        self.entry.session_id, frames=self.pending, **self.fields, meta=self.meta
                    )
                self.pending = []
        else:
            if self.raw_resp is not None:
                resp, self.raw_resp = self.raw_resp, None
                final["response_headers"] = self.relay.redactor.headers(decode_pairs(resp))
            self.update(**final, meta=self.meta)
        if self.streaming and self.entry is not None:
            self.entry.streams -= 1
        assert self.entry is not None
        router = self.relay.router
        router.done(self.entry)
        self.relay.stats_exchanges += 1
        if self.entry.rule == RULE_LEGACY_SSE and self.fields["method"] == "GET":
            # The legacy session lives exactly as long as its event stream.
            router.end(self.entry.key, reason="legacy SSE stream closed")
