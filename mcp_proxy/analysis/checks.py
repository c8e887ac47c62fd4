"""Protocol checks that need the two-sided view: only a proxy sees both what was offered and
what was used.

A client-side inspector knows what the server answered; mcptape also knows what the client
declared, which request a log belonged to, which cursor came back, which headers went out with
which body. Each check below turns one rule of the specification into findings, era-aware:
initialize-era rules (handshake, session headers) stay quiet in 2026-07-28 sessions and the
2026-07-28 rules (envelope, resultType, routing headers, log opt-in) stay quiet before it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, NamedTuple

from mcp_proxy.analysis.consumer import Consumer, Seqs
from mcp_proxy.analysis.facts import header
from mcp_proxy.analysis.model import (
    ERA_INITIALIZE,
    KNOWN_VERSIONS,
    META,
    Exchange,
    FindingSink,
    Msg,
    SessionFacts,
)
from mcp_proxy.analysis.reorder import REORDER_WINDOW_NS
from mcp_proxy.analysis.routing import invalid_x_mcp_header, routing_problems
from mcp_proxy.analysis.skills import Skills
from mcp_proxy.bounded import remember
from mcp_proxy.limits import LIMIT_METHODS_NAMED, LIST_CURSORS_KEPT, LIST_IDS_KEPT, LIST_WALKS_KEPT
from mcp_proxy.protocol import version_at_least

#: Client method → the server capability path that must be declared for it.
SERVER_FEATURES: dict[str, tuple[str, ...]] = {
    "tools/list": ("tools",),
    "tools/call": ("tools",),
    "resources/list": ("resources",),
    "resources/read": ("resources",),
    "resources/templates/list": ("resources",),
    "resources/subscribe": ("resources", "subscribe"),
    "resources/unsubscribe": ("resources", "subscribe"),
    "prompts/list": ("prompts",),
    "prompts/get": ("prompts",),
    "completion/complete": ("completions",),
    "logging/setLevel": ("logging",),
}
#: Server notification → the server capability that announces it.
SERVER_NOTIFICATIONS: dict[str, tuple[str, ...]] = {
    "notifications/tools/list_changed": ("tools", "listChanged"),
    "notifications/prompts/list_changed": ("prompts", "listChanged"),
    "notifications/resources/list_changed": ("resources", "listChanged"),
    "notifications/resources/updated": ("resources", "subscribe"),
}
#: List method → (result key, identity field) for duplicate detection.
LISTS: dict[str, tuple[str, str]] = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}


def _has(caps: Mapping[str, Any] | None, path: tuple[str, ...]) -> bool:
    node: Any = caps
    for i, key in enumerate(path):
        if not isinstance(node, Mapping) or key not in node:
            return False
        node = node[key]
        if i < len(path) - 1 and node is None:
            return False
    if len(path) > 1:
        return node is True or (isinstance(node, Mapping))
    return node is not None


def client_feature_missing(method: str, params: Mapping[str, Any], caps: Any) -> str | None:
    """The client capability a server→client request needs and ``caps`` lacks, or None."""
    caps = caps if isinstance(caps, Mapping) else {}
    if method == "sampling/createMessage":
        if "sampling" not in caps:
            return "sampling"
        if params.get("tools") is not None or params.get("toolChoice") is not None:
            sampling = caps.get("sampling")
            if not (isinstance(sampling, Mapping) and "tools" in sampling):
                return "sampling.tools"
        return None
    if method == "elicitation/create":
        el = caps.get("elicitation")
        if el is None or "elicitation" not in caps:
            return "elicitation"
        mode = params.get("mode") or "form"
        if isinstance(el, Mapping) and el:
            if mode not in el:
                return f"elicitation.{mode}"
        elif mode == "url":
            return "elicitation.url"  # an empty object declares form mode only
        return None
    if method == "roots/list":
        return None if "roots" in caps else "roots"
    return None


def protocol_consumers(
    facts: SessionFacts, http: Mapping[int, Mapping[str, Any]], sink: FindingSink
) -> list[Consumer]:
    """The protocol checks, each family a :class:`~mcp_proxy.analysis.consumer.Consumer`."""
    return [
        Lifecycle(facts, sink),
        ModernShape(facts, sink),
        Capabilities(facts, sink),
        Lists(facts, sink),
        HttpHeaders(facts, http, sink),
        Skills(sink),
    ]


#: Distinct method names a finding names in its title (a peer may invent any number of them).
_METHODS_NAMED = LIMIT_METHODS_NAMED


# ------------------------------------------------------------------------------ lifecycle
class Lifecycle:
    """Handshake order: requests before initialize, server requests before initialized, a
    missing notifications/initialized (initialize era), an unknown protocol version."""

    def __init__(self, facts: SessionFacts, sink: FindingSink) -> None:
        self.facts = facts
        self.sink = sink
        self.early = Seqs()
        self.early_methods: set[str] = set()
        self.server_early = Seqs()
        self.server_methods: set[str] = set()
        self.later_client = False

    def exchange(self, ex: Exchange) -> None:
        pass

    def reads_exchanges(self) -> bool:
        return False

    def reads_messages(self) -> bool:
        return not self.facts.modern  # (the handshake-order rules are the initialize era's)

    def message(self, m: Msg) -> None:
        facts = self.facts
        if facts.modern:
            return
        init_done = facts.initialize_result_seq
        if m.kind != "request":
            if (
                init_done is not None
                and m.direction == "c2s"
                and m.seq > init_done
                and m.kind in ("notification", "response")
                and m.method != "notifications/initialized"
            ):
                self.later_client = True
            return
        # Seq order across directions is only as good as the relay's timestamps (taken after
        # forwarding, one thread per direction): within REORDER_WINDOW_NS of the other side's
        # message, "before" is not proven. Same-direction order is exact: a client request
        # after its own notifications/initialized certainly came after the initialize response.
        if m.direction == "c2s":
            if m.method in ("initialize", "ping"):
                return
            if (init_done is not None and m.seq > init_done) or (
                facts.initialized_seq is not None and m.seq > facts.initialized_seq
            ):
                self.later_client = True
                return
            done_ns = facts.initialize_result_mono if init_done is not None else None
            if done_ns is not None and done_ns - m.mono_ns <= REORDER_WINDOW_NS:
                return  # stamped just before the answer it may well have seen
            if META + "protocolVersion" in m.meta:
                return  # a 2026-07-28 probe (server/discover) before falling back
            self.early.add(m.seq)
            _note(self.early_methods, m.method)
        elif (
            facts.initialized_seq is not None
            and facts.initialized_mono is not None
            and m.method != "ping"
            and facts.initialized_mono - m.mono_ns > REORDER_WINDOW_NS
        ):
            self.server_early.add(m.seq)
            _note(self.server_methods, m.method)

    def finish(self) -> None:
        facts, sink = self.facts, self.sink
        if facts.version is not None and facts.version not in KNOWN_VERSIONS:
            sink.add(
                "lifecycle.unknown_protocol_version",
                f"protocol version {facts.version!r} is not a published revision",
                "Published revisions: " + ", ".join(KNOWN_VERSIONS) + ".",
                [s for s in (facts.initialize_result_seq, facts.first_envelope_seq) if s],
            )
        if facts.modern:
            return
        init_done = facts.initialize_result_seq
        early = self.early
        if early and (facts.initialize_seq is not None or facts.era in (None, ERA_INITIALIZE)):
            where = (
                "before the server answered initialize"
                if facts.initialize_seq is not None
                else "in a session that never initialized"
            )
            sink.add(
                "lifecycle.request_before_initialize",
                f"{early.n} request(s) {where}: {', '.join(sorted(self.early_methods))}",
                "Only pings may precede the initialize response.",
                early.seqs + ([facts.initialize_seq] if facts.initialize_seq else []),
            )
        if self.server_early:
            sink.add(
                "lifecycle.server_request_before_initialized",
                f"server sent {', '.join(sorted(self.server_methods))} before"
                " notifications/initialized",
                f"notifications/initialized arrived in frame #{facts.initialized_seq}.",
                self.server_early.seqs,
            )
        if (
            init_done is not None
            and facts.initialized_seq is None
            and (self.later_client or not facts.live)
        ):
            sink.add(
                "lifecycle.initialized_missing",
                "the client never sent notifications/initialized",
                f"initialize succeeded in frame #{init_done}; the notification must follow.",
                [s for s in (facts.initialize_seq, init_done) if s],
            )


def _note(names: set[str], method: str | None) -> None:
    """Remember a method a finding will name, up to :data:`_METHODS_NAMED` of them."""
    if len(names) < _METHODS_NAMED:
        names.add(method or "?")


# ------------------------------------------------------------------------------ 2026-07-28 shape
class ModernShape:
    """2026-07-28 requests without the envelope, results without resultType."""

    def __init__(self, facts: SessionFacts, sink: FindingSink) -> None:
        self.facts = facts
        self.sink = sink
        self.missing = Seqs()
        self.missing_methods: set[str] = set()
        self.no_type = Seqs()
        self.no_type_methods: set[str] = set()

    def reads_messages(self) -> bool:
        return False

    def reads_exchanges(self) -> bool:
        return self.facts.modern

    def message(self, m: Msg) -> None:
        pass

    def exchange(self, ex: Exchange) -> None:
        if not self.facts.modern or ex.direction != "c2s" or ex.request is None:
            return
        if not ex.enveloped:
            self.missing.add(ex.request_seq)
            _note(self.missing_methods, ex.method)
        if ex.untyped_result:
            self.no_type.add(ex.response_seq or ex.request_seq)
            _note(self.no_type_methods, ex.method)

    def finish(self) -> None:
        if self.missing:
            self.sink.add(
                "envelope.missing",
                f"{self.missing.n} request(s) without the io.modelcontextprotocol/ envelope: "
                + ", ".join(sorted(self.missing_methods)),
                "Each request must carry protocolVersion and clientCapabilities in params._meta.",
                self.missing.seqs,
            )
        if self.no_type:
            self.sink.add(
                "result.missing_result_type",
                f"{self.no_type.n} result(s) without resultType: "
                + ", ".join(sorted(self.no_type_methods)),
                "2026-07-28 servers must state resultType in every result.",
                self.no_type.seqs,
            )


# ------------------------------------------------------------------------------ capabilities
def _input_requests_lacking(ex: Exchange, client_missing: dict[tuple[str, str], Seqs]) -> None:
    """MRTR input requests are server→client requests in disguise: each needs the client
    capability its standalone request would, declared in the retried request's envelope."""
    resp = ex.response
    reqs = resp.result.get("inputRequests") if resp is not None and resp.result else None
    if resp is None or not isinstance(reqs, dict):
        return
    caps = ex.request.meta.get(META + "clientCapabilities") if ex.request else None
    for key, ir in reqs.items():
        if not isinstance(ir, dict):
            continue
        ir_method = str(ir.get("method") or "")
        ir_params = ir.get("params")
        lack = client_feature_missing(
            ir_method, ir_params if isinstance(ir_params, dict) else {}, caps
        )
        if lack:
            seqs = _keyed(client_missing, (f"{ir_method} (inputRequests.{key})", lack))
            if seqs is not None:
                seqs.add(ex.request_seq)
                seqs.add(resp.seq)


def _keyed[K](table: dict[K, Seqs], key: K) -> Seqs | None:
    """``table[key]``, made if there is room: at most :data:`_METHODS_NAMED` keys (the keys
    name what a peer sent)."""
    seqs = table.get(key)
    if seqs is None and len(table) < _METHODS_NAMED:
        seqs = table[key] = Seqs()
    return seqs


class Capabilities:
    """Methods and notifications used without the capability that announces them."""

    def __init__(self, facts: SessionFacts, sink: FindingSink) -> None:
        self.facts = facts
        self.sink = sink
        self.unadvertised: dict[str, Seqs] = {}
        self.client_missing: dict[tuple[str, str], Seqs] = {}
        self.notif: dict[str, Seqs] = {}
        self.logs = Seqs()
        #: per method of :data:`SERVER_FEATURES`: whether the server declared what it needs
        #: (the session's capabilities are settled before the first exchange)
        self.declared: dict[str, bool] = {}

    def exchange(self, ex: Exchange) -> None:
        facts = self.facts
        if ex.direction == "c2s":
            method = ex.method
            ok = self.declared.get(method)
            if ok is None and method in SERVER_FEATURES:  # (at most one entry each)
                server_caps = facts.server_caps
                ok = self.declared[method] = server_caps is None or _has(
                    server_caps, SERVER_FEATURES[method]
                )
            if ok is False:
                self.unadvertised.setdefault(method, Seqs()).add(ex.request_seq)
            if facts.modern and ex.result_type == "input_required":
                _input_requests_lacking(ex, self.client_missing)
        elif ex.request is not None and facts.era == ERA_INITIALIZE:
            lack = client_feature_missing(ex.method, ex.request.params, facts.client_caps)
            if lack:
                seqs = _keyed(self.client_missing, (ex.method, lack))
                if seqs is not None:
                    seqs.add(ex.request_seq)

    def reads_messages(self) -> bool:
        return True

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Msg) -> None:
        if m.kind != "notification":
            return
        facts = self.facts
        if m.direction == "s2c":
            if m.method == "notifications/message":
                self.logs.add(m.seq)
                return
            need = SERVER_NOTIFICATIONS.get(m.method or "")
            if need is None or facts.server_caps is None:
                return
            if need[1] == "subscribe" and facts.modern:
                return  # 2026-07-28 resource updates ride subscriptions/listen
            if not _has(facts.server_caps, need):
                key = f"{m.method}|server|{'.'.join(need)}"
                self.notif.setdefault(key, Seqs()).add(m.seq)
        elif (
            m.method == "notifications/roots/list_changed"
            and facts.era == ERA_INITIALIZE
            and not _has(facts.client_caps, ("roots", "listChanged"))
        ):
            self.notif.setdefault(f"{m.method}|client|roots.listChanged", Seqs()).add(m.seq)

    def finish(self) -> None:
        facts, sink = self.facts, self.sink
        server_caps = facts.server_caps
        for method, exs in self.unadvertised.items():
            need_text = ".".join(SERVER_FEATURES[method])
            sink.add(
                "capability.server_not_advertised",
                f"client called {method} ({exs.n}×) but the server did not declare {need_text}",
                f"Server capabilities from frame #{facts.server_caps_seq}: "
                + (", ".join(sorted(server_caps or {})) or "none"),
                exs.seqs + ([facts.server_caps_seq] if facts.server_caps_seq else []),
            )
        for (method, lack), seqs in self.client_missing.items():
            sink.add(
                "capability.client_not_advertised",
                f"server sent {method} but the client did not declare {lack}",
                "The client's capabilities "
                + (
                    f"(initialize, frame #{facts.initialize_seq})"
                    if facts.era == ERA_INITIALIZE
                    else "(the request's io.modelcontextprotocol/clientCapabilities)"
                )
                + " do not include it.",
                seqs.seqs
                + (
                    [facts.initialize_seq]
                    if facts.era == ERA_INITIALIZE and facts.initialize_seq
                    else []
                ),
            )
        for key, seqs in self.notif.items():
            method, who, need_text = key.split("|")
            sink.add(
                "capability.notification_not_advertised",
                f"{who} sent {method} ({seqs.n}×) without declaring {need_text}",
                "A side may send this notification only after declaring the capability.",
                seqs.seqs,
            )
        if self.logs and server_caps is not None and "logging" not in server_caps:
            sink.add(
                "capability.logging_not_advertised",
                f"{self.logs.n} log message(s) from a server that did not declare logging",
                "The official SDK servers do this; reported for completeness.",
                self.logs.seqs,
            )


# ------------------------------------------------------------------------------ lists & cursors
class Lists:
    """Pagination and list contents: unknown cursors, a dropped empty cursor, duplicate items
    within one walk over the pages, tools whose x-mcp-header is invalid.

    A walk is the pages one first request leads to through nextCursor; its identifiers are kept
    while a cursor may still lead into it (:data:`LIST_WALKS_KEPT` walks, each at most
    :data:`LIST_IDS_KEPT` identifiers; the oldest are forgotten first)."""

    def __init__(self, facts: SessionFacts, sink: FindingSink) -> None:
        self.facts = facts
        self.sink = sink
        self.walk_of: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.seen: OrderedDict[int, dict[str, int]] = OrderedDict()
        self.returned: dict[str, OrderedDict[str, None]] = {}
        self.empty_pending: dict[str, int] = {}
        self.reported_dup: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.reported_schema: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.next_walk = 0

    def reads_messages(self) -> bool:
        return False

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Msg) -> None:
        pass

    def exchange(self, ex: Exchange) -> None:
        if ex.direction != "c2s" or ex.method not in LISTS or ex.request is None:
            return
        method = ex.method
        walk = self._walk(ex, method)
        resp = ex.response
        result = resp.result if resp is not None and resp.kind == "response" else None
        if not result or resp is None:
            return
        nxt = result.get("nextCursor")
        if isinstance(nxt, str):
            returned = self.returned.get(method)
            if returned is None:
                returned = self.returned[method] = OrderedDict()
            remember(returned, nxt, None, LIST_CURSORS_KEPT)
            remember(self.walk_of, (method, nxt), walk, LIST_CURSORS_KEPT)
            if nxt == "":
                self.empty_pending[method] = resp.seq
        key, field = LISTS[method]
        items = result.get(key)
        if not isinstance(items, list):
            return
        ids = self.seen.get(walk)
        if ids is None:
            ids = {}
            remember(self.seen, walk, ids, LIST_WALKS_KEPT)
        for item in items:
            if isinstance(item, dict):
                self._item(ex, resp, method, field, item, ids)

    def _walk(self, ex: Exchange, method: str) -> int:
        assert ex.request is not None
        cursor = ex.request.params.get("cursor")
        walk = None
        if isinstance(cursor, str):
            if cursor == "" and method in self.empty_pending:
                del self.empty_pending[method]
            if cursor not in self.returned.get(method, {}):
                self.sink.add(
                    "pagination.unknown_cursor",
                    f"{method} with a cursor the server never returned",
                    f"Cursor {cursor[:80]!r} is not among the nextCursor values of earlier"
                    f" {method} results.",
                    [ex.request_seq],
                    exchange=ex.index,
                )
            walk = self.walk_of.get((method, cursor))
        if walk is None:
            walk = self.next_walk
            self.next_walk += 1
        return walk

    def _item(
        self,
        ex: Exchange,
        resp: Msg,
        method: str,
        field: str,
        item: dict[str, Any],
        ids: dict[str, int],
    ) -> None:
        ident = item.get(field)
        if not isinstance(ident, str):
            return
        if ident in ids and (method, ident) not in self.reported_dup:
            remember(self.reported_dup, (method, ident), None, LIST_IDS_KEPT)
            self.sink.add(
                "list.duplicate",
                f"{method} lists {field} {ident!r} twice",
                "Seen in frame #" + str(ids[ident]) + " and again in frame #" + str(resp.seq),
                [ids[ident], resp.seq],
                exchange=ex.index,
            )
        if ident not in ids and len(ids) < LIST_IDS_KEPT:
            ids[ident] = resp.seq
        if method == "tools/list":
            why = invalid_x_mcp_header(item.get("inputSchema"))
            if why and (ident, why) not in self.reported_schema:
                remember(self.reported_schema, (ident, why), None, LIST_IDS_KEPT)
                self.sink.add(
                    "tools.invalid_x_mcp_header",
                    f"tool {ident!r}: invalid x-mcp-header",
                    why + ". Clients must reject this tool definition.",
                    [resp.seq],
                    exchange=ex.index,
                )

    def finish(self) -> None:
        if self.facts.live:
            return
        for method, seq in self.empty_pending.items():
            self.sink.add(
                "pagination.empty_cursor_dropped",
                f'{method} returned nextCursor "" and the client never asked for that page',
                'A present nextCursor (even "") means more results may exist.',
                [seq],
            )


# ------------------------------------------------------------------------------ HTTP headers
class _Body(NamedTuple):
    """The first host message of an HTTP exchange (what its header rules read)."""

    seq: int
    method: str | None
    #: a request carrying the 2026-07-28 envelope: checked when it came, not at the end
    enveloped: bool


class HttpHeaders:
    """The Streamable HTTP header rules: MCP-Protocol-Version and the routing headers against
    the body (2026-07-28, checked as each request comes), Mcp-Session-Id and
    MCP-Protocol-Version on every request after initialize (initialize era, at the end, in the
    order the HTTP exchanges started). Per HTTP exchange it keeps its first host message's seq
    and method (the http rows themselves are held by the caller)."""

    def __init__(
        self, facts: SessionFacts, http: Mapping[int, Mapping[str, Any]], sink: FindingSink
    ) -> None:
        self.facts = facts
        self.http = http
        self.sink = sink
        self.on = bool(http) and not facts.legacy_sse
        self.bodies: dict[int, _Body] = {}
        #: tool name → (frame of the tools/list result that defined it, its inputSchema)
        self.schemas: OrderedDict[str, tuple[int, Any]] = OrderedDict()

    def exchange(self, ex: Exchange) -> None:
        if not self.on or ex.method != "tools/list":
            return
        resp = ex.response
        if resp is None or not resp.result:
            return
        for tool in resp.result.get("tools") or ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                remember(
                    self.schemas, tool["name"], (resp.seq, tool.get("inputSchema")), LIST_IDS_KEPT
                )

    def reads_messages(self) -> bool:
        return self.on

    def reads_exchanges(self) -> bool:
        return self.on

    def message(self, m: Msg) -> None:
        hid = m.http
        if (
            not self.on
            or hid is None
            or m.direction != "c2s"
            or m.kind not in ("request", "notification", "response", "error")
            or hid in self.bodies
        ):
            return
        enveloped = m.kind == "request" and META + "protocolVersion" in m.meta
        self.bodies[hid] = _Body(m.seq, m.method, enveloped)
        if enveloped:
            self._envelope(m, self.http.get(hid) or {})

    def _envelope(self, body: Msg, row: Mapping[str, Any]) -> None:
        hdrs = row.get("request_headers")
        what = f"{row.get('method')} {body.method or ''}".strip()
        version = body.meta.get(META + "protocolVersion")
        pv = header(hdrs, "mcp-protocol-version")
        if pv != version:
            self.sink.add(
                "http.protocol_version_header_mismatch",
                f"{what}: MCP-Protocol-Version {pv!r} but the body says {version!r}",
                "2026-07-28: the header must equal params._meta"
                " io.modelcontextprotocol/protocolVersion.",
                [body.seq],
            )
        schema = None
        if body.method == "tools/call":
            name = body.params.get("name")
            if isinstance(name, str) and name in self.schemas and self.schemas[name][0] < body.seq:
                schema = self.schemas[name][1]
        problems = routing_problems(hdrs, body.body, input_schema=schema)
        if problems:
            self.sink.add(
                "http.routing_header_mismatch",
                f"{what}: " + "; ".join(problems[:3]) + (" …" if len(problems) > 3 else ""),
                "\n".join(problems),
                [body.seq],
            )

    def finish(self) -> None:
        facts = self.facts
        if not self.on or facts.era != ERA_INITIALIZE or facts.initialize_seq is None:
            return
        init = next(
            ((hid, b) for hid, b in self.bodies.items() if b.seq == facts.initialize_seq),
            None,
        )
        if init is None:
            return
        init_http = init[0]
        init_started = (self.http.get(init_http) or {}).get("started_at")
        if init_started is None:
            return
        needs_version = version_at_least(facts.version, "2025-06-18")
        missing_sid = Seqs()
        missing_pv = Seqs()
        rows = sorted(
            self.http.values(), key=lambda r: (r.get("started_at") or 0, r.get("id") or 0)
        )
        for row in rows:
            hid = int(row.get("id") or 0)
            body = self.bodies.get(hid)
            if body is not None and body.enveloped:
                continue
            if hid == init_http or (row.get("started_at") or 0) < init_started:
                continue
            hdrs = row.get("request_headers")
            if facts.session_id_header and not header(hdrs, "mcp-session-id"):
                if body is not None:
                    missing_sid.add(body.seq)
                else:
                    missing_sid.n += 1
            if needs_version:
                self._version(row, body, missing_pv)
        if missing_sid:
            self.sink.add(
                "http.session_id_missing",
                f"{missing_sid.n} HTTP request(s) after initialize without Mcp-Session-Id",
                f"The server assigned session id {facts.session_id_header!r} in its initialize"
                " response.",
                [*missing_sid.seqs, facts.initialize_result_seq or 0],
            )
        if missing_pv:
            self.sink.add(
                "http.protocol_version_header_missing",
                f"{missing_pv.n} HTTP request(s) after initialize without MCP-Protocol-Version",
                f"{facts.version} was negotiated; from 2025-06-18 on every request must name it.",
                [*missing_pv.seqs, facts.initialize_result_seq or 0],
            )

    def _version(self, row: Mapping[str, Any], body: _Body | None, missing: Seqs) -> None:
        facts = self.facts
        pv = header(row.get("request_headers"), "mcp-protocol-version")
        if pv is None:
            if body is not None:
                missing.add(body.seq)
            else:
                missing.n += 1
        elif pv != facts.version:
            what = f"{row.get('method')} {body.method if body is not None and body.method else ''}"
            self.sink.add(
                "http.protocol_version_header_mismatch",
                f"{what.strip()}: MCP-Protocol-Version {pv!r} but {facts.version!r} was negotiated",
                f"initialize negotiated {facts.version} in frame #{facts.initialize_result_seq}.",
                [body.seq] if body is not None else [],
            )
