"""One exchange the forward proxy records: its state and what happens to it, event by event.

A :class:`TapeExchange` is made by :meth:`mcp_proxy.forward.tape.ForwardTape.request` for a
request that is MCP, part of an OAuth dance, or (with ``record_all``) anything; either engine
then tells it what passed, after the bytes went:

- :meth:`~TapeExchange.response_head`: the response's head; True when its body is to be copied
  chunk by chunk (:meth:`~TapeExchange.chunk`) — an event stream, or a large or unsized body —
  instead of being handed whole at the end;
- :meth:`~TapeExchange.chunk`: a copy of one chunk of a copied body (SSE events are recorded as
  frames as they complete; other bodies keep their first ``MAX_RECORDED_BODY`` bytes);
- :meth:`~TapeExchange.done`: the response ended (with its body when it was not copied);
- :meth:`~TapeExchange.error`: the exchange broke (host gone, upstream unreachable or reset).

Everything here is plain mcptape values: no mitmproxy import (the addon,
:mod:`mcp_proxy.forward.addon`, translates its flows into these calls; the lean engine makes
them directly).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_proxy.forward.recognize import (
    endpoint_key,
    is_event_stream,
    legacy_endpoint,
    looks_jsonrpc_data,
)
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.limits import STREAM_ABOVE
from mcp_proxy.relay.http.common import default_reason, response_body_frame
from mcp_proxy.relay.http.kept import Kept
from mcp_proxy.relay.http.sessions import (
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    BodyFacts,
    SessionEntry,
    SessionRouter,
)

if TYPE_CHECKING:
    from mcp_proxy.forward.tape import ForwardTape
    from mcp_proxy.forward.tunnel import Target
    from mcp_proxy.redact import Redactor

__all__ = [
    "KIND_DROPPED",
    "KIND_MAYBE",
    "KIND_MCP",
    "KIND_OAUTH",
    "KIND_OTHER",
    "RequestHead",
    "ResponseHead",
    "TapeExchange",
    "header_value",
    "text",
]

KIND_MCP = "mcp"
KIND_MAYBE = "maybe-sse"  # a GET asking for an event stream: MCP if its first event says so
KIND_OAUTH = "oauth"
KIND_OTHER = "other"
KIND_DROPPED = "dropped"

TLS_TITLE = "The upstream's TLS handshake failed"
TLS_FAILED = (
    "The forward proxy could not establish TLS with {origin}: {msg}. The host got the proxy's "
    "502 response; check the server's certificate (expired, self-signed, wrong host name) or "
    "trust the CA that signed it (ssl_verify_upstream_trusted_ca in mitmproxy's config.yaml)."
)

Headers = Sequence[tuple[bytes, bytes]]


def text(value: bytes) -> str:
    """A header value as text (UTF-8 where it is not ASCII, never raising)."""
    return value.decode("ascii") if value.isascii() else value.decode("utf-8", "backslashreplace")


def header_value(raw: Headers, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) in raw header pairs, or None."""
    for k, v in raw:
        if k.lower() == name:
            return text(v)
    return None


@dataclass(slots=True)
class RequestHead:
    """A request as it went upstream (its body apart)."""

    method: str
    url: str  # absolute: scheme://host[:port]/path?query
    headers: Headers  # raw pairs, as the host sent them
    http_version: str  # "HTTP/1.1"
    started_at: float  # wall clock
    peer: str | None = None  # the host's address, host:port


@dataclass(slots=True)
class ResponseHead:
    """A response's head as it arrived."""

    status: int
    reason: str
    headers: Headers
    at: float  # wall clock of its first byte

    def header(self, name: bytes) -> str | None:
        return header_value(self.headers, name)


@dataclass(slots=True)
class RequestRow:
    """The exchange row's request columns."""

    method: str
    started_at: float
    url: str
    request_headers: list[list[str]]

    def fields(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "started_at": self.started_at,
            "url": self.url,
            "request_headers": self.request_headers,
        }


@dataclass(slots=True)
class HeadRow:
    """The exchange row's response-head columns."""

    status: int
    response_headers: list[list[str]]
    first_byte_at: float

    def fields(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "response_headers": self.response_headers,
            "first_byte_at": self.first_byte_at,
        }


class TapeExchange:
    """One recorded exchange: its row, its frames, its session (see the module doc)."""

    __slots__ = (
        "authorization",
        "copy",
        "ctype",
        "ended_at",
        "entry",
        "facts",
        "finished",
        "head",
        "head_early",
        "kind",
        "local_id",
        "meta",
        "oauth_role",
        "origin",
        "parser",
        "pending",
        "recorded",
        "request_size",
        "responded",
        "response",
        "response_size",
        "router",
        "row",
        "streamed",
        "streaming",
        "synthesized_status",
        "tape",
        "target",
        "transport",
        "url",
    )

    def __init__(
        self, tape: ForwardTape, kind: str, origin: str, router: SessionRouter, url: str
    ) -> None:
        self.tape = tape
        self.kind = kind
        self.origin = origin
        self.router = router
        self.url = url
        self.row: RequestRow | None = None
        #: The response head's columns, once it came; ``head_early``: already given to the
        #: recorder (a streamed response), else written when the exchange ends.
        self.head: HeadRow | None = None
        self.head_early = False
        self.response: ResponseHead | None = None
        self.synthesized_status: int | None = None
        self.ended_at: float | None = None
        self.meta: dict[str, Any] = {}
        self.entry: SessionEntry | None = None
        self.local_id: int | None = None
        self.pending: list[Frame] = []
        self.facts: BodyFacts | None = None
        self.authorization: str | None = None
        self.parser: SSEParser | None = None
        #: What is kept of a copied body that is not an event stream (MAX_RECORDED_BODY).
        self.copy: Kept | None = None
        self.ctype = ""
        self.request_size = 0
        self.response_size = 0
        self.responded = False
        #: The response body was recorded already (a hook decided it): its end records none.
        self.recorded = False
        self.finished = False
        self.streamed = False
        self.streaming = False
        self.oauth_role: str | None = None
        self.transport = "http"
        #: Where the lean engine sent the request (a hook's ``duplicate`` sends it there
        #: again); None from the mitmproxy engine.
        self.target: Target | None = None

    # ------------------------------------------------------------------ facts
    @property
    def method(self) -> str:
        return self.row.method if self.row is not None else ""

    @property
    def status(self) -> int | None:
        return self.head.status if self.head is not None else self.synthesized_status

    def fields(self) -> dict[str, Any]:
        """The row's columns known so far, for the recorder."""
        out = self.row.fields() if self.row is not None else {}
        if self.head_early and self.head is not None:
            out.update(self.head.fields())
        return out

    def head_fields(self) -> dict[str, Any]:
        if self.head is not None:
            return self.head.fields()
        return {} if self.synthesized_status is None else {"status": self.synthesized_status}

    # ------------------------------------------------------------------ for hooks
    # What fault injection and intercept read and write of an exchange
    # (:class:`~mcp_proxy.relay.http.hooks.HookExchange`), and how their verdicts end it.
    @property
    def redactor(self) -> Redactor:
        return self.tape.redactor

    def frame(self, frame: Frame) -> None:
        self.tape.frame(self, frame)

    def attach_fallback(self) -> None:
        self.tape.attach_fallback(self)

    def register(self) -> None:
        self.tape.register(self)

    def add_finding(self, session_id: str, **finding: Any) -> None:
        rec = self.tape.recorder
        if rec is not None:
            rec.add_finding(session_id, **finding)

    def message(self, body: bytes) -> None:
        """A whole response body, recorded as the upstream sent it before a hook decides it."""
        self.response_size = len(body)
        self._record_body(body, complete=True)
        self.recorded = True

    def answered(self, status: int, headers: Sequence[tuple[str, str]], size: int) -> None:
        """A hook answered the host in the upstream's place (the body: its inject frame)."""
        now = time.time()
        pairs = [[k, v] for k, v in headers] + [["Content-Length", str(size)]]
        self.head = HeadRow(status, pairs, now)
        self.head_early = False
        self.response_size = size
        self.ended_at = now
        self.tape.finish(self, "complete")

    def ended(self, outcome: str, error: str | None = None) -> None:
        """Ended by a hook (``injected_reset``; ``complete``: a stream ended cleanly)."""
        if self.finished:
            return
        self.ended_at = time.time()
        self._close_stream(complete=outcome == "complete")
        self.tape.finish(self, outcome, error)

    # ------------------------------------------------------------------ response
    def response_head(self, resp: ResponseHead) -> bool:
        """The response's head arrived; True: copy its body here chunk by chunk."""
        self.response = resp
        if self.finished:
            return False
        tape = self.tape
        red = tape.redactor
        pairs: list[tuple[str, str]] = []
        names: dict[str, str] = {}  # lower-case name -> first value, as it came
        for kb, vb in resp.headers:
            k = kb.decode("latin-1")
            v = text(vb)
            pairs.append((k, v))
            names.setdefault(k.lower(), v)
        rec_headers = red.headers(pairs)
        if "location" in names or "content-location" in names:
            for pair in rec_headers:
                if pair[0].lower() in ("location", "content-location"):
                    # An authorization redirect carries the code (and state) in its query.
                    pair[1] = red.url(pair[1])
        ctype = names.get("content-type", "")
        self.ctype = ctype
        sse = is_event_stream(ctype)
        router = self.router
        if self.kind == KIND_MCP and self.entry is None:
            new_sid = names.get("mcp-session-id")
            if new_sid:
                grouping = {"mcp_session_id": new_sid, "opened_by": "initialize"}
                tape.attach(
                    self, router.get(router.mcp_key(new_sid), RULE_MCP_SESSION, grouping=grouping)
                )
            elif resp.status == 401:
                pass  # an OAuth dance starts: its session is the one that gets past it
            elif not (sse and self.method == "GET"):
                tape.attach_fallback(self)
        self.head = HeadRow(resp.status, rec_headers, resp.at)
        if resp.reason and resp.reason != default_reason(resp.status):
            self.meta["reason"] = resp.reason
        encoding = names.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            self.meta["content_encoding"] = encoding
        length = names.get("content-length")
        big = length is None or not length.isdigit() or int(length) > STREAM_ABOVE
        jsonish = ctype.lower().startswith("application/json")
        stream = sse and self.kind in (KIND_MCP, KIND_MAYBE)
        if not stream and self.kind != KIND_OTHER and big and not (jsonish and length is None):
            stream = self.method != "HEAD" and resp.status not in (204, 304)
        if self.kind == KIND_MAYBE and not sse:
            self.kind = KIND_DROPPED  # not an event stream: not ours
            return False
        if not stream:
            return False
        self.streamed = True
        if sse:
            self.parser = SSEParser()
        elif self.kind != KIND_OTHER:
            self.copy = Kept()
        self.head_early = True
        if self.local_id is not None and tape.recorder is not None:
            tape.recorder.update_exchange(self.local_id, **self.head_fields())
        if self.entry is not None:
            self._count_stream()
            tape.register(self)
        return True

    def _count_stream(self) -> None:
        if not self.streaming and self.entry is not None:
            self.streaming = True
            self.entry.streams += 1

    def chunk(self, data: bytes) -> None:
        """A copy of one chunk of a body being copied (after it went on)."""
        if not data or self.kind == KIND_DROPPED:
            return
        self.response_size += len(data)
        parser = self.parser
        if parser is not None:
            events = parser.feed(data)
            if events:
                self._sse_events(events, True)
        elif self.copy is not None:
            self.copy.add(data)

    def _sse_events(self, events: list[SSEEvent], complete: bool) -> None:
        if self.kind == KIND_DROPPED:
            return
        mono = time.monotonic_ns()
        wall = time.time()
        for ev in events:
            if ev.comment_only:
                self.meta["sse_comments"] = self.meta.get("sse_comments", 0) + 1
                continue
            if self.kind == KIND_MAYBE and not self._decide_stream(ev):
                return
            if (
                not self.responded
                and self.method == "POST"
                and b'"method"' not in ev.data[:160]
                and (b'"result"' in ev.data[:160] or b'"error"' in ev.data[:160])
            ):
                self.responded = True
            self.tape.frame(
                self,
                Frame(
                    Direction.S2C,
                    Channel.SSE,
                    ev.data,
                    mono,
                    wall,
                    complete,
                    sse_id=ev.id,
                    sse_event=ev.event,
                ),
            )

    def _decide_stream(self, ev: SSEEvent) -> bool:
        """The first event of a GET event stream says whether it is MCP (and which session)."""
        tape = self.tape
        router = self.router
        if ev.event == "endpoint":
            url, sid = legacy_endpoint(self.url, ev.data)
            tape.mcp_endpoints.add(endpoint_key(url))
            tape.mcp_endpoints.add(endpoint_key(self.url))
            self.kind = KIND_MCP
            self.transport = "sse"
            if sid:
                tape.attach(
                    self,
                    router.get(
                        router.sse_key(sid),
                        RULE_LEGACY_SSE,
                        transport="sse",
                        grouping={"sse_session_id": sid},
                    ),
                )
        elif looks_jsonrpc_data(ev.data):
            self.kind = KIND_MCP
            tape.mcp_endpoints.add(endpoint_key(self.url))
        else:
            self.kind = KIND_DROPPED
            self.pending = []
            self.parser = None
            return False
        tape.attach_fallback(self)
        self._count_stream()
        tape.register(self)
        return True

    def done(
        self, body: bytes | None, size: int | None = None, ended_at: float | None = None
    ) -> None:
        """The response ended. ``body``: the body when it was not copied (all of it, or its
        first bytes of ``size``); None when it was copied chunk by chunk."""
        if self.finished:
            return
        self.ended_at = ended_at or time.time()
        if body is None:
            self._close_stream(complete=True)
            body = b""
        else:
            self.response_size = len(body)
            cut = size is not None and size > len(body)
            if cut and size is not None:
                self.response_size = size
                self.meta["response_body_recorded"] = len(body)
            if not self.recorded:
                self._record_body(body, complete=not cut)
        try:
            self.tape.oauth.on_response(self, body)
        except Exception:  # learning must never break recording
            pass
        self.tape.finish(self, "complete")

    def error(self, msg: str, synthesized_by: str | None = None) -> None:
        """The exchange broke. ``synthesized_by``: the engine that answered the host itself
        (a 502), when no response came."""
        if self.finished:
            return
        tape = self.tape
        self._close_stream(complete=False)
        low = msg.lower()
        if "client disconnected" in low:
            if self.responded:
                self.meta["host_closed_after_response"] = True
                tape.finish(self, "complete")
            else:
                tape.finish(self, "host_aborted", msg)
            return
        if synthesized_by is not None:
            # The proxy answered the host itself (502): say so, as the reverse proxy does.
            self.meta["synthesized"] = {
                "by": synthesized_by,
                "status": 502,
                "kind": "upstream-error",
            }
            if self.head is None:
                self.synthesized_status = 502
        if self.kind == KIND_MAYBE:
            self.kind = KIND_MCP if self.pending else KIND_DROPPED
            if self.kind == KIND_MCP:
                tape.attach_fallback(self)
        tls = any(w in low for w in ("tls", "certificate", "ssl", "handshake"))
        tape.finish(self, "upstream_error", msg)
        if tls and self.entry is not None:
            detail = TLS_FAILED.format(origin=self.origin, msg=msg)
            tape.add_finding(self, "forward.upstream_tls", "error", TLS_TITLE, detail)

    # ------------------------------------------------------------------ bodies
    def _close_stream(self, *, complete: bool) -> None:
        if self.parser is not None:
            rest = self.parser.flush()
            if rest is not None:
                self._sse_events([rest], False)
            return
        body = self.copy.take() if self.copy is not None else b""
        if body:
            truncated = self.response_size > len(body)
            if truncated:
                self.meta["response_body_recorded"] = len(body)
            self._record_body(body, complete=complete and not truncated)

    def _record_body(self, body: bytes, *, complete: bool) -> None:
        if not body or self.kind == KIND_DROPPED:
            return
        frame = response_body_frame(
            body,
            self.ctype,
            self.meta.get("content_encoding"),
            complete,
            self.meta,
            self.tape.redactor,
            lambda _data: self.kind == KIND_MCP,
        )
        if frame is not None:
            self.tape.frame(self, frame)
