"""Protocol checks that need the two-sided view: only a proxy sees both what was offered and
what was used.

A client-side inspector knows what the server answered; mcptape also knows what the client
declared, which request a log belonged to, which cursor came back, which headers went out with
which body. Each check below turns one rule of the specification into findings, era-aware:
initialize-era rules (handshake, session headers) stay quiet in 2026-07-28 sessions and the
2026-07-28 rules (envelope, resultType, routing headers, log opt-in) stay quiet before it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_proxy.analysis.exchanges import Paired
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


def protocol_checks(
    msgs: list[Msg],
    pairing: Paired,
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
) -> None:
    """Run every protocol check over the session."""
    _lifecycle(msgs, facts, sink)
    _modern_shape(pairing, facts, sink)
    _capabilities(msgs, pairing, facts, sink)
    _lists(pairing, facts, sink)
    if http and not facts.legacy_sse:
        _http_headers(msgs, pairing, facts, http, sink)


# ------------------------------------------------------------------------------ lifecycle
def _lifecycle(msgs: list[Msg], facts: SessionFacts, sink: FindingSink) -> None:
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
    # Seq order across directions is only as good as the relay's timestamps (taken after
    # forwarding, one thread per direction): within REORDER_WINDOW_NS of the other side's
    # message, "before" is not proven. Same-direction order is exact: a client request after
    # its own notifications/initialized certainly came after the initialize response.
    mono = {m.seq: m.mono_ns for m in msgs if m.seq in (init_done, facts.initialized_seq)}
    done_ns = mono.get(init_done) if init_done is not None else None
    initialized_ns = mono.get(facts.initialized_seq) if facts.initialized_seq else None
    early: list[Msg] = []
    server_early: list[Msg] = []
    later_client = False
    for m in msgs:
        if m.kind != "request":
            if (
                init_done is not None
                and m.direction == "c2s"
                and m.seq > init_done
                and m.kind in ("notification", "response")
                and m.method != "notifications/initialized"
            ):
                later_client = True
            continue
        if m.direction == "c2s":
            if m.method in ("initialize", "ping"):
                continue
            if init_done is not None and m.seq > init_done:
                later_client = True
                continue
            if facts.initialized_seq is not None and m.seq > facts.initialized_seq:
                later_client = True
                continue
            if done_ns is not None and done_ns - m.mono_ns <= REORDER_WINDOW_NS:
                continue  # stamped just before the answer it may well have seen
            if META + "protocolVersion" in m.meta:
                continue  # a 2026-07-28 probe (server/discover) before falling back
            early.append(m)
        elif (
            initialized_ns is not None
            and m.method != "ping"
            and initialized_ns - m.mono_ns > REORDER_WINDOW_NS
        ):
            server_early.append(m)
    if early and (facts.initialize_seq is not None or facts.era in (None, ERA_INITIALIZE)):
        methods = sorted({m.method or "?" for m in early})
        where = (
            "before the server answered initialize"
            if facts.initialize_seq is not None
            else "in a session that never initialized"
        )
        sink.add(
            "lifecycle.request_before_initialize",
            f"{len(early)} request(s) {where}: {', '.join(methods)}",
            "Only pings may precede the initialize response.",
            [m.seq for m in early] + ([facts.initialize_seq] if facts.initialize_seq else []),
        )
    if server_early:
        sink.add(
            "lifecycle.server_request_before_initialized",
            f"server sent {', '.join(sorted({m.method or '?' for m in server_early}))} before"
            " notifications/initialized",
            f"notifications/initialized arrived in frame #{facts.initialized_seq}.",
            [m.seq for m in server_early],
        )
    if init_done is not None and facts.initialized_seq is None and (later_client or not facts.live):
        sink.add(
            "lifecycle.initialized_missing",
            "the client never sent notifications/initialized",
            f"initialize succeeded in frame #{init_done}; the notification must follow.",
            [s for s in (facts.initialize_seq, init_done) if s],
        )


# ------------------------------------------------------------------------------ 2026-07-28 shape
def _modern_shape(pairing: Paired, facts: SessionFacts, sink: FindingSink) -> None:
    if not facts.modern:
        return
    missing: list[Exchange] = []
    no_type: list[Exchange] = []
    for ex in pairing.exchanges:
        if ex.direction != "c2s" or ex.request is None:
            continue
        if not ex.enveloped:
            missing.append(ex)
        if ex.untyped_result:
            no_type.append(ex)
    if missing:
        sink.add(
            "envelope.missing",
            f"{len(missing)} request(s) without the io.modelcontextprotocol/ envelope: "
            + ", ".join(sorted({e.method for e in missing})),
            "Each request must carry protocolVersion and clientCapabilities in params._meta.",
            [e.request_seq for e in missing],
        )
    if no_type:
        sink.add(
            "result.missing_result_type",
            f"{len(no_type)} result(s) without resultType: "
            + ", ".join(sorted({e.method for e in no_type})),
            "2026-07-28 servers must state resultType in every result.",
            [e.response_seq or e.request_seq for e in no_type],
        )


# ------------------------------------------------------------------------------ capabilities
def _input_requests_lacking(ex: Exchange, client_missing: dict[tuple[str, str], list[int]]) -> None:
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
            client_missing.setdefault((f"{ir_method} (inputRequests.{key})", lack), []).extend(
                [ex.request_seq, resp.seq]
            )


def _capabilities(msgs: list[Msg], pairing: Paired, facts: SessionFacts, sink: FindingSink) -> None:
    server_caps = facts.server_caps
    unadvertised: dict[str, list[Exchange]] = {}
    client_missing: dict[tuple[str, str], list[int]] = {}
    for ex in pairing.exchanges:
        if ex.direction == "c2s":
            need = SERVER_FEATURES.get(ex.method)
            if need is not None and server_caps is not None and not _has(server_caps, need):
                unadvertised.setdefault(ex.method, []).append(ex)
            if facts.modern and ex.result_type == "input_required":
                _input_requests_lacking(ex, client_missing)
        elif ex.request is not None and facts.era == ERA_INITIALIZE:
            lack = client_feature_missing(ex.method, ex.request.params, facts.client_caps)
            if lack:
                client_missing.setdefault((ex.method, lack), []).append(ex.request_seq)
    for method, exs in unadvertised.items():
        need_text = ".".join(SERVER_FEATURES[method])
        sink.add(
            "capability.server_not_advertised",
            f"client called {method} ({len(exs)}×) but the server did not declare {need_text}",
            f"Server capabilities from frame #{facts.server_caps_seq}: "
            + (", ".join(sorted(server_caps or {})) or "none"),
            [e.request_seq for e in exs]
            + ([facts.server_caps_seq] if facts.server_caps_seq else []),
        )
    for (method, lack), seqs in client_missing.items():
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
            seqs
            + (
                [facts.initialize_seq]
                if facts.era == ERA_INITIALIZE and facts.initialize_seq
                else []
            ),
        )
    # Notifications announced by capabilities.
    notif: dict[str, list[int]] = {}
    logs: list[int] = []
    for m in msgs:
        if m.kind != "notification":
            continue
        if m.direction == "s2c":
            if m.method == "notifications/message":
                logs.append(m.seq)
                continue
            need = SERVER_NOTIFICATIONS.get(m.method or "")
            if need is None or server_caps is None:
                continue
            if need[1] == "subscribe" and facts.modern:
                continue  # 2026-07-28 resource updates ride subscriptions/listen
            if not _has(server_caps, need):
                notif.setdefault(f"{m.method}|server|{'.'.join(need)}", []).append(m.seq)
        elif (
            m.method == "notifications/roots/list_changed"
            and facts.era == ERA_INITIALIZE
            and not _has(facts.client_caps, ("roots", "listChanged"))
        ):
            notif.setdefault(f"{m.method}|client|roots.listChanged", []).append(m.seq)
    for key, seqs in notif.items():
        method, who, need_text = key.split("|")
        sink.add(
            "capability.notification_not_advertised",
            f"{who} sent {method} ({len(seqs)}×) without declaring {need_text}",
            "A side may send this notification only after declaring the capability.",
            seqs,
        )
    if logs and server_caps is not None and "logging" not in server_caps:
        sink.add(
            "capability.logging_not_advertised",
            f"{len(logs)} log message(s) from a server that did not declare logging",
            "The official SDK servers do this; reported for completeness.",
            logs,
        )


# ------------------------------------------------------------------------------ lists & cursors
def _lists(pairing: Paired, facts: SessionFacts, sink: FindingSink) -> None:
    walk_of: dict[tuple[str, str], int] = {}
    seen: dict[int, dict[str, int]] = {}
    returned: dict[str, set[str]] = {}
    empty_pending: dict[str, int] = {}
    reported_dup: set[tuple[str, str]] = set()
    reported_schema: set[tuple[str, str]] = set()
    next_walk = 0
    for ex in pairing.exchanges:
        if ex.direction != "c2s" or ex.method not in LISTS or ex.request is None:
            continue
        method = ex.method
        cursor = ex.request.params.get("cursor")
        if isinstance(cursor, str):
            if cursor == "" and method in empty_pending:
                del empty_pending[method]
            if cursor not in returned.get(method, set()):
                sink.add(
                    "pagination.unknown_cursor",
                    f"{method} with a cursor the server never returned",
                    f"Cursor {cursor[:80]!r} is not among the nextCursor values of earlier"
                    f" {method} results.",
                    [ex.request_seq],
                    exchange=ex.index,
                )
            walk = walk_of.get((method, cursor))
        else:
            walk = None
        if walk is None:
            walk = next_walk
            next_walk += 1
        resp = ex.response
        result = resp.result if resp is not None and resp.kind == "response" else None
        if not result:
            continue
        nxt = result.get("nextCursor")
        if isinstance(nxt, str):
            returned.setdefault(method, set()).add(nxt)
            walk_of[(method, nxt)] = walk
            if nxt == "":
                empty_pending[method] = resp.seq if resp else ex.request_seq
        key, field = LISTS[method]
        items = result.get(key)
        if not isinstance(items, list):
            continue
        ids = seen.setdefault(walk, {})
        for item in items:
            if not isinstance(item, dict):
                continue
            ident = item.get(field)
            if not isinstance(ident, str):
                continue
            if ident in ids and (method, ident) not in reported_dup:
                reported_dup.add((method, ident))
                sink.add(
                    "list.duplicate",
                    f"{method} lists {field} {ident!r} twice",
                    "Seen in frame #" + str(ids[ident]) + " and again in frame #" + str(resp.seq)
                    if resp
                    else "",
                    [ids[ident], resp.seq] if resp else [ids[ident]],
                    exchange=ex.index,
                )
            ids.setdefault(ident, resp.seq if resp else ex.request_seq)
            if method == "tools/list":
                why = invalid_x_mcp_header(item.get("inputSchema"))
                if why and (ident, why) not in reported_schema:
                    reported_schema.add((ident, why))
                    sink.add(
                        "tools.invalid_x_mcp_header",
                        f"tool {ident!r}: invalid x-mcp-header",
                        why + ". Clients must reject this tool definition.",
                        [resp.seq] if resp else [ex.request_seq],
                        exchange=ex.index,
                    )
    if not facts.live:
        for method, seq in empty_pending.items():
            sink.add(
                "pagination.empty_cursor_dropped",
                f'{method} returned nextCursor "" and the client never asked for that page',
                'A present nextCursor (even "") means more results may exist.',
                [seq],
            )


# ------------------------------------------------------------------------------ HTTP headers
def _http_headers(
    msgs: list[Msg],
    pairing: Paired,
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
) -> None:
    bodies: dict[int, Msg] = {}
    for m in msgs:
        if (
            m.direction == "c2s"
            and m.http is not None
            and m.kind in ("request", "notification", "response", "error")
        ):
            bodies.setdefault(m.http, m)
    schemas: dict[str, tuple[int, Any]] = {}
    for ex in pairing.exchanges:
        if ex.method == "tools/list" and ex.response is not None and ex.response.result:
            for tool in ex.response.result.get("tools") or ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    schemas[tool["name"]] = (ex.response.seq, tool.get("inputSchema"))
    init_started: float | None = None
    init_http: int | None = None
    if facts.initialize_seq is not None:
        for m in msgs:
            if m.seq == facts.initialize_seq and m.http is not None:
                init_http = m.http
                row = http.get(m.http)
                init_started = (row or {}).get("started_at")
                break
    needs_version = facts.era == ERA_INITIALIZE and version_at_least(facts.version, "2025-06-18")
    missing_sid: list[int] = []
    missing_pv: list[int] = []
    for row in sorted(http.values(), key=lambda r: (r.get("started_at") or 0, r.get("id") or 0)):
        hid = int(row.get("id") or 0)
        hdrs = row.get("request_headers")
        body = bodies.get(hid)
        seqs = [body.seq] if body is not None else []
        what = (
            f"{row.get('method')} {body.method if body is not None and body.method else ''}".strip()
        )
        if body is not None and body.kind == "request" and META + "protocolVersion" in body.meta:
            problems: list[str] = []
            version = body.meta.get(META + "protocolVersion")
            pv = header(hdrs, "mcp-protocol-version")
            if pv != version:
                sink.add(
                    "http.protocol_version_header_mismatch",
                    f"{what}: MCP-Protocol-Version {pv!r} but the body says {version!r}",
                    "2026-07-28: the header must equal params._meta"
                    " io.modelcontextprotocol/protocolVersion.",
                    seqs,
                )
            schema = None
            if body.method == "tools/call":
                name = body.params.get("name")
                if isinstance(name, str) and name in schemas and schemas[name][0] < body.seq:
                    schema = schemas[name][1]
            problems = routing_problems(hdrs, body.body, input_schema=schema)
            body.release()
            if problems:
                sink.add(
                    "http.routing_header_mismatch",
                    f"{what}: " + "; ".join(problems[:3]) + (" …" if len(problems) > 3 else ""),
                    "\n".join(problems),
                    seqs,
                )
            continue
        if facts.era != ERA_INITIALIZE or init_started is None or hid == init_http:
            continue
        if (row.get("started_at") or 0) < init_started:
            continue
        if facts.session_id_header and not header(hdrs, "mcp-session-id"):
            missing_sid.append(hid)
        if needs_version:
            pv = header(hdrs, "mcp-protocol-version")
            if pv is None:
                missing_pv.append(hid)
            elif pv != facts.version:
                sink.add(
                    "http.protocol_version_header_mismatch",
                    f"{what}: MCP-Protocol-Version {pv!r} but {facts.version!r} was negotiated",
                    f"initialize negotiated {facts.version} in frame"
                    f" #{facts.initialize_result_seq}.",
                    seqs,
                )
    seq_of = {m.http: m.seq for m in bodies.values()}
    if missing_sid:
        sink.add(
            "http.session_id_missing",
            f"{len(missing_sid)} HTTP request(s) after initialize without Mcp-Session-Id",
            f"The server assigned session id {facts.session_id_header!r} in its initialize"
            " response.",
            [seq_of[h] for h in missing_sid if h in seq_of] + [facts.initialize_result_seq or 0],
        )
    if missing_pv:
        sink.add(
            "http.protocol_version_header_missing",
            f"{len(missing_pv)} HTTP request(s) after initialize without MCP-Protocol-Version",
            f"{facts.version} was negotiated; from 2025-06-18 on every request must name it.",
            [seq_of[h] for h in missing_pv if h in seq_of] + [facts.initialize_result_seq or 0],
        )
