"""mcptape's mitmproxy addon: record the MCP exchanges (and their OAuth dance) a host makes.

Loaded in-process by ``mcptape record --forward`` (:mod:`mcp_proxy.forward.runner`) or by a
user's own mitmproxy (``mitmdump -s addons/mcptape.py --set mcptape_db=…``). It records into the
same store, through the same recorder contract (:class:`~mcp_proxy.recorder.client.RecorderClient`),
with the same session grouping (:class:`~mcp_proxy.relay.http.sessions.SessionRouter`, one per
upstream origin), SSE framing (:class:`~mcp_proxy.framing.SSEParser`) and redaction
(:class:`~mcp_proxy.redact.Redactor`) as the reverse proxy, so ``show``, ``check``, the
dashboard, export, diff, replay and mock read forward-proxy sessions unchanged.

What it does to flows:

- Flows that are neither MCP nor OAuth (see :mod:`mcp_proxy.forward.recognize`) are not
  touched at all and not recorded (``--set mcptape_record_all=true`` records them as plain
  exchanges, still untouched).
- An event-stream response of an MCP request (or of a GET that asks for one) is *streamed*: a
  callable ``flow.response.stream`` set in ``responseheaders`` passes every chunk on unchanged as
  it arrives — mitmproxy would otherwise hold the stream until it ends — and tees it into the
  SSE parser, so each event is recorded as it passes. A ``stream`` another addon set is kept and
  wrapped: what is recorded is what that addon let through to the host. Large or unsized bodies
  of MCP/OAuth exchanges are streamed the same way; small ones stay buffered, so a mitmweb user
  still sees them.
- Nothing is rewritten; the host and the server see the same bytes as without the addon.

Recording is a copy: the SSE events of a chunk are handed to the recorder with ``call_soon``,
after mitmproxy has written the chunk on. Secrets never reach the disk: headers, URLs and
non-MCP bodies are redacted here; frame bodies in the recorder process (its policy comes from
``MCPTAPE_REDACT``, as for the reverse proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from mcp_proxy.forward.oauth import OAuthLinker
from mcp_proxy.forward.recognize import (
    RequestView,
    endpoint_key,
    is_event_stream,
    legacy_endpoint,
    looks_jsonrpc_data,
    origin_of,
)
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.headers import mcp_headers
from mcp_proxy.limits import MAX_RECORDED_BODY, STREAM_ABOVE
from mcp_proxy.recorder.contract import Producer
from mcp_proxy.redact import ENV_REDACT, Redactor
from mcp_proxy.relay.http.common import cut_findings, decode_for_record, default_reason, meta_body
from mcp_proxy.relay.http.sessions import (
    RULE_CLIENT,
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    BodyFacts,
    SessionEntry,
    SessionRouter,
    body_facts,
    query_session_id,
)
from mcp_proxy.relay.http.wire import WireFrame

__all__ = ["McpTape"]

log = logging.getLogger("mcptape.forward")


KIND_MCP = "mcp"
KIND_MAYBE = "maybe-sse"  # a GET asking for an event stream: MCP if its first event says so
KIND_OAUTH = "oauth"
KIND_OTHER = "other"
KIND_DROPPED = "dropped"


def _text(value: bytes) -> str:
    return value.decode("ascii") if value.isascii() else value.decode("utf-8", "backslashreplace")


class _Ex:
    """One recorded flow: its exchange row, its frames, its session."""

    __slots__ = (
        "authorization",
        "entry",
        "facts",
        "fields",
        "finished",
        "kept",
        "kind",
        "late",
        "local_id",
        "meta",
        "oauth_role",
        "origin",
        "parser",
        "parts",
        "pending",
        "request_size",
        "responded",
        "response_size",
        "router",
        "streamed",
        "streaming",
        "transport",
        "url",
    )

    def __init__(self, kind: str, origin: str, router: SessionRouter, url: str) -> None:
        self.kind = kind
        self.origin = origin
        self.router = router
        self.url = url
        self.fields: dict[str, Any] = {}
        self.meta: dict[str, Any] = {}
        self.entry: SessionEntry | None = None
        self.local_id: int | None = None
        self.pending: list[Frame] = []
        self.facts: BodyFacts | None = None
        self.authorization: str | None = None
        self.parser: SSEParser | None = None
        self.parts: list[bytes] = []
        self.kept = 0
        self.request_size = 0
        self.response_size = 0
        self.responded = False
        self.finished = False
        self.streamed = False
        self.streaming = False
        self.late: dict[str, Any] = {}
        self.oauth_role: str | None = None
        self.transport = "http"


class McpTape:
    """The addon. Give it a recorder to share one (``mcptape record --forward``); without one it
    starts its own recorder process from its options when mitmproxy is running."""

    def __init__(
        self,
        recorder: Producer | None = None,
        *,
        redactor: Redactor | None = None,
        name: str | None = None,
        idle_cut: float = 300.0,
        record_all: bool = False,
    ) -> None:
        self.recorder: Any = recorder
        self._owns_recorder = False
        self.redactor = redactor or Redactor()
        self.name = name
        self.idle_cut = idle_cut
        self.record_all = record_all
        self.db: str | None = None
        self.routers: dict[str, SessionRouter] = {}
        #: Endpoints (origin + path) known to speak MCP.
        self.mcp_endpoints: set[str] = set()
        self.oauth = OAuthLinker()
        self.stats_exchanges = 0
        self._configured_by_options = recorder is None

    # ------------------------------------------------------------------ mitmproxy options
    def load(self, loader: Any) -> None:
        loader.add_option(
            "mcptape_db",
            str,
            "",
            "mcptape: database path or URL to record MCP traffic into "
            "(default: MCPTAPE_DB or the user data dir).",
        )
        loader.add_option("mcptape_name", str, "", "mcptape: a name for the recorded sessions.")
        loader.add_option(
            "mcptape_redact",
            bool,
            True,
            "mcptape: redact credentials before they reach the disk (turn off for local "
            "debugging only).",
        )
        loader.add_option(
            "mcptape_record_all",
            bool,
            False,
            "mcptape: also record flows that are not MCP or OAuth, as plain HTTP exchanges.",
        )
        loader.add_option(
            "mcptape_idle_cut",
            float,
            300.0,
            "mcptape: seconds of idleness that end a sessionless (2026-07-28) group.",
        )

    def configure(self, updated: set[str]) -> None:
        if not self._configured_by_options:
            return
        from mitmproxy import ctx

        opts = ctx.options
        if "mcptape_db" in updated:
            self.db = opts.mcptape_db or None
        if "mcptape_name" in updated:
            self.name = opts.mcptape_name or None
        if "mcptape_redact" in updated:
            self.redactor = Redactor(enabled=bool(opts.mcptape_redact))
        if "mcptape_record_all" in updated:
            self.record_all = bool(opts.mcptape_record_all)
        if "mcptape_idle_cut" in updated:
            self.idle_cut = float(opts.mcptape_idle_cut)
            for router in self.routers.values():
                router.idle_cut = self.idle_cut

    def running(self) -> None:
        if self.recorder is not None:
            return
        from mcp_proxy.recorder.client import RecorderClient

        # The worker redacts frame bodies with the policy it is given (never in clear).
        recorder = RecorderClient.for_db(self.db, env={ENV_REDACT: self.redactor.to_env()})
        recorder.start()
        self.recorder = recorder
        self._owns_recorder = True
        log.info("mcptape: recording MCP traffic into %s", recorder.url)

    def done(self) -> None:
        self.close()

    def close(self) -> None:
        """End every session; close the recorder if this addon started it."""
        self.oauth.flush_all(self)
        for router in self.routers.values():
            router.close_all("proxy stopped")
        if self._owns_recorder and self.recorder is not None:
            self.recorder.close()
            self.recorder = None
            self._owns_recorder = False

    # ------------------------------------------------------------------ sessions
    def router_for(self, origin: str) -> SessionRouter:
        router = self.routers.get(origin)
        if router is None:
            base_meta: dict[str, Any] = {"relay": {"mode": "forward", "upstream": origin}}
            if not self.redactor.enabled:
                base_meta["redaction"] = "off: credentials are recorded in clear"
            router = SessionRouter(
                self.recorder,
                name=self.name,
                upstream=origin,
                idle_cut=self.idle_cut,
                base_meta=base_meta,
            )
            self.routers[origin] = router
        elif router.recorder is None and self.recorder is not None:
            router.recorder = self.recorder
        return router

    def attach(self, ex: _Ex, entry: SessionEntry) -> None:
        if ex.entry is not None:
            return
        ex.entry = entry
        ex.router.begin(entry)

    def attach_fallback(self, ex: _Ex) -> None:
        if ex.entry is not None:
            return
        router = ex.router
        facts = ex.facts
        if facts is not None and facts.client_name is not None:
            key = router.client_key(facts.client_name, facts.client_version, ex.authorization)
            client = {"name": facts.client_name, "version": facts.client_version}
            self.attach(ex, router.get(key, RULE_CLIENT, grouping={"client": client}))
            return
        key, rule, grouping = router.keyless(ex.authorization)
        self.attach(ex, router.get(key, rule, grouping=grouping))

    def _group_key(self, ex: _Ex) -> str:
        """The key :meth:`attach_fallback` would place the exchange under."""
        router = ex.router
        facts = ex.facts
        if facts is not None and facts.client_name is not None:
            return router.client_key(facts.client_name, facts.client_version, ex.authorization)
        return router.keyless(ex.authorization)[0]

    def register(self, ex: _Ex) -> None:
        """Hand the exchange row and its frames so far to the recorder (its session is known)."""
        if ex.local_id is not None or ex.entry is None:
            return
        rec = self.recorder
        if rec is None:
            ex.pending = []
            return
        self.oauth.before_register(self, ex)
        ex.local_id = rec.new_exchange(ex.entry.session_id, **ex.fields, meta=ex.meta)
        for frame in ex.pending:
            frame.http_exchange = ex.local_id
            rec.put(ex.entry.session_id, frame)
        ex.pending = []

    def frame(self, ex: _Ex, frame: Frame) -> None:
        if ex.local_id is None:
            ex.pending.append(frame)
            return
        rec = self.recorder
        if rec is not None and ex.entry is not None:
            frame.http_exchange = ex.local_id
            rec.put(ex.entry.session_id, frame)

    def update_fields(self, ex: _Ex, **fields: Any) -> None:
        # Not ``update``: mitmproxy calls an addon's ``update(flows)`` after every event of
        # every flow (its ``update`` hook), so a method of that name here raised on each one,
        # and mitmproxy formatted and logged the traceback each time — most of the addon's
        # cost per call (see test_mitmdump.py::test_mitmdump_loads_the_addon).
        if ex.local_id is None:
            ex.fields.update(fields)
            return
        if self.recorder is not None:
            self.recorder.update_exchange(ex.local_id, **fields)

    def finish(self, ex: _Ex, outcome: str, error: str | None = None) -> None:
        """The exchange ended: final fields, and the row (with its frames) if not yet given."""
        if ex.finished:
            return
        ex.finished = True
        if ex.kind == KIND_DROPPED:
            return
        if ex.kind == KIND_MAYBE:
            # An event stream that never showed MCP content: not ours, never recorded.
            return
        if self.oauth.hold(self, ex, outcome, error):
            return  # kept back until the MCP session it serves is known
        self.attach_fallback(ex)
        self._write_finished(ex, outcome, error)

    def _write_finished(self, ex: _Ex, outcome: str, error: str | None) -> None:
        final: dict[str, Any] = {
            "ended_at": ex.late.pop("ended_at", None) or time.time(),
            "outcome": outcome,
            "error": error,
            "request_size": ex.request_size,
            "response_size": ex.response_size,
        }
        final.update(ex.late)
        rec = self.recorder
        assert ex.entry is not None
        for finding in cut_findings(ex.meta):  # a body cut for the recording (a bomb)
            self.add_finding(ex, **finding)
        if ex.local_id is None:
            ex.fields.update(final)
            if rec is not None:
                self.oauth.before_register(self, ex)
                ex.local_id = rec.record_exchange(
                    ex.entry.session_id, frames=ex.pending, **ex.fields, meta=ex.meta
                )
            ex.pending = []
        elif rec is not None:
            rec.update_exchange(ex.local_id, **final, meta=ex.meta)
        if ex.streaming:
            ex.entry.streams = max(0, ex.entry.streams - 1)
            ex.streaming = False
        ex.router.done(ex.entry)
        self.stats_exchanges += 1
        if ex.entry.rule == RULE_LEGACY_SSE and ex.fields.get("method") == "GET":
            ex.router.end(ex.entry.key, reason="legacy SSE stream closed")
        elif (
            ex.fields.get("method") == "DELETE"
            and ex.entry.rule == RULE_MCP_SESSION
            and outcome == "complete"
            and 200 <= int(ex.fields.get("status") or ex.late.get("status") or 0) < 300
        ):
            ex.router.end(ex.entry.key, reason="DELETE")

    def add_finding(self, ex: _Ex, code: str, severity: str, title: str, detail: str) -> None:
        if self.recorder is None or ex.entry is None:
            return
        self.recorder.add_finding(
            ex.entry.session_id, code=code, severity=severity, title=title, detail=detail
        )

    # ------------------------------------------------------------------ hooks
    def request(self, flow: Any) -> None:
        if "mcptape" in flow.metadata:
            return
        req = flow.request
        url = req.url
        raw_headers = req.headers.fields
        headers = [(k.decode("latin-1"), _text(v)) for k, v in raw_headers]
        body = req.raw_content or b""
        view = RequestView(req.method, url, headers, body)
        ekey = endpoint_key(url)
        kind: str | None = None
        oauth_role = None
        if body and body.lstrip()[:1] in (b"{", b"[") and view.body_facts().is_jsonrpc:
            kind = KIND_MCP
        else:
            # Before the Mcp-* headers: SDK clients send MCP-Protocol-Version on their OAuth
            # discovery requests too, and those are part of the dance, not MCP messages.
            oauth_role = self.oauth.kind(view)
            if oauth_role is not None:
                kind = KIND_OAUTH
            elif view.has_mcp_header or ekey in self.mcp_endpoints:
                kind = KIND_MCP
        if (
            kind is None
            and req.method == "GET"
            and "text/event-stream" in (view.header("accept") or "")
        ):
            kind = KIND_MAYBE
        if kind is None and self.record_all:
            kind = KIND_OTHER
        if kind is None:
            return
        if kind == KIND_MCP:
            self.mcp_endpoints.add(ekey)
        origin = origin_of(url)
        if kind == KIND_OAUTH:
            origin = self.oauth.origin_for(view, origin)
        ex = _Ex(kind, origin, self.router_for(origin), url)
        ex.oauth_role = oauth_role
        flow.metadata["mcptape"] = ex
        ex.authorization = view.header("authorization")
        ex.request_size = len(body)
        # The lean engine streamed a larger body: the flow holds its first MAX_RECORDED_BODY bytes.
        whole = flow.metadata.get("mcptape_request_size")
        cut = isinstance(whole, int) and whole > len(body)
        if cut:
            ex.request_size = whole
        red = self.redactor
        rec_headers = red.headers([[k, v] for k, v in headers])
        ex.fields = {
            "method": req.method,
            "started_at": req.timestamp_start or time.time(),
            "url": red.url(url),
            "request_headers": rec_headers,
        }
        meta = ex.meta
        meta["forward"] = True
        meta["http_version"] = req.http_version
        peer = getattr(flow.client_conn, "peername", None)
        if peer:
            meta["peer"] = f"{peer[0]}:{peer[1]}"
        if view.has_mcp_header:
            meta["mcp_headers"] = mcp_headers(rec_headers)
        if oauth_role is not None:
            meta["oauth"] = {"role": oauth_role}
        facts = view.body_facts() if kind == KIND_MCP else None
        ex.facts = facts
        ctype = view.header("content-type")
        coding = (view.header("content-encoding") or "identity").strip().lower()
        complete = True
        if body and coding != "identity":  # decoded after it went, bounded (a bomb's head)
            decoded = decode_for_record(body, coding, "request", ctype)
            meta.update(decoded.note or {})
            body, complete = decoded.data or b"", decoded.complete
        if body:
            if kind == KIND_MCP:
                self.frame(
                    ex,
                    WireFrame(
                        Direction.C2S,
                        Channel.HTTP,
                        body,
                        time.monotonic_ns(),
                        ex.fields["started_at"],
                        complete and not cut,
                        extra={"content_type": ctype},
                    ),
                )
            else:
                meta["request_body"] = meta_body(self.redactor, body, ctype)
            if cut:
                meta["request_body_recorded"] = len(body)
                meta["request_body_streamed"] = True
        # Where it belongs, when the request says so.
        router = ex.router
        sid = view.header("mcp-session-id")
        query = urlsplit(url).query
        legacy_sid = query_session_id(query) if query and kind == KIND_MCP else None
        if sid:
            self.attach(
                ex,
                router.get(router.mcp_key(sid), RULE_MCP_SESSION, grouping={"mcp_session_id": sid}),
            )
        elif legacy_sid:
            ex.transport = "sse"
            self.attach(
                ex,
                router.get(
                    router.sse_key(legacy_sid),
                    RULE_LEGACY_SSE,
                    transport="sse",
                    grouping={"sse_session_id": legacy_sid},
                ),
            )
        elif kind == KIND_MCP and facts is not None and not facts.is_initialize:
            if not (req.method == "GET" and "text/event-stream" in (view.header("accept") or "")):
                # Join a live group now; a new group is opened at the response headers only
                # (a 401 there opens an OAuth dance, not a session).
                key = self._group_key(ex)
                if key in router.entries:
                    self.attach_fallback(ex)
        if kind == KIND_OAUTH:
            self.oauth.on_request(self, ex, view)
        if ex.entry is not None and ex.entry.streams:
            # A stream of this session is open and may answer this request: record it first.
            self.register(ex)

    def responseheaders(self, flow: Any) -> None:
        ex: _Ex | None = flow.metadata.get("mcptape")
        if ex is None or ex.finished:
            return
        resp = flow.response
        raw = resp.headers.fields
        rec_headers = self.redactor.headers([[k.decode("latin-1"), _text(v)] for k, v in raw])
        for pair in rec_headers:
            if pair[0].lower() in ("location", "content-location"):
                # An authorization redirect carries the code (and state) in its query.
                pair[1] = self.redactor.url(pair[1])
        ctype = resp.headers.get("content-type", "")
        sse = is_event_stream(ctype)
        router = ex.router
        if ex.kind == KIND_MCP and ex.entry is None:
            new_sid = resp.headers.get("mcp-session-id")
            if new_sid:
                self.attach(
                    ex,
                    router.get(
                        router.mcp_key(new_sid),
                        RULE_MCP_SESSION,
                        grouping={"mcp_session_id": new_sid, "opened_by": "initialize"},
                    ),
                )
            elif resp.status_code == 401:
                pass  # an OAuth dance starts: its session is the one that gets past it
            elif not (sse and ex.fields["method"] == "GET"):
                self.attach_fallback(ex)
        head = {
            "status": resp.status_code,
            "response_headers": rec_headers,
            "first_byte_at": resp.timestamp_start or time.time(),
        }
        if resp.reason and resp.reason != default_reason(resp.status_code):
            ex.meta["reason"] = resp.reason
        encoding = resp.headers.get("content-encoding", "").strip().lower()
        if encoding and encoding != "identity":
            ex.meta["content_encoding"] = encoding
        length = resp.headers.get("content-length")
        big = length is None or not length.isdigit() or int(length) > STREAM_ABOVE
        jsonish = ctype.lower().startswith("application/json")
        stream = sse and ex.kind in (KIND_MCP, KIND_MAYBE)
        if not stream and ex.kind != KIND_OTHER and big and not (jsonish and length is None):
            stream = flow.request.method != "HEAD" and resp.status_code not in (204, 304)
        if ex.kind == KIND_MAYBE and not sse:
            ex.kind = KIND_DROPPED  # not an event stream: not ours
            return
        if stream:
            ex.streamed = True
            if sse:
                ex.parser = SSEParser()
            self.update_fields(ex, **head)
            if ex.entry is not None:
                if not ex.streaming:
                    ex.streaming = True
                    ex.entry.streams += 1
                self.register(ex)
            resp.stream = self._tee(ex, resp.stream)
        else:
            ex.late.update(head)

    def _tee(self, ex: _Ex, inner: Any) -> Callable[[bytes], Iterable[bytes] | bytes]:
        """The stream callable: pass each chunk on, record a copy after it went."""
        loop = asyncio.get_running_loop()
        parser = ex.parser

        def record(data: bytes) -> None:
            if not data or ex.kind == KIND_DROPPED:
                return
            ex.response_size += len(data)
            if parser is not None:
                events = parser.feed(data)
                if events:
                    loop.call_soon(self._sse_events, ex, events, True)
            elif ex.kind != KIND_OTHER and ex.kept < MAX_RECORDED_BODY:
                piece = data[: MAX_RECORDED_BODY - ex.kept]
                ex.parts.append(piece)
                ex.kept += len(piece)

        if callable(inner):

            def wrapped(data: bytes) -> Iterable[bytes] | bytes:
                out = inner(data)
                chunks = [bytes(out)] if isinstance(out, bytes | bytearray) else list(out)
                for c in chunks:
                    record(bytes(c))
                return chunks

            return wrapped

        def tee(data: bytes) -> bytes:
            record(data)
            return data

        return tee

    def _sse_events(self, ex: _Ex, events: list[SSEEvent], complete: bool) -> None:
        if ex.kind == KIND_DROPPED:
            return
        mono = time.monotonic_ns()
        wall = time.time()
        for ev in events:
            if ev.comment_only:
                ex.meta["sse_comments"] = ex.meta.get("sse_comments", 0) + 1
                continue
            if ex.kind == KIND_MAYBE:
                if not self._decide_stream(ex, ev):
                    return
            if (
                not ex.responded
                and ex.fields.get("method") == "POST"
                and b'"method"' not in ev.data[:160]
                and (b'"result"' in ev.data[:160] or b'"error"' in ev.data[:160])
            ):
                ex.responded = True
            self.frame(
                ex,
                WireFrame(
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

    def _decide_stream(self, ex: _Ex, ev: SSEEvent) -> bool:
        """The first event of a GET event stream says whether it is MCP (and which session)."""
        router = ex.router
        if ev.event == "endpoint":
            url, sid = legacy_endpoint(ex.url, ev.data)
            self.mcp_endpoints.add(endpoint_key(url))
            self.mcp_endpoints.add(endpoint_key(ex.url))
            ex.kind = KIND_MCP
            ex.transport = "sse"
            if sid:
                self.attach(
                    ex,
                    router.get(
                        router.sse_key(sid),
                        RULE_LEGACY_SSE,
                        transport="sse",
                        grouping={"sse_session_id": sid},
                    ),
                )
        elif looks_jsonrpc_data(ev.data):
            ex.kind = KIND_MCP
            self.mcp_endpoints.add(endpoint_key(ex.url))
        else:
            ex.kind = KIND_DROPPED
            ex.pending = []
            ex.parser = None
            return False
        self.attach_fallback(ex)
        if not ex.streaming and ex.entry is not None:
            ex.streaming = True
            ex.entry.streams += 1
        self.register(ex)
        return True

    def response(self, flow: Any) -> None:
        ex: _Ex | None = flow.metadata.get("mcptape")
        if ex is None or ex.finished:
            return
        resp = flow.response
        ex.late["ended_at"] = resp.timestamp_end or time.time()
        if ex.streamed:
            # Events of the last chunks may still be queued (call_soon): finish after them.
            asyncio.get_running_loop().call_soon(self._end_stream, ex, flow)
            return
        body = resp.raw_content or b""
        ex.response_size = len(body)
        # The lean engine streamed a larger body: the flow holds its first MAX_RECORDED_BODY bytes.
        whole = flow.metadata.get("mcptape_response_size")
        cut = isinstance(whole, int) and whole > len(body)
        if cut:
            ex.response_size = whole
            ex.meta["response_body_recorded"] = len(body)
        ctype = resp.headers.get("content-type", "")
        self._record_body(ex, body, ctype, complete=not cut)
        self._on_response(ex, flow)
        self.finish(ex, "complete")

    def _end_stream(self, ex: _Ex, flow: Any) -> None:
        self._close_stream(ex, flow, complete=True)
        self._on_response(ex, flow)
        self.finish(ex, "complete")

    def _close_stream(self, ex: _Ex, flow: Any, *, complete: bool) -> None:
        if ex.parser is not None:
            rest = ex.parser.flush()
            if rest is not None:
                self._sse_events(ex, [rest], False)
            return
        if ex.parts:
            body = b"".join(ex.parts)
            ex.parts = []
            truncated = ex.response_size > len(body)
            if truncated:
                ex.meta["response_body_recorded"] = len(body)
            ctype = flow.response.headers.get("content-type", "") if flow.response else ""
            self._record_body(ex, body, ctype, complete=complete and not truncated)

    def _on_response(self, ex: _Ex, flow: Any) -> None:
        """Learn from a finished response (OAuth documents, 401 challenges) before finishing."""
        with contextlib.suppress(Exception):  # learning must never break recording
            self.oauth.on_response(self, ex, flow)

    def error(self, flow: Any) -> None:
        ex: _Ex | None = flow.metadata.get("mcptape")
        if ex is None or ex.finished:
            return
        msg = flow.error.msg if flow.error is not None else "error"
        asyncio.get_running_loop().call_soon(self._on_error, ex, flow, msg)

    def _on_error(self, ex: _Ex, flow: Any, msg: str) -> None:
        if ex.finished:
            return
        low = msg.lower()
        resp = flow.response
        if "client disconnected" in low:
            self._close_stream(ex, flow, complete=False)
            if ex.responded:
                ex.meta["host_closed_after_response"] = True
                self.finish(ex, "complete")
            else:
                self.finish(ex, "host_aborted", msg)
            return
        self._close_stream(ex, flow, complete=False)
        if resp is None:
            # The proxy answered the host itself (502): say so, as the reverse proxy does.
            by = flow.metadata.get("mcptape_engine", "mitmproxy")
            ex.meta["synthesized"] = {"by": by, "status": 502, "kind": "upstream-error"}
            ex.late.setdefault("status", 502)
        if ex.kind == KIND_MAYBE:
            ex.kind = KIND_MCP if ex.pending else KIND_DROPPED
            if ex.kind == KIND_MCP:
                self.attach_fallback(ex)
        tls = any(w in low for w in ("tls", "certificate", "ssl", "handshake"))
        self.finish(ex, "upstream_error", msg)
        if tls and ex.entry is not None:
            self.add_finding(
                ex,
                "forward.upstream_tls",
                "error",
                "The upstream's TLS handshake failed",
                f"The forward proxy could not establish TLS with {ex.origin}: {msg}. The host got "
                "the proxy's 502 response; check the server's certificate (expired, self-signed,"
                " wrong host name) or trust the CA that signed it "
                "(ssl_verify_upstream_trusted_ca in mitmproxy's config.yaml).",
            )

    # ------------------------------------------------------------------ bodies
    def _record_body(self, ex: _Ex, body: bytes, ctype: str, *, complete: bool) -> None:
        if not body or ex.kind == KIND_DROPPED:
            return
        encoding = ex.meta.get("content_encoding")
        if encoding:  # bounded: a decompression bomb costs MAX_INFLATED_BODY bytes at most
            decoded = decode_for_record(body, encoding, "response", ctype)
            ex.meta.update(decoded.note or {})
            if decoded.data is None:
                return
            body, complete = decoded.data, complete and decoded.complete
        jsonish = ctype.lower().startswith("application/json") or body.lstrip()[:1] in (b"{", b"[")
        if ex.kind == KIND_MCP and jsonish:
            self.frame(
                ex,
                WireFrame(
                    Direction.S2C,
                    Channel.HTTP,
                    body,
                    time.monotonic_ns(),
                    time.time(),
                    complete,
                    extra={"content_type": ctype},
                ),
            )
        else:
            ex.meta["response_body"] = meta_body(self.redactor, body, ctype)


# body_facts is re-exported for the OAuth linker and tests (one parser of request bodies).
__all__ += ["body_facts"]
