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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from mcp_proxy.analysis.consumer import Seqs
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
            names = [
                f"extension {ext}" if key == "extensions" else key
                for key in sorted(req)
                for ext in (
                    sorted(req[key])
                    if key == "extensions" and isinstance(req[key], dict)
                    else [None]
                )
            ]
            return "required client capabilities: " + ", ".join(names) if names else ""
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


class _Req(NamedTuple):
    """The first host request an HTTP exchange carried (what an HTTP finding names)."""

    exchange: int
    method: str
    name: str | None
    request_seq: int
    #: its answer came in this HTTP exchange and bears the request's id
    id_bearing: bool


class _Body:
    """What a failed HTTP exchange's response carried: its frames and the first of them."""

    __slots__ = ("error", "note", "seqs")

    def __init__(self) -> None:
        self.seqs = Seqs()
        self.error: tuple[int | None, Any] | None = None  # code and message of the first error
        self.note: str | None = None  # the first non-JSON-RPC body, quoted


def _failed(row: Mapping[str, Any] | None) -> bool:
    """An HTTP exchange an HTTP finding may be about: no status, 400 and up, or a relay
    failure."""
    if row is None:
        return False
    status = row.get("status")
    return status is None or status >= 400 or str(row.get("outcome") or "") in RELAY_FAILURES


class Taxonomy:
    """Every error of the session, named: JSON-RPC errors and tool errors of exchanges, HTTP
    statuses, statuses that disagree with the answer, errors answering no known request.

    An HTTP error status and the JSON-RPC error in its body usually describe one event: the
    exchange's error is not reported when the status explains it (:meth:`explains`). What is
    kept per HTTP exchange is only for the failed ones (no status, or 400 and up)."""

    def __init__(
        self,
        facts: SessionFacts,
        http: Mapping[int, Mapping[str, Any]],
        sink: FindingSink,
        orphan_errors: Sequence[Msg] = (),
    ) -> None:
        self.facts = facts
        self.http = http
        self.sink = sink
        self.orphan_errors = orphan_errors
        self.requests: dict[int, _Req] = {}
        self.bodies: dict[int, _Body] = {}
        #: the latest start of a 2xx HTTP exchange (a 401 before it was answered afterwards)
        self.last_ok = max(
            (
                r.get("started_at") or 0
                for r in http.values()
                if 200 <= (r.get("status") or 0) < 300
            ),
            default=None,
        )

    # ------------------------------------------------------------------ feeding
    def exchange(self, ex: Exchange) -> None:
        hid = ex.http
        if (
            hid is not None
            and ex.direction == "c2s"
            and hid not in self.requests
            and _failed(self.http.get(hid))
        ):
            resp = ex.response
            self.requests[hid] = _Req(
                ex.index,
                ex.method,
                ex.name,
                ex.request_seq,
                resp is not None and resp.http == hid and resp.msg_id is not None,
            )
        resp = ex.response
        if resp is None:
            return
        if ex.outcome == "error":
            self._error(ex, resp)
        elif ex.outcome == "tool_error":
            ex.error_class = "tool.error_result"
            text = _text_of((resp.result or {}).get("content"))
            self.sink.add(
                "tool.error_result",
                f"tool {ex.name or '?'} reported an error" + (f": {text}" if text else ""),
                "The tool ran and returned isError: true; this is not a protocol error.",
                [ex.request_seq, resp.seq],
                exchange=ex.index,
            )

    def _error(self, ex: Exchange, resp: Msg) -> None:
        err = resp.error
        ec = classify_error(
            ex.error_code,
            ex.error_message,
            err.get("data"),
            era=self.facts.era,
            method=ex.method,
            transport=self.facts.transport,
        )
        ex.error_class = ec.code
        if resp.http is not None and self.explains(resp.http):
            return
        data = decode_error_data(ex.error_code, err.get("data"))
        self.sink.add(
            ec.code,
            f"{ex.method}{_named(ex)}: {ex.error_code} {ex.error_message or ec.name}",
            f"{ec.name} ({ex.error_code}). {ec.meaning}" + (f" {data}." if data else ""),
            [ex.request_seq, resp.seq],
            exchange=ex.index,
        )

    def reads_exchanges(self) -> bool:
        return True

    def reads_messages(self) -> bool:
        # HTTP frames, of a session with HTTP rows: without any, no frame is about a failed
        # HTTP exchange or has a status to agree with (a frame may name a row it lacks).
        return bool(self.http)

    def message(self, m: Msg) -> None:
        hid = m.http
        if hid is None or m.direction != "s2c":
            return
        if m.channel == "http" and m.kind in ("response", "error"):
            self._status_agreement(m, hid)
        if m.kind not in ("error", "noise", "invalid") or not _failed(self.http.get(hid)):
            return
        body = self.bodies.get(hid)
        if body is None:
            body = self.bodies[hid] = _Body()
        body.seqs.add(m.seq)
        if m.kind == "error":
            if body.error is None:
                body.error = (m.error_code, m.error.get("message"))
        elif body.note is None:
            body.note = f" Body: {snippet(m.raw)!r}" if m.raw else ""

    # ------------------------------------------------------------------ HTTP statuses
    def _fallback(self, hid: int, status: int | None) -> bool:
        """server/discover answered 400/404/405: an initialize-era server."""
        req = self.requests.get(hid)
        return req is not None and req.method == "server/discover" and status in (400, 404, 405)

    def explains(self, hid: int) -> bool:
        """Whether the HTTP exchange's status is the finding (not the JSON-RPC error in it)."""
        row = self.http.get(hid)
        if row is None:
            return False
        status = row.get("status")
        outcome = str(row.get("outcome") or "")
        if outcome in RELAY_FAILURES or (status is None and outcome and outcome not in _QUIET):
            return True
        if status is None or status < 400:
            return False
        if _refused_host(row) is not None or self._fallback(hid, status):
            return True
        req = self.requests.get(hid)
        return _transport_primary(row, status) or not (req is not None and req.id_bearing)

    def _status_agreement(self, m: Msg, hid: int) -> None:
        """A plain-JSON answer whose HTTP status disagrees with the JSON-RPC outcome for the era.

        Not the answers to a ``server/discover`` probe that an initialize-era server refused:
        that server follows the rules of its own era, in which the 2026-07-28 status mapping
        does not apply; ``lifecycle.discover_fallback`` already says what happened.
        """
        row = self.http.get(hid)
        status = row.get("status") if row else None
        if status is None or self._fallback(hid, status):
            return
        is_result = m.kind == "response"
        era = self.facts.era
        allowed = status_expected(era, m.error_code, is_result=is_result)
        if allowed is None or status in allowed:
            return
        what = "result" if is_result else f"error {m.error_code}"
        self.sink.add(
            "http.status_mismatch",
            f"JSON-RPC {what} sent with HTTP {status}"
            f" (expected {'/'.join(map(str, sorted(allowed)))})",
            f"Era {era or 'unknown'}: a plain-JSON {what} must come with HTTP"
            f" {' or '.join(map(str, sorted(allowed)))}.",
            [m.seq],
        )

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        http = self.http
        rows = sorted(http.values(), key=lambda r: (r.get("started_at") or 0, r.get("id") or 0))
        for row in rows:
            if _failed(row):
                self._row(row)
        era, facts = self.facts.era, self.facts
        for m in self.orphan_errors:
            if m.http is not None and self.explains(m.http):
                continue
            orow = http.get(m.http) if m.http is not None else None
            if orow is not None and (orow.get("status") or 0) >= 400:
                continue
            err = m.error
            msg = err.get("message") if isinstance(err.get("message"), str) else None
            ec = classify_error(
                m.error_code, msg, err.get("data"), era=era, transport=facts.transport
            )
            self.sink.add(
                ec.code,
                f"error {m.error_code} {msg or ec.name} (answering no known request)",
                f"{ec.name} ({m.error_code}). {ec.meaning}",
                [m.seq],
            )

    def _row(self, row: Mapping[str, Any]) -> None:
        """The finding of one failed HTTP exchange, if its status is one."""
        sink = self.sink
        hid = int(row.get("id") or 0)
        status = row.get("status")
        outcome = str(row.get("outcome") or "")
        method = str(row.get("method") or "")
        req = self.requests.get(hid)
        what = f"{method} {row.get('url') or ''}".strip()
        if req is not None:
            what += f" ({req.method}{' ' + req.name if req.name else ''})"
        seqs = [req.request_seq] if req is not None else []
        body = self.bodies.get(hid)
        if body is not None:
            seqs += body.seqs.seqs
        if outcome in RELAY_FAILURES or (status is None and outcome and outcome not in _QUIET):
            # The relay answered for the server (502/504 with X-Mcptape-Error) or the response
            # broke off: what the host saw did not come from the server.
            why = header(row.get("response_headers"), "x-mcptape-error")
            sink.add(
                "http.upstream_error",
                f"{what}: "
                + (f"HTTP {status} from the relay" if status else "no response")
                + f" ({outcome}{', ' + why if why else ''})",
                row.get("error") or "The relay got no complete HTTP response from the upstream.",
                seqs,
                exchange=req.exchange if req else None,
            )
            return
        if status is None:
            return
        if _refused_host(row) is not None:
            refused = _refused_host(row)
            # mcptape answered itself (nothing went upstream): the host's doing, not the server's.
            sink.add(
                "http.foreign_host",
                f"{what}: HTTP {status} from mcptape: the host addressed {refused!r}",
                f"The request named Host {refused!r}, which is not the relay's address; mcptape"
                " refused it (DNS-rebinding protection) and the server never saw it. Point the"
                " host at the relay's address, or allow the name with --allow-host.",
                seqs,
                exchange=req.exchange if req else None,
            )
            return
        body_note = ""
        if body is not None and body.error is not None:
            ecode, emsg = body.error
            body_note = f" Body: JSON-RPC error {ecode}" + (
                f" {emsg!r}" if isinstance(emsg, str) else ""
            )
        elif body is not None and body.note:
            body_note = body.note
        if req is not None and self._fallback(hid, status):
            sink.add(
                "lifecycle.discover_fallback",
                f"server/discover answered HTTP {status}: initialize-era server",
                "The client probed 2026-07-28 discovery; the server answered with a client error,"
                " so the client falls back to initialize." + body_note,
                seqs,
                exchange=req.exchange,
            )
            return
        if not _transport_primary(row, status) and req is not None and req.id_bearing:
            return  # the JSON-RPC error of the request is the finding (status checked apart)
        session_hdr = header(row.get("request_headers"), "mcp-session-id")
        if status == 401:
            challenge = parse_www_authenticate(
                header(row.get("response_headers"), "www-authenticate")
            )
            started = row.get("started_at") or 0
            recovered = self.last_ok is not None and self.last_ok > started
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
                exchange=req.exchange if req else None,
            )
            return
        code, detail = _status_finding(row, status, method, session_hdr)
        sink.add(
            code,
            f"{what}: HTTP {status}",
            (detail + body_note).strip(),
            seqs,
            exchange=req.exchange if req else None,
        )


def _transport_primary(row: Mapping[str, Any], status: int) -> bool:
    """A status that describes the transport, whatever the body says."""
    if status in _TRANSPORT_STATUSES or status >= 500:
        return True
    return status == 404 and bool(header(row.get("request_headers"), "mcp-session-id"))


def _status_finding(
    row: Mapping[str, Any], status: int, method: str, session_hdr: str | None
) -> tuple[str, str]:
    """The finding code and detail of an HTTP error status (not 401)."""
    if status == 404:
        code = "http.session_not_found" if session_hdr else "http.not_found"
        detail = (
            f"The request carried Mcp-Session-Id {session_hdr}, which the server does not"
            " know (expired or the server restarted)."
            if session_hdr
            else "Nothing answered at this URL."
        )
    elif status == 405:
        code = "http.method_not_allowed" if method == "POST" else "http.optional_method_unsupported"
        allow = header(row.get("response_headers"), "allow")
        detail = f"Allow: {allow}." if allow else "No Allow header."
    elif status == 400:
        code = "http.bad_request"
        detail = "The server rejected the HTTP request."
    elif status == 403:
        code = "http.forbidden"
        challenge = parse_www_authenticate(header(row.get("response_headers"), "www-authenticate"))
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
    return code, detail


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
