"""One trigger and one near miss per finding code, as minimal recorded-shape sessions.

Each entry of :data:`CASES` maps a code to two builders: the first returns a session (a
:class:`~mcp_proxy.testing.factories.Wire`) that must produce the code, the second a session
that differs as little as possible and must not. ``test_findings.py`` runs them; a test there
fails when a catalogue code has no entry here.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from mcp_proxy.testing.factories import MODERN, SERVER_CAPS, Wire, envelope

Builder = Callable[[], Wire]
CASES: dict[str, tuple[Builder, Builder]] = {}


def case(code: str) -> Callable[[Callable[[bool], Wire]], Callable[[bool], Wire]]:
    """Register ``fn(trigger: bool) -> Wire`` as the trigger and near miss of ``code``."""

    def deco(fn: Callable[[bool], Wire]) -> Callable[[bool], Wire]:
        CASES[code] = (lambda: fn(True), lambda: fn(False))
        return fn

    return deco


# ------------------------------------------------------------------------------ helpers
def err(
    code: int,
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    message: str = "failed",
    data: Any = None,
    *,
    modern: bool = False,
) -> Wire:
    """A session with one request of ``method`` answered by a JSON-RPC error."""
    w = Wire.modern() if modern else Wire.initialized()
    p = dict(params if params is not None else {"name": "echo", "arguments": {}})
    if modern:
        p["_meta"] = envelope()
    w.request(method, 2, p)
    w.error(2, code, message, data)
    return w.end()


def hdrs(
    session: str | None = "s1", version: str | None = "2025-11-25", **extra: str
) -> list[list[str]]:
    """Request headers of an initialize-era Streamable HTTP client."""
    h = [["content-type", "application/json"], ["accept", "application/json, text/event-stream"]]
    if session:
        h.append(["mcp-session-id", session])
    if version:
        h.append(["mcp-protocol-version", version])
    h += [[k.replace("_", "-"), v] for k, v in extra.items()]
    return h


def http_init(version: str = "2025-11-25") -> Wire:
    """An initialize-era Streamable HTTP session after its handshake (session id ``s1``)."""
    w = Wire(transport="http")
    h0 = w.exchange(
        request_headers=hdrs(None, None),
        response_headers=[["content-type", "application/json"], ["mcp-session-id", "s1"]],
    )
    h1 = w.exchange(request_headers=hdrs(version=version), status=202, response_headers=[])
    w.handshake(version, http=(h0, h1))
    return w


def http_call(
    w: Wire,
    id: int,
    *,
    status: int | None = 200,
    headers: list[list[str]] | None = None,
    response: str = "result",
    response_headers: list[list[str]] | None = None,
    outcome: str | None = "complete",
    method: str = "POST",
    tool: str = "echo",
) -> int:
    """One POSTed tools/call over HTTP and its answer (``result``, ``none``, ``text:…``)."""
    hid = w.exchange(
        method,
        status=status,
        request_headers=headers if headers is not None else hdrs(),
        response_headers=response_headers,
        outcome=outcome,
    )
    if method == "POST":
        w.request("tools/call", id, {"name": tool, "arguments": {}}, http=hid)
    if response == "result":
        w.result(id, {"content": [], "isError": False}, http=hid)
    elif response.startswith("text:"):
        w.noise(response[5:], channel="http", http=hid)
    elif response.startswith("error:"):
        w.error(None, int(response[6:]), "transport error", http=hid)
    return hid


def modern_http(
    w: Wire | None = None,
    *,
    id: int = 1,
    method: str = "tools/call",
    params: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    status: int = 200,
    answer: dict[str, Any] | None = None,
    error: tuple[int, str] | None = None,
    log_level: str | None = None,
) -> Wire:
    """A 2026-07-28 POST with correct routing headers unless ``headers`` overrides them."""
    w = w or Wire(transport="http")
    p = dict(params if params is not None else {"name": "echo", "arguments": {}})
    p["_meta"] = envelope(log_level=log_level)
    h = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if method in ("tools/call", "prompts/get"):
        h["mcp-name"] = p.get("name", "")
    elif method == "resources/read":
        h["mcp-name"] = p.get("uri", "")
    h.update(headers or {})
    hid = w.exchange(request_headers=[[k, v] for k, v in h.items() if v is not None], status=status)
    w.request(method, id, p, http=hid)
    if error is not None:
        w.error(id, error[0], error[1], http=hid)
    else:
        res = dict(answer or {"content": [], "isError": False})
        res.setdefault("resultType", "complete")
        w.result(id, res, http=hid)
    return w


# ------------------------------------------------------------------------------ JSON-RPC codes
@case("jsonrpc.parse_error")
def _(t: bool) -> Wire:
    return err(-32700 if t else -32600)


@case("jsonrpc.invalid_request")
def _(t: bool) -> Wire:
    return err(-32600 if t else -32700)


@case("jsonrpc.method_not_found")
def _(t: bool) -> Wire:
    if t:
        return err(-32601, "completion/complete", {})
    # The server/discover probe answered -32601 is the era fallback, not a fault.
    w = Wire()
    w.request("server/discover", 1, {"_meta": envelope()})
    w.error(1, -32601, "Method not found")
    w.handshake(id=2)
    return w.end()


@case("jsonrpc.invalid_params")
def _(t: bool) -> Wire:
    return err(
        -32602,
        message="Input validation error: 'text' is a required property"
        if t
        else "Unknown tool: nope",
    )


@case("jsonrpc.unknown_tool")
def _(t: bool) -> Wire:
    return err(-32602, message="Tool nope not found" if t else "Invalid arguments for tool echo")


@case("jsonrpc.unknown_prompt")
def _(t: bool) -> Wire:
    msg = "Unknown prompt: nope" if t else "Missing required argument 'name'"
    return err(-32602, "prompts/get", {"name": "nope"}, msg)


@case("jsonrpc.resource_not_found")
def _(t: bool) -> Wire:
    if t:
        return err(
            -32602,
            "resources/read",
            {"uri": "test://x"},
            "Unknown resource: test://x",
            {"uri": "test://x"},
        )
    return err(-32602, "resources/read", {"uri": "::"}, "Invalid URI syntax")


@case("jsonrpc.internal_error")
def _(t: bool) -> Wire:
    return err(-32603 if t else -32000)


@case("jsonrpc.server_error")
def _(t: bool) -> Wire:
    return err(-32000 if t else -32603)


@case("jsonrpc.reserved_code")
def _(t: bool) -> Wire:
    return err(-32150 if t else -32010)


@case("jsonrpc.application_error")
def _(t: bool) -> Wire:
    return err(42 if t else -32603)


@case("mcp.header_mismatch")
def _(t: bool) -> Wire:
    # A code of the Streamable HTTP transport: over stdio it is the server's own error.
    code = -32020 if t else -32021
    return modern_http(status=400, error=(code, "Header mismatch")).end()


@case("mcp.missing_client_capability")
def _(t: bool) -> Wire:
    if t:
        return err(-32021, data={"requiredCapabilities": {"sampling": {}}}, modern=True)
    return err(-32020, modern=True)


@case("mcp.unsupported_protocol_version")
def _(t: bool) -> Wire:
    if t:
        return err(-32022, data={"supported": [MODERN], "requested": "2099-01-01"}, modern=True)
    return err(-32021, modern=True)


@case("mcp.url_elicitation_required")
def _(t: bool) -> Wire:
    # In 2026-07-28 the code is retired and reserved: a different finding.
    return err(-32042, data={"elicitations": []}, modern=not t)


@case("mcp.request_cancelled")
def _(t: bool) -> Wire:
    return err(-32800 if t else -32603)


@case("lifecycle.discover_fallback")
def _(t: bool) -> Wire:
    w = Wire()
    w.request("server/discover", 1, {"_meta": envelope()})
    if t:
        w.error(1, -32601, "Method not found")
        w.handshake(id=2)
    else:
        w.result(
            1,
            {
                "supportedVersions": [MODERN],
                "capabilities": {},
                "ttlMs": 0,
                "cacheScope": "private",
                "resultType": "complete",
            },
        )
    return w.end()


@case("tool.error_result")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.call(2, result={"content": [{"type": "text", "text": "disk full"}], "isError": t})
    return w.end()


# ------------------------------------------------------------------------------ HTTP statuses
@case("http.bad_request")
def _(t: bool) -> Wire:
    w = http_init()
    if t:
        http_call(w, 2, status=400, response="text:Bad Request: Unsupported Media Type")
    else:
        http_call(w, 2)
    return w.end()


@case("http.unauthorized")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    challenge = [
        [
            "www-authenticate",
            'Bearer resource_metadata="https://a/.well-known/oauth-protected-resource", scope="read"',
        ]
    ]
    w.exchange(
        status=401, request_headers=hdrs(None, None), response_headers=challenge, outcome="complete"
    )
    if not t:
        w.wait(100)
        w.exchange(status=200, request_headers=hdrs(None, None))
    return w.end()


@case("http.auth_challenge")
def _(t: bool) -> Wire:
    return CASES["http.unauthorized"][1]() if t else CASES["http.unauthorized"][0]()


def _status_case(code: str, status: int) -> None:
    @case(code)
    def _(t: bool) -> Wire:
        w = http_init()
        http_call(w, 2, status=status if t else 200, response="error:-32600" if t else "result")
        return w.end()


_status_case("http.forbidden", 403)
_status_case("http.not_acceptable", 406)
_status_case("http.conflict", 409)
_status_case("http.payload_too_large", 413)
_status_case("http.unsupported_media_type", 415)
_status_case("http.misdirected", 421)
_status_case("http.rate_limited", 429)
_status_case("http.server_error", 503)
_status_case("http.client_error", 418)


@case("http.foreign_host")
def _(t: bool) -> Wire:
    # The host named a Host that is not the relay's: mcptape answered 421 itself (nothing went
    # upstream) vs. the same 421 from the server (http.misdirected, the server's refusal).
    w = http_init()
    w.exchange(status=421, outcome="refused" if t else "complete")
    if t:
        w.http_exchanges[-1]["meta"] = {
            "refused_host": "evil.example",
            "synthesized": {"by": "mcptape", "status": 421, "kind": "host-not-allowed"},
        }
    return w.end()


@case("http.session_not_found")
def _(t: bool) -> Wire:
    w = http_init()
    http_call(
        w, 2, status=404, headers=hdrs() if t else hdrs(session=None), response="error:-32600"
    )
    return w.end()


@case("http.not_found")
def _(t: bool) -> Wire:
    return CASES["http.session_not_found"][1]() if t else CASES["http.session_not_found"][0]()


@case("http.method_not_allowed")
def _(t: bool) -> Wire:
    w = http_init()
    http_call(
        w,
        2,
        status=405,
        method="POST" if t else "GET",
        response="text:Method Not Allowed",
        response_headers=[["allow", "GET"]],
    )
    return w.end()


@case("http.optional_method_unsupported")
def _(t: bool) -> Wire:
    return CASES["http.method_not_allowed"][1]() if t else CASES["http.method_not_allowed"][0]()


@case("http.upstream_error")
def _(t: bool) -> Wire:
    w = http_init()
    http_call(w, 2, status=None, response="none", outcome="upstream_error" if t else "host_aborted")
    # The relay answering 502 for an unreachable upstream (the status alone would say 5xx).
    http_call(
        w,
        3,
        status=502,
        response="error:-32603",
        outcome="upstream_error" if t else "complete",
        response_headers=[["x-mcptape-error", "upstream-unreachable"]],
    )
    return w.end()


@case("http.status_mismatch")
def _(t: bool) -> Wire:
    return modern_http(status=200 if t else 400, error=(-32602, "Invalid arguments")).end()


@case("http.protocol_version_header_missing")
def _(t: bool) -> Wire:
    w = http_init()
    if not t:
        # The legacy HTTP+SSE transport has no MCP headers at all (the SDK sends none).
        g = w.exchange("GET", response_headers=[["content-type", "text/event-stream"]])
        w.frame("s2c", "/messages/?session_id=ab12", channel="sse", http=g, sse_event="endpoint")
    http_call(w, 2, headers=hdrs(version=None))
    return w.end()


@case("http.protocol_version_header_mismatch")
def _(t: bool) -> Wire:
    w = http_init()
    http_call(w, 2, headers=hdrs(version="2025-06-18" if t else "2025-11-25"))
    return w.end()


@case("http.session_id_missing")
def _(t: bool) -> Wire:
    w = http_init()
    http_call(w, 2, headers=hdrs(session=None) if t else hdrs())
    return w.end()


@case("http.routing_header_mismatch")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "q": {"type": "string"},
        },
    }
    modern_http(
        w,
        id=1,
        method="tools/list",
        params={},
        answer={"tools": [{"name": "lookup", "inputSchema": schema}]},
    )
    args = {"region": "zürich", "q": "x"}
    # The non-ASCII value travels base64-wrapped; the near miss sends it correctly.
    good = "=?base64?" + base64.b64encode("zürich".encode()).decode() + "?="
    modern_http(
        w,
        id=2,
        params={"name": "lookup", "arguments": args},
        headers={"mcp-param-region": "zurich" if t else good},
    )
    return w.end()


# ------------------------------------------------------------------------------ transport
@case("transport.server_noise")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    if t:
        w.noise("Starting server v1.2 ...")
    else:
        w.stderr("Starting server v1.2 ...")
        # Legacy HTTP+SSE: the `endpoint` event and the plain-text 202 are not JSON-RPC.
        g = w.exchange("GET", response_headers=[["content-type", "text/event-stream"]])
        w.frame("s2c", "/messages/?session_id=ab12", channel="sse", http=g, sse_event="endpoint")
        p = w.exchange(status=202, response_headers=[["content-type", "text/plain"]])
        w.notify("notifications/roots/list_changed", http=p)
        w.frame("s2c", "Accepted", channel="http", http=p)
    return w.end()


@case("transport.host_noise")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    if t:
        w.noise("hello?", direction="c2s")
    else:
        w.notify("notifications/roots/list_changed")
    return w.end()


@case("transport.invalid_utf8")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.noise(b"\xff\xfe not utf-8 \xc3\x28\n" if t else "caf\u00e9 is not JSON".encode())
    return w.end()


@case("jsonrpc.invalid_message")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.frame(
        "s2c",
        {
            "jsonrpc": "1.0" if t else "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": 1},
        },
    )
    return w.end()


@case("jsonrpc.batch_not_allowed")
def _(t: bool) -> Wire:
    w = Wire.initialized("2025-11-25" if t else "2025-03-26")
    w.frame(
        "c2s",
        [
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 3, "method": "prompts/list"},
        ],
    )
    w.frame(
        "s2c",
        [
            {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}},
            {"jsonrpc": "2.0", "id": 3, "result": {"prompts": []}},
        ],
    )
    return w.end()


@case("transport.incomplete_frame")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.frame(
        "s2c",
        b'{"jsonrpc":"2.0","method":"notifications/mess',
        channel="stdio" if t else "stderr",
        complete=False,
    )
    return w.end()


@case("transport.oversize")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    hid = w.exchange(response_headers=[["content-type", "text/event-stream"]])
    w.request("tools/call", 1, {"name": "huge", "arguments": {}, "_meta": envelope()}, http=hid)
    big = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "content": [{"type": "text", "text": "x" * (2 << 20)}],
            "resultType": "complete",
        },
    }
    w.frame("s2c", big, channel="sse" if t else "http", http=hid)
    return w.end()


@case("transport.server_crashed")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.stderr("Traceback (most recent call last):")
    w.stderr("RuntimeError: boom")
    return w.end("crashed" if t else "ended", exit_code=3 if t else 0)


@case("transport.exit_with_pending")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "crash", "arguments": {}})
    return w.end("crashed" if t else "ended", exit_code=3 if t else 0)


@case("transport.host_ended_with_pending")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}})
    # The host's SIGTERM, forwarded by the relay, vs. the host closing stdin after giving up.
    return w.end("ended", exit_code=None if t else 0, exit_signal=15 if t else None)


@case("transport.host_disconnected")
def _(t: bool) -> Wire:
    if t:
        w = http_init()
        http_call(
            w,
            2,
            response="none",
            outcome="host_aborted",
            response_headers=[["content-type", "text/event-stream"]],
        )
        return w.end()
    # 2026-07-28: closing the connection *is* the cancellation.
    w = Wire(transport="http")
    hid = w.exchange(
        outcome="host_aborted", response_headers=[["content-type", "text/event-stream"]]
    )
    w.request("tools/call", 1, {"name": "hang", "arguments": {}, "_meta": envelope()}, http=hid)
    return w.end()


@case("transport.sse_ended_early")
def _(t: bool) -> Wire:
    w = http_init()
    sse = [["content-type", "text/event-stream"]]
    http_call(w, 2, response="none", response_headers=sse)
    if not t:
        # The client resumed with GET + Last-Event-ID and the answer came there.
        g = w.exchange("GET", request_headers=hdrs(last_event_id="e1"), response_headers=sse)
        w.result(2, {"content": []}, http=g, channel="sse")
    return w.end()


# ------------------------------------------------------------------------------ exchanges
@case("exchange.no_response")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "hang", "arguments": {}})
    return w.end() if t else w  # a live session: still in flight


@case("exchange.unknown_response")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    if not t:
        w.request("tools/list", 99)
    w.result(99, {"tools": []})
    return w.end()


@case("exchange.duplicate_response")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/list", 2)
    w.result(2, {"tools": []})
    if t:
        w.result(2, {"tools": []})
    return w.end()


@case("exchange.id_reused_in_flight")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 5, {"name": "slow", "arguments": {}})
    # Ids live per direction: the server's own request 5 is no reuse.
    w.request(
        "tools/call" if t else "roots/list",
        5,
        {"name": "echo", "arguments": {}},
        direction="c2s" if t else "s2c",
    )
    if not t:
        w.result(5, {"roots": []}, direction="c2s")
    w.result(5, {"content": []})
    if t:
        w.result(5, {"content": []})
    return w.end()


@case("exchange.id_reused")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/list", 5)
    w.result(5, {"tools": []})
    # 5 and "5" are different ids.
    w.request("tools/list", 5 if t else "5")
    w.result(5 if t else "5", {"tools": []})
    return w.end()


@case("exchange.cancelled")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "hang", "arguments": {}})
    w.cancel(2)
    if not t:
        w.result(2, {"content": []})  # answered anyway (the cancel raced the response)
    return w.end()


@case("exchange.slow")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}})
    w.wait(11_000 if t else 9_000)
    w.result(2, {"content": []})
    return w.end()


@case("notification.cancel_unknown")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    if not t:
        w.request("tools/call", 77, {"name": "echo", "arguments": {}})
        w.result(77, {"content": []})
    w.cancel(77)
    return w.end()


@case("notification.cancel_initialize")
def _(t: bool) -> Wire:
    w = Wire()
    w.request(
        "initialize",
        1,
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        },
    )
    if not t:
        w.request("ping", 2)
    w.cancel(1 if t else 2)
    return w.end()


@case("notification.progress_unknown")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}, "_meta": {"progressToken": "tok"}})
    w.progress("other" if t else "tok", 1, 2)
    w.result(2, {"content": []})
    return w.end()


@case("notification.progress_after_response")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}, "_meta": {"progressToken": 2}})
    if not t:
        w.progress(2, 1, 1)
    w.result(2, {"content": []})
    if t:
        w.progress(2, 1, 1)
    return w.end()


@case("notification.progress_not_increasing")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "slow", "arguments": {}, "_meta": {"progressToken": 2}})
    w.progress(2, 2)
    w.progress(2, 1 if t else 3)
    w.result(2, {"content": []})
    return w.end()


# ------------------------------------------------------------------------------ lifecycle
@case("lifecycle.request_before_initialize")
def _(t: bool) -> Wire:
    w = Wire()
    w.request("tools/list" if t else "ping", 1)
    w.result(1, {"tools": []} if t else {})
    w.wait(300)
    if t:
        w.handshake(id=2)
        return w.end()
    # The relay stamps each direction after forwarding: the initialize result can be recorded
    # after the client's next messages. Same-direction order proves they came after it.
    w.request(
        "initialize",
        2,
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "c", "version": "1"},
        },
    )
    w.notify("notifications/initialized")
    w.request("tools/list", 3)
    w.result(
        2,
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "s", "version": "1"},
        },
    )
    w.result(3, {"tools": []})
    return w.end()


@case("lifecycle.server_request_before_initialized")
def _(t: bool) -> Wire:
    w = Wire.initialized(initialized=False)
    if t:
        w.request("roots/list", 0, direction="s2c")
        w.result(0, {"roots": []}, direction="c2s")
        w.wait(300)
        w.notify("notifications/initialized")
    else:
        # A millisecond apart across directions: jitter, not proof.
        w.request("roots/list", 0, direction="s2c")
        w.notify("notifications/initialized")
        w.result(0, {"roots": []}, direction="c2s")
    return w.end()


@case("lifecycle.initialized_missing")
def _(t: bool) -> Wire:
    w = Wire.initialized(initialized=not t)
    w.request("tools/list", 2)
    w.result(2, {"tools": []})
    return w.end()


@case("lifecycle.unknown_protocol_version")
def _(t: bool) -> Wire:
    return Wire.initialized("2024-12-31" if t else "2025-06-18").end()


@case("envelope.missing")
def _(t: bool) -> Wire:
    w = Wire.modern()
    w.request("tools/list", 2, {} if t else {"_meta": envelope()})
    w.result(2, {"tools": [], "resultType": "complete"})
    return w.end()


@case("result.missing_result_type")
def _(t: bool) -> Wire:
    w = Wire.modern()
    w.request("tools/list", 2, {"_meta": envelope()})
    w.result(2, {"tools": []} if t else {"tools": [], "resultType": "complete"})
    return w.end()


@case("capability.server_not_advertised")
def _(t: bool) -> Wire:
    caps = {k: v for k, v in SERVER_CAPS.items() if k != "prompts"} if t else SERVER_CAPS
    w = Wire.initialized(server_caps=caps)
    w.request("prompts/list", 2)
    w.result(2, {"prompts": []})
    return w.end()


@case("capability.client_not_advertised")
def _(t: bool) -> Wire:
    w = Wire.initialized(client_caps={"roots": {}} if t else {"sampling": {}})
    w.request("sampling/createMessage", 0, {"messages": [], "maxTokens": 5}, direction="s2c")
    w.result(
        0,
        {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m"},
        direction="c2s",
    )
    return w.end()


@case("capability.notification_not_advertised")
def _(t: bool) -> Wire:
    caps = dict(SERVER_CAPS, tools={"listChanged": not t})
    w = Wire.initialized(server_caps=caps)
    w.notify("notifications/tools/list_changed", direction="s2c")
    return w.end()


@case("capability.logging_not_advertised")
def _(t: bool) -> Wire:
    caps = {k: v for k, v in SERVER_CAPS.items() if k != "logging"} if t else SERVER_CAPS
    w = Wire.initialized(server_caps=caps)
    w.log("hello")
    return w.end()


@case("log.without_opt_in")
def _(t: bool) -> Wire:
    w = Wire.modern()
    w.request(
        "tools/call",
        2,
        {"name": "log", "arguments": {}, "_meta": envelope(log_level=None if t else "debug")},
    )
    w.log("during the call", level="info")
    w.result(2, {"content": [], "resultType": "complete"})
    return w.end()


@case("tools.invalid_x_mcp_header")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    prop = {"type": "number" if t else "string", "x-mcp-header": "Region"}
    w.request("tools/list", 2)
    w.result(
        2,
        {
            "tools": [
                {
                    "name": "lookup",
                    "inputSchema": {"type": "object", "properties": {"region": prop}},
                }
            ]
        },
    )
    return w.end()


@case("list.duplicate")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/list", 2)
    w.result(2, {"tools": [{"name": "echo"}], "nextCursor": "p2"})
    w.request("tools/list", 3, {"cursor": "p2"})
    w.result(3, {"tools": [{"name": "echo" if t else "add"}]})
    return w.end()


@case("pagination.unknown_cursor")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("resources/list", 2)
    w.result(2, {"resources": [], "nextCursor": "eyJwIjoyfQ=="})
    w.request("resources/list", 3, {"cursor": "eyJwIjoyfQ" if t else "eyJwIjoyfQ=="})
    w.result(3, {"resources": []})
    return w.end()


@case("pagination.empty_cursor_dropped")
def _(t: bool) -> Wire:
    w = Wire.initialized()
    w.request("tools/list", 2)
    w.result(2, {"tools": [{"name": "a"}], "nextCursor": ""})
    if not t:
        w.request("tools/list", 3, {"cursor": ""})
        w.result(3, {"tools": [{"name": "b"}]})
    return w.end()


def mrtr(rounds: list[tuple[dict[str, Any], dict[str, Any]]], *, era: str = "modern") -> Wire:
    """A tools/call conversation: each round is (extra request params, result)."""
    w = Wire.modern() if era == "modern" else Wire.initialized()
    for i, (extra, result) in enumerate(rounds, start=2):
        p: dict[str, Any] = {"name": "confirm", "arguments": {"action": "deploy"}, **extra}
        if era == "modern":
            p["_meta"] = envelope()
        w.request("tools/call", i, p)
        w.result(i, result)
    return w.end()


ASK = {
    "resultType": "input_required",
    "inputRequests": {
        "confirm": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Sure?",
                "requestedSchema": {"type": "object", "properties": {}},
            },
        }
    },
    "requestState": "st-1",
}
DONE = {
    "content": [{"type": "text", "text": "deployed"}],
    "isError": False,
    "resultType": "complete",
}
ANSWER = {
    "inputResponses": {"confirm": {"action": "accept", "content": {}}},
    "requestState": "st-1",
}


@case("mrtr.chain_incomplete")
def _(t: bool) -> Wire:
    return mrtr([({}, ASK)] if t else [({}, ASK), (ANSWER, DONE)])


@case("mrtr.unmatched_retry")
def _(t: bool) -> Wire:
    retry = dict(ANSWER, requestState="st-forged") if t else ANSWER
    return mrtr([({}, ASK), (retry, DONE)])


@case("mrtr.responses_mismatch")
def _(t: bool) -> Wire:
    ask = dict(ASK, inputRequests={**ASK["inputRequests"], "roots": {"method": "roots/list"}})
    answer = dict(ANSWER, inputResponses={**ANSWER["inputResponses"], "roots": {"roots": []}})
    return mrtr([({}, ask), (ANSWER if t else answer, DONE)])


@case("mrtr.in_initialize_era")
def _(t: bool) -> Wire:
    return mrtr([({}, ASK), (ANSWER, DONE)], era="initialize" if t else "modern")


# ------------------------------------------------------------------------------ OAuth
MCP_URL = "https://mcp.example.com/mcp"


def _oauth_row(w: Wire, method: str, url: str, status: int, **kw: Any) -> int:
    hid = w.exchange(
        method,
        url=url,
        status=status,
        request_headers=kw.get("req", [["host", "mcp.example.com"]]),
        response_headers=kw.get("resp", [["content-type", "application/json"]]),
    )
    w.http_exchanges[-1]["meta"] = kw.get("meta")
    return hid


@case("oauth.missing_www_authenticate")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    resp = [] if t else [["www-authenticate", 'Bearer resource_metadata="x"']]
    _oauth_row(w, "POST", MCP_URL, 401, resp=resp)
    return w.end()


@case("oauth.token_error")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    body = {"text": '{"error":"invalid_grant"}' if t else '{"access_token":"[REDACTED]"}'}
    meta = {"oauth": {"role": "token_endpoint"}, "response_body": body}
    _oauth_row(w, "POST", "https://as.example.com/token", 400 if t else 200, meta=meta)
    return w.end()


@case("oauth.unauthorized_loop")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    bearer = [["authorization", "Bearer [REDACTED]"]]
    challenge = [["www-authenticate", 'Bearer error="invalid_token"']]
    for i in range(3):
        if i == 2 and not t:
            _oauth_row(w, "POST", MCP_URL, 200)
        _oauth_row(w, "POST", MCP_URL, 401, req=bearer, resp=challenge)
    return w.end()


@case("oauth.resource_mismatch")
def _(t: bool) -> Wire:
    w = Wire(transport="http")
    resource = "https://internal:8080/mcp" if t else MCP_URL
    meta = {"oauth": {"role": "protected_resource_metadata", "resource": resource}}
    prm = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
    _oauth_row(w, "GET", prm, 200, meta=meta)
    _oauth_row(w, "POST", MCP_URL, 200)
    return w.end()


from tests.analysis import cases_tasks as _cases_tasks  # noqa: E402,F401  (registers task cases)
