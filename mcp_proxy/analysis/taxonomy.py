"""The error taxonomy: what a JSON-RPC error code, an HTTP status or a broken frame means.

This is the one place that names errors. :func:`classify_error` gives a code's meaning *for the
era of the session* (-32002 is "resource not found" up to 2025-06-18 and a reserved code in
2026-07-28; -32020..-32099 are implementation-defined in the initialize era and reserved for the
spec in 2026-07-28) and refines -32602 by its message (unknown tool, unknown prompt, missing
resource). :func:`taxonomy_findings` turns every failed exchange, tool error, HTTP status and
transport fault of a session into findings.

An HTTP error status and the JSON-RPC error in its body usually describe one event. Exactly one
finding is written for it: the JSON-RPC code when the body answers a request (a 2026-07-28 400
with -32602 for a tools/call), the HTTP status when the failure is the transport's (401, 404 for
an expired session, 413, 421, 5xx, or a body with a null id).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_proxy.analysis.exchanges import Paired
from mcp_proxy.analysis.facts import header
from mcp_proxy.analysis.model import ERA_MODERN, Exchange, FindingSink, Msg, SessionFacts
from mcp_proxy.analysis.transport import snippet
from mcp_proxy.protocol import ERROR_NAMES, MODERN_ERROR_STATUS

# --------------------------------------------------------------------------------- JSON-RPC


@dataclass(frozen=True, slots=True)
class ErrorClass:
    """A JSON-RPC error as the taxonomy names it."""

    code: str  # the finding code
    name: str  # short human name, e.g. "Invalid params"
    meaning: str  # what it means here, one sentence (era-aware)


#: Short names of the JSON-RPC and MCP error codes (the protocol module holds the table).
NAMES: dict[int, str] = dict(ERROR_NAMES)

_UNKNOWN_TOOL = re.compile(
    r"(unknown|no such|invalid|missing|unrecognized)\s+tool|tool\b.*\b(not found|does not exist"
    r"|doesn't exist|is not (registered|available))",
    re.IGNORECASE,
)
_UNKNOWN_PROMPT = re.compile(
    r"(unknown|no such|invalid|unrecognized)\s+prompt|prompt\b.*\b(not found|does not exist"
    r"|doesn't exist)",
    re.IGNORECASE,
)
_MISSING_RESOURCE = re.compile(
    r"(unknown|no such|missing)\s+resource|resource\b.*\b(not found|does not exist"
    r"|doesn't exist)|not found",
    re.IGNORECASE,
)


def classify_error(
    code: int | None,
    message: str | None = None,
    data: Any = None,
    *,
    era: str | None = None,
    method: str | None = None,
    transport: str | None = None,
) -> ErrorClass:
    """Name a JSON-RPC error for this era, request method and transport. Never raises.

    ``transport`` matters for the codes of the Streamable HTTP transport: -32020 speaks of
    HTTP headers, which a stdio session does not have.
    """
    msg = message or ""
    if code is None:
        return ErrorClass("jsonrpc.application_error", "No error code", "The error has no code.")
    if code == -32700:
        return ErrorClass("jsonrpc.parse_error", NAMES[code], "The receiver could not parse JSON.")
    if code == -32600:
        return ErrorClass(
            "jsonrpc.invalid_request", NAMES[code], "The message is not a valid request."
        )
    if code == -32601:
        if method == "server/discover":
            return ErrorClass(
                "lifecycle.discover_fallback",
                NAMES[code],
                "The server speaks only the initialize era; the client falls back to initialize.",
            )
        return ErrorClass(
            "jsonrpc.method_not_found",
            NAMES[code],
            f"The receiver does not offer {method or 'it'}.",
        )
    if code == -32602:
        if method == "tools/call" and _UNKNOWN_TOOL.search(msg):
            return ErrorClass("jsonrpc.unknown_tool", "Unknown tool", "The tool does not exist.")
        if method == "prompts/get" and _UNKNOWN_PROMPT.search(msg):
            return ErrorClass(
                "jsonrpc.unknown_prompt", "Unknown prompt", "The prompt does not exist."
            )
        if method == "resources/read" and (
            _MISSING_RESOURCE.search(msg) or (isinstance(data, dict) and "uri" in data)
        ):
            return ErrorClass(
                "jsonrpc.resource_not_found", "Resource not found", "No resource at that URI."
            )
        if method is None and _UNKNOWN_TOOL.search(msg):
            return ErrorClass("jsonrpc.unknown_tool", "Unknown tool", "The tool does not exist.")
        return ErrorClass("jsonrpc.invalid_params", NAMES[code], "The parameters were rejected.")
    if code == -32603:
        return ErrorClass(
            "jsonrpc.internal_error", NAMES[code], "The receiver failed handling the request."
        )
    if code == -32020 and transport == "stdio":
        return ErrorClass(
            "jsonrpc.server_error",
            "Server error",
            "-32020 is the Streamable HTTP code for headers that disagree with the body; a"
            " stdio session has no headers, so here it is the server's own error (its message"
            " says what).",
        )
    if code == -32020:
        return ErrorClass(
            "mcp.header_mismatch", NAMES[code], "HTTP headers disagree with the JSON-RPC body."
        )
    if code == -32021:
        return ErrorClass(
            "mcp.missing_client_capability",
            NAMES[code],
            "The request did not declare a client capability the server needs.",
        )
    if code == -32022:
        return ErrorClass(
            "mcp.unsupported_protocol_version",
            NAMES[code],
            "The server does not serve the requested protocol version.",
        )
    if code == -32042:
        if era == ERA_MODERN:
            return ErrorClass(
                "jsonrpc.reserved_code",
                "Retired code",
                "2026-07-28 retired -32042 (URL elicitation is done through MRTR) and reserves it.",
            )
        return ErrorClass(
            "mcp.url_elicitation_required",
            NAMES[code],
            "The user must complete a URL elicitation first.",
        )
    if code == -32800:
        return ErrorClass("mcp.request_cancelled", NAMES[code], "The request was cancelled.")
    if code == -32002:
        if era != ERA_MODERN and method in (None, "resources/read"):
            return ErrorClass(
                "jsonrpc.resource_not_found",
                NAMES[code],
                "Resource not found (the code revisions up to 2025-06-18 used).",
            )
        return ErrorClass(
            "jsonrpc.reserved_code",
            "Reserved code",
            "-32002 is reserved and never reused in 2026-07-28.",
        )
    if -32019 <= code <= -32000:
        extra = (
            " The official SDKs use it internally (connection closed / request timeout) and"
            " never send it."
            if code in (-32000, -32001)
            else ""
        )
        return ErrorClass(
            "jsonrpc.server_error",
            "Server error",
            "An implementation-defined server error." + extra,
        )
    if -32099 <= code <= -32020:
        if era == ERA_MODERN:
            return ErrorClass(
                "jsonrpc.reserved_code",
                "Unallocated code",
                "2026-07-28 reserves -32020..-32099 for codes the spec allocates; this one is not"
                " allocated.",
            )
        return ErrorClass(
            "jsonrpc.server_error",
            "Server error",
            "An implementation-defined server error.",
        )
    if -32768 <= code <= -32000:
        return ErrorClass(
            "jsonrpc.reserved_code",
            "Reserved code",
            "JSON-RPC reserves -32768..-32000 for predefined errors; this one is not defined.",
        )
    return ErrorClass(
        "jsonrpc.application_error",
        "Application error",
        "A code outside the ranges JSON-RPC and MCP define.",
    )


def decode_error_data(code: int | None, data: Any) -> str:
    """The parts of ``error.data`` a person needs, spelled out (supported versions, …)."""
    if not isinstance(data, dict):
        return ""
    if code == -32022:
        supported = data.get("supported")
        requested = data.get("requested")
        parts = []
        if isinstance(supported, list):
            parts.append("server supports " + ", ".join(str(v) for v in supported))
        if requested is not None:
            parts.append(f"client requested {requested}")
        return "; ".join(parts)
    if code == -32021:
        req = data.get("requiredCapabilities")
        if isinstance(req, dict):
            return "required client capabilities: " + ", ".join(sorted(req)) if req else ""
    if code in (-32602, -32002) and "uri" in data:
        return f"uri {data['uri']}"
    if code == -32042:
        els = data.get("elicitations")
        if isinstance(els, list):
            urls = [str(e["url"]) for e in els if isinstance(e, dict) and e.get("url")]
            return f"{len(els)} elicitation(s)" + (": " + ", ".join(urls) if urls else "")
    return ""


def status_expected(era: str | None, code: int | None, *, is_result: bool) -> set[int] | None:
    """The HTTP statuses a plain-JSON answer may come with, or None when anything goes."""
    if era == ERA_MODERN:
        if is_result:
            return {200}
        return {MODERN_ERROR_STATUS.get(code or 0, 200)}
    if is_result:
        return {200}
    return None


# --------------------------------------------------------------------------------- HTTP


def parse_www_authenticate(value: str | None) -> dict[str, str]:
    """``Bearer resource_metadata="…", scope="a b", error="…"`` → its parameters (+ scheme)."""
    if not value:
        return {}
    out: dict[str, str] = {}
    scheme, _, rest = value.strip().partition(" ")
    out["scheme"] = scheme
    for m in re.finditer(r'([A-Za-z_][\w-]*)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s,]+)', rest):
        out[m.group(1).lower()] = m.group(3) if m.group(3) is not None else m.group(2)
    return out


_HTTP_SIMPLE: dict[int, str] = {
    403: "http.forbidden",
    406: "http.not_acceptable",
    409: "http.conflict",
    413: "http.payload_too_large",
    415: "http.unsupported_media_type",
    421: "http.misdirected",
    429: "http.rate_limited",
}
#: Exchange outcomes (HTTP relay) where the answer did not come whole from the server.
RELAY_FAILURES = frozenset({"upstream_error", "timeout", "relay_error"})
#: Outcomes that say nothing bad about the upstream.
#: Outcomes that are no fault of the server: finished, the host left, the relay stopped, or
#: mcptape itself reset the host's connection on a fault rule (docs/faults.md).
_QUIET = frozenset(
    {"complete", "host_aborted", "relay_shutdown", "client_disconnected", "injected_reset"}
)
#: Statuses that describe the transport, whatever the body says.
_TRANSPORT_STATUSES = frozenset({401, 403, 405, 406, 409, 413, 415, 421, 429})


def _text_of(content: Any, limit: int = 200) -> str:
    if not isinstance(content, list):
        return ""
    parts = [c.get("text", "") for c in content if isinstance(c, dict) and c.get("type") == "text"]
    text = " ".join(" ".join(p.split()) for p in parts if isinstance(p, str)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _named(ex: Exchange) -> str:
    return f" {ex.name}" if ex.name else ""


def taxonomy_findings(
    msgs: list[Msg],
    pairing: Paired,
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
) -> None:
    """Every error of the session, named: JSON-RPC, tool, HTTP and transport."""
    explained = _http_findings(msgs, pairing, facts, http, sink)
    era = facts.era
    for ex in pairing.exchanges:
        resp = ex.response
        if resp is None:
            continue
        if ex.outcome == "error":
            err = resp.error
            ec = classify_error(
                ex.error_code,
                ex.error_message,
                err.get("data"),
                era=era,
                method=ex.method,
                transport=facts.transport,
            )
            ex.error_class = ec.code
            if resp.http is not None and resp.http in explained:
                continue
            data = decode_error_data(ex.error_code, err.get("data"))
            sink.add(
                ec.code,
                f"{ex.method}{_named(ex)}: {ex.error_code} {ex.error_message or ec.name}",
                f"{ec.name} ({ex.error_code}). {ec.meaning}" + (f" {data}." if data else ""),
                [ex.request_seq, resp.seq],
                exchange=ex.index,
            )
        elif ex.outcome == "tool_error":
            ex.error_class = "tool.error_result"
            text = _text_of((resp.result or {}).get("content"))
            sink.add(
                "tool.error_result",
                f"tool {ex.name or '?'} reported an error" + (f": {text}" if text else ""),
                "The tool ran and returned isError: true; this is not a protocol error.",
                [ex.request_seq, resp.seq],
                exchange=ex.index,
            )
    for m in pairing.orphan_errors:
        if m.http is not None and m.http in explained:
            continue
        row = http.get(m.http) if m.http is not None else None
        if row is not None and (row.get("status") or 0) >= 400:
            continue
        err = m.error
        msg = err.get("message") if isinstance(err.get("message"), str) else None
        ec = classify_error(m.error_code, msg, err.get("data"), era=era, transport=facts.transport)
        sink.add(
            ec.code,
            f"error {m.error_code} {msg or ec.name} (answering no known request)",
            f"{ec.name} ({m.error_code}). {ec.meaning}",
            [m.seq],
        )


def _http_findings(
    msgs: list[Msg],
    pairing: Paired,
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
) -> set[int]:
    """HTTP status findings; returns the HTTP exchanges whose JSON-RPC errors they explain."""
    explained: set[int] = set()
    fallback: set[int] = set()  # server/discover answered 4xx: an initialize-era server
    if not http:
        return explained
    requests: dict[int, Exchange] = {}
    for ex in pairing.exchanges:
        if ex.http is not None and ex.direction == "c2s":
            requests.setdefault(ex.http, ex)
    errors: dict[int, list[Msg]] = {}
    bodies: dict[int, list[Msg]] = {}
    for m in msgs:
        if m.http is None or m.direction != "s2c":
            continue
        if m.kind == "error":
            errors.setdefault(m.http, []).append(m)
        elif m.kind in ("noise", "invalid"):
            bodies.setdefault(m.http, []).append(m)
    rows = sorted(http.values(), key=lambda r: (r.get("started_at") or 0, r.get("id") or 0))
    ok_after: list[float] = [
        r.get("started_at") or 0 for r in rows if 200 <= (r.get("status") or 0) < 300
    ]
    for row in rows:
        hid = int(row.get("id") or 0)
        status = row.get("status")
        outcome = str(row.get("outcome") or "")
        method = str(row.get("method") or "")
        req = requests.get(hid)
        what = f"{method} {row.get('url') or ''}".strip()
        if req is not None:
            what += f" ({req.method}{_named(req)})"
        seqs = [req.request_seq] if req is not None else []
        errs = errors.get(hid, [])
        seqs += [m.seq for m in errs] + [m.seq for m in bodies.get(hid, [])]
        if outcome in RELAY_FAILURES or (status is None and outcome and outcome not in _QUIET):
            # The relay answered for the server (502/504 with X-Mcptape-Error) or the response
            # broke off: what the host saw did not come from the server.
            explained.add(hid)
            why = header(row.get("response_headers"), "x-mcptape-error")
            sink.add(
                "http.upstream_error",
                f"{what}: "
                + (f"HTTP {status} from the relay" if status else "no response")
                + f" ({outcome}{', ' + why if why else ''})",
                row.get("error") or "The relay got no complete HTTP response from the upstream.",
                seqs,
                exchange=req.index if req else None,
            )
            continue
        if status is None:
            continue
        if status < 400:
            continue
        refused = _refused_host(row)
        if refused is not None:
            # mcptape answered itself (nothing went upstream): the host's doing, not the server's.
            explained.add(hid)
            sink.add(
                "http.foreign_host",
                f"{what}: HTTP {status} from mcptape: the host addressed {refused!r}",
                f"The request named Host {refused!r}, which is not the relay's address; mcptape"
                " refused it (DNS-rebinding protection) and the server never saw it. Point the"
                " host at the relay's address, or allow the name with --allow-host.",
                seqs,
                exchange=req.index if req else None,
            )
            continue
        body_note = ""
        if errs:
            e0 = errs[0]
            emsg = e0.error.get("message")
            body_note = f" Body: JSON-RPC error {e0.error_code}" + (
                f" {emsg!r}" if isinstance(emsg, str) else ""
            )
        elif bodies.get(hid):
            body_note = f" Body: {snippet(bodies[hid][0].raw)!r}" if bodies[hid][0].raw else ""
        answered = req is not None and req.response is not None and req.response.http == hid
        id_bearing = (
            answered
            and req is not None
            and req.response is not None
            and (req.response.msg_id is not None)
        )
        if req is not None and req.method == "server/discover" and status in (400, 404, 405):
            explained.add(hid)
            fallback.add(hid)
            sink.add(
                "lifecycle.discover_fallback",
                f"server/discover answered HTTP {status}: initialize-era server",
                "The client probed 2026-07-28 discovery; the server answered with a client error,"
                " so the client falls back to initialize." + body_note,
                seqs,
                exchange=req.index,
            )
            continue
        transport_primary = status in _TRANSPORT_STATUSES or status >= 500
        session_hdr = header(row.get("request_headers"), "mcp-session-id")
        if status == 404 and session_hdr:
            transport_primary = True
        if not transport_primary and id_bearing:
            continue  # the JSON-RPC error of the request is the finding (status checked below)
        explained.add(hid)
        if status == 401:
            challenge = parse_www_authenticate(
                header(row.get("response_headers"), "www-authenticate")
            )
            started = row.get("started_at") or 0
            recovered = any(t > started for t in ok_after)
            bits = [f"{k}={v}" for k, v in challenge.items() if k != "scheme"]
            desc = (
                f"WWW-Authenticate: {challenge.get('scheme', '')} " + ", ".join(bits)
                if challenge
                else "No WWW-Authenticate header."
            )
            sink.add(
                "http.auth_challenge" if recovered else "http.unauthorized",
                f"{what}: HTTP 401" + (" (authorized afterwards)" if recovered else ""),
                desc + body_note,
                seqs,
                exchange=req.index if req else None,
            )
            continue
        if status == 404:
            code = "http.session_not_found" if session_hdr else "http.not_found"
            detail = (
                f"The request carried Mcp-Session-Id {session_hdr}, which the server does not"
                " know (expired or the server restarted)."
                if session_hdr
                else "Nothing answered at this URL."
            )
        elif status == 405:
            code = (
                "http.method_not_allowed"
                if method == "POST"
                else "http.optional_method_unsupported"
            )
            allow = header(row.get("response_headers"), "allow")
            detail = f"Allow: {allow}." if allow else "No Allow header."
        elif status == 400:
            code = "http.bad_request"
            detail = "The server rejected the HTTP request."
        elif status == 403:
            code = "http.forbidden"
            challenge = parse_www_authenticate(
                header(row.get("response_headers"), "www-authenticate")
            )
            detail = (
                f"WWW-Authenticate error={challenge['error']}."
                if "error" in challenge
                else "Origin not allowed, or insufficient permissions."
            )
        elif status in _HTTP_SIMPLE:
            code = _HTTP_SIMPLE[status]
            detail = ""
            if status == 429:
                ra = header(row.get("response_headers"), "retry-after")
                detail = f"Retry-After: {ra}." if ra else ""
        elif status >= 500:
            code = "http.server_error"
            detail = ""
        else:
            code = "http.client_error"
            detail = ""
        sink.add(
            code,
            f"{what}: HTTP {status}",
            (detail + body_note).strip(),
            seqs,
            exchange=req.index if req else None,
        )
    _status_agreement(msgs, facts, http, sink, fallback)
    return explained


def _refused_host(row: Mapping[str, Any]) -> str | None:
    """The Host a request named when mcptape itself refused it (421, ``host-not-allowed``:
    the exchange's meta says ``synthesized.by = mcptape``), else None."""
    meta = row.get("meta")
    if isinstance(meta, (str, bytes)):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    if not isinstance(meta, dict):
        return None
    made = meta.get("synthesized")
    if not isinstance(made, dict) or made.get("by") != "mcptape":
        return None
    if made.get("kind") != "host-not-allowed":
        return None
    host = meta.get("refused_host")
    return host if isinstance(host, str) else "?"


def _status_agreement(
    msgs: list[Msg],
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]],
    sink: FindingSink,
    fallback: set[int],
) -> None:
    """Plain-JSON answers whose HTTP status disagrees with the JSON-RPC outcome for the era.

    Not the answers to a ``server/discover`` probe that an initialize-era server refused
    (``fallback``): that server follows the rules of its own era, in which the 2026-07-28
    status mapping does not apply; ``lifecycle.discover_fallback`` already says what happened.
    """
    for m in msgs:
        if m.direction != "s2c" or m.channel != "http" or m.http is None:
            continue
        if m.http in fallback:
            continue
        if m.kind not in ("response", "error"):
            continue
        row = http.get(m.http)
        status = row.get("status") if row else None
        if status is None:
            continue
        is_result = m.kind == "response"
        allowed = status_expected(facts.era, m.error_code, is_result=is_result)
        if allowed is None or status in allowed:
            continue
        what = "result" if is_result else f"error {m.error_code}"
        sink.add(
            "http.status_mismatch",
            f"JSON-RPC {what} sent with HTTP {status} (expected {'/'.join(map(str, sorted(allowed)))})",
            f"Era {facts.era or 'unknown'}: a plain-JSON {what} must come with HTTP"
            f" {' or '.join(map(str, sorted(allowed)))}.",
            [m.seq],
        )
