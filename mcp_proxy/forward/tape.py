"""The forward proxy's recording: what both engines hand the exchanges they relay to.

:class:`ForwardTape` recognises a request (MCP, OAuth, neither: :mod:`mcp_proxy.forward.recognize`),
makes a :class:`~mcp_proxy.forward.exchange.TapeExchange` for the ones it records, groups them
into sessions (:class:`~mcp_proxy.relay.http.sessions.SessionRouter`, one per upstream origin),
links OAuth dances to the session they serve (:class:`~mcp_proxy.forward.oauth.OAuthLinker`) and
writes rows, frames and findings through the recorder contract
(:class:`~mcp_proxy.recorder.contract.Producer`) — the same store, grouping, SSE framing and
redaction as the reverse proxy, so every reader of the store works on forward sessions unchanged.

The lean engine (:mod:`mcp_proxy.forward.lean`) calls it directly; the mitmproxy addon
(:mod:`mcp_proxy.forward.addon`) translates mitmproxy's flows into the same calls. Secrets never
reach the disk: headers, URLs and non-MCP bodies are redacted here; frame bodies in the recorder
process (its policy comes from ``MCPTAPE_REDACT``, as for the reverse proxy).
"""

from __future__ import annotations

import time
from typing import Any

from mcp_proxy.forward.exchange import (
    KIND_DROPPED,
    KIND_MAYBE,
    KIND_MCP,
    KIND_OAUTH,
    KIND_OTHER,
    RequestHead,
    TapeExchange,
    text,
)
from mcp_proxy.forward.oauth import OAuthLinker
from mcp_proxy.forward.recognize import RequestView
from mcp_proxy.forward.request_side import record_request
from mcp_proxy.frames import Frame
from mcp_proxy.recorder.contract import Producer
from mcp_proxy.redact import Redactor
from mcp_proxy.relay.http.common import cut_findings
from mcp_proxy.relay.http.sessions import (
    RULE_CLIENT,
    RULE_LEGACY_SSE,
    RULE_MCP_SESSION,
    SessionEntry,
    SessionRouter,
    query_session_id,
)

__all__ = ["ForwardTape", "request_url"]


def request_url(scheme: str, host: str, port: int, path: str) -> str:
    """The absolute URL of a request, as mitmproxy writes it (default port left out, an IPv6
    host bracketed)."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80 if scheme == "http" else None
    where = host if port == default else f"{host}:{port}"
    return f"{scheme}://{where}{path}"


class ForwardTape:
    """Recognise, group, record (see the module doc). ``recorder`` may be given later (the
    mitmproxy addon starts its own when mitmproxy runs)."""

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
        self.redactor = redactor or Redactor()
        self.name = name
        self.idle_cut = idle_cut
        self.record_all = record_all
        self.routers: dict[str, SessionRouter] = {}
        #: Endpoints (origin + path) known to speak MCP.
        self.mcp_endpoints: set[str] = set()
        self.oauth = OAuthLinker()
        self.stats_exchanges = 0

    def set_idle_cut(self, seconds: float) -> None:
        self.idle_cut = seconds
        for router in self.routers.values():
            router.idle_cut = seconds

    def close(self) -> None:
        """End every session (what is still held is written first)."""
        self.oauth.flush_all(self)
        for router in self.routers.values():
            router.close_all("proxy stopped")

    # ------------------------------------------------------------------ requests
    def request(
        self, head: RequestHead, body: bytes, size: int | None = None, taken: bool = True
    ) -> TapeExchange | None:
        """A request went upstream: its exchange, or None when it is not recorded.

        ``body``: the request body (or its first bytes, ``size`` being the whole one's size);
        ``taken``: False when the upstream answered before taking all of a streamed body
        (``body`` is what went: its frame is incomplete, ``meta.request_body_not_taken``).
        """
        url = head.url
        headers = [(k.decode("latin-1"), text(v)) for k, v in head.headers]
        view = RequestView(head.method, url, headers, body)
        origin, ekey, _ = view.url_parts()
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
            and head.method == "GET"
            and "text/event-stream" in (view.header("accept") or "")
        ):
            kind = KIND_MAYBE
        if kind is None and self.record_all:
            kind = KIND_OTHER
        if kind is None:
            return None
        if kind == KIND_MCP:
            self.mcp_endpoints.add(ekey)
        if kind == KIND_OAUTH:
            origin = self.oauth.origin_for(view, origin)
        ex = TapeExchange(self, kind, origin, self.router_for(origin), url)
        ex.oauth_role = oauth_role
        record_request(ex, head, view, body, size, taken)
        return ex

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

    def attach(self, ex: TapeExchange, entry: SessionEntry) -> None:
        if ex.entry is not None:
            return
        ex.entry = entry
        ex.router.begin(entry)

    def attach_fallback(self, ex: TapeExchange) -> None:
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

    def join(self, ex: TapeExchange, view: RequestView) -> None:
        """Put a new exchange in its session when its request says which one."""
        router = ex.router
        sid = view.header("mcp-session-id")
        query = view.url_parts()[2]
        legacy_sid = query_session_id(query) if query and ex.kind == KIND_MCP else None
        if sid:
            grouping = {"mcp_session_id": sid}
            self.attach(ex, router.get(router.mcp_key(sid), RULE_MCP_SESSION, grouping=grouping))
        elif legacy_sid:
            ex.transport = "sse"
            grouping = {"sse_session_id": legacy_sid}
            entry = router.get(
                router.sse_key(legacy_sid), RULE_LEGACY_SSE, transport="sse", grouping=grouping
            )
            self.attach(ex, entry)
        elif ex.kind == KIND_MCP and ex.facts is not None and not ex.facts.is_initialize:
            if not (view.method == "GET" and "text/event-stream" in (view.header("accept") or "")):
                # Join a live group now; a new group is opened at the response headers only
                # (a 401 there opens an OAuth dance, not a session).
                if self.group_key(ex) in router.entries:
                    self.attach_fallback(ex)

    def group_key(self, ex: TapeExchange) -> str:
        """The key :meth:`attach_fallback` would place the exchange under."""
        router = ex.router
        facts = ex.facts
        if facts is not None and facts.client_name is not None:
            return router.client_key(facts.client_name, facts.client_version, ex.authorization)
        return router.keyless(ex.authorization)[0]

    # ------------------------------------------------------------------ writing
    def register(self, ex: TapeExchange) -> None:
        """Hand the exchange row and its frames so far to the recorder (its session is known):
        one item (the row, then its frames, as :meth:`write_finished` hands a finished one),
        not a row and an item per frame; its updates and later frames refer to its id."""
        if ex.local_id is not None or ex.entry is None:
            return
        rec = self.recorder
        if rec is None:
            ex.pending = []
            return
        self.oauth.before_register(self, ex)
        ex.local_id = rec.record_exchange(
            ex.entry.session_id, frames=ex.pending, **ex.fields(), meta=ex.meta
        )
        ex.pending = []

    def frame(self, ex: TapeExchange, frame: Frame) -> None:
        if ex.local_id is None:
            ex.pending.append(frame)
            return
        rec = self.recorder
        if rec is not None and ex.entry is not None:
            frame.http_exchange = ex.local_id
            rec.put(ex.entry.session_id, frame)

    def finish(self, ex: TapeExchange, outcome: str, error: str | None = None) -> None:
        """The exchange ended: final fields, and the row (with its frames) if not yet given."""
        if ex.finished:
            return
        ex.finished = True
        if ex.kind in (KIND_DROPPED, KIND_MAYBE):
            # Not ours, or an event stream that never showed MCP content: never recorded.
            return
        if self.oauth.hold(ex, outcome, error):
            return  # kept back until the MCP session it serves is known
        self.attach_fallback(ex)
        self.write_finished(ex, outcome, error)

    def write_finished(self, ex: TapeExchange, outcome: str, error: str | None) -> None:
        """Write a finished exchange (now in its session) and end what it ends."""
        final: dict[str, Any] = {
            "ended_at": ex.ended_at or time.time(),
            "outcome": outcome,
            "error": error,
            "request_size": ex.request_size,
            "response_size": ex.response_size,
        }
        if not ex.head_early:
            final.update(ex.head_fields())
        rec = self.recorder
        entry = ex.entry
        assert entry is not None
        for finding in cut_findings(ex.meta):  # a body cut for the recording (a bomb)
            self.add_finding(ex, **finding)
        if ex.local_id is None:
            if rec is not None:
                self.oauth.before_register(self, ex)
                ex.local_id = rec.record_exchange(
                    entry.session_id, frames=ex.pending, **ex.fields(), **final, meta=ex.meta
                )
            ex.pending = []
        elif rec is not None:
            rec.update_exchange(ex.local_id, **final, meta=ex.meta)
        if ex.streaming:
            entry.streams = max(0, entry.streams - 1)
            ex.streaming = False
        ex.router.done(entry)
        self.stats_exchanges += 1
        method = ex.method
        if entry.rule == RULE_LEGACY_SSE and method == "GET":
            ex.router.end(entry.key, reason="legacy SSE stream closed")
        elif (
            method == "DELETE"
            and entry.rule == RULE_MCP_SESSION
            and outcome == "complete"
            and 200 <= int(ex.status or 0) < 300
        ):
            ex.router.end(entry.key, reason="DELETE")

    def add_finding(
        self, ex: TapeExchange, code: str, severity: str, title: str, detail: str
    ) -> None:
        if self.recorder is None or ex.entry is None:
            return
        self.recorder.add_finding(
            ex.entry.session_id, code=code, severity=severity, title=title, detail=detail
        )
