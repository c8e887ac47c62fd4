"""The finding catalogue: every code the analysis can report, in one place.

A finding code is a contract. CI pipelines filter on it (``mcptape check --fail-on``), the
dashboard groups by it, diff compares sessions by it; so a code, once published, keeps its
meaning and its severity. Each entry says what the code means, why it matters and what the
specification says, with a link. ``docs/taxonomy.md`` is generated from this module
(``python -m mcp_proxy.analysis.catalogue --markdown > docs/taxonomy.md``) and a test fails
when the two drift apart.

Severities:

- ``error`` — something the specification forbids (a MUST broken) or data that was lost: a
  conversation that cannot be trusted to have done what the host asked.
- ``warning`` — a request that failed, a SHOULD broken, or a pattern that breaks real clients.
- ``info`` — a fact worth seeing that is not a fault (a tool reporting ``isError``, a
  cancellation, the era fallback of an auto-negotiating client).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


#: Ordering for thresholds (``--fail-on warning`` fails on warnings *and* errors).
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}

S25 = "https://modelcontextprotocol.io/specification/2025-11-25"
S26 = "https://modelcontextprotocol.io/specification/2026-07-28"
JSONRPC = "https://www.jsonrpc.org/specification"
RFC9110 = "https://www.rfc-editor.org/rfc/rfc9110"


@dataclass(frozen=True, slots=True)
class Entry:
    """One finding code: what it means and where the rule comes from."""

    code: str
    severity: Severity
    title: str
    explanation: str
    spec: str
    area: str


_ENTRIES: list[Entry] = []


def _e(code: str, severity: Severity, title: str, explanation: str, spec: str) -> None:
    area = code.split(".", 1)[0]
    _ENTRIES.append(Entry(code, severity, title, " ".join(explanation.split()), spec, area))


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741

# ------------------------------------------------------------------------------ bookkeeping
_e(
    "analysis.summary",
    I,
    "What the analysis covered",
    """One row per analysed session, written by the analyzer next to its findings: how many
    frames and exchanges were analysed and with which analyzer version. Readers use it to know
    whether the stored findings are current; it is not a fault.""",
    "",
)
_e(
    "recorder.gap",
    E,
    "Frames were relayed but not recorded",
    """Written by the recorder, not the analyzer: the database refused writes for longer than
    the retries allowed, or the recorder fell behind its memory cap. The traffic itself was
    relayed unchanged; the recording is missing those frames, so any other finding near the gap
    may be an artefact of the missing frames.""",
    "",
)
_e(
    "recorder.undecodable",
    W,
    "Frames recorded as bytes only",
    """Written by the recorder, not the analyzer: these frames could not be decoded (nested too
    deep for the JSON parser, or otherwise beyond what the classifier can read). Their exact
    bytes are in the recording and were relayed unchanged; kind, method and id were not derived
    from them, so pairing and the checks skip them.""",
    "",
)
_e(
    "recorder.value_escaped",
    I,
    "A derived value was made storable",
    """Written by the recorder: a value read from a frame (an id, a method, an error code) could
    not be held by its database column as it was — a lone UTF-16 surrogate is stored as its
    \\u escape, an integer beyond 64 bits as null, an id over 300 characters as a digest. Only
    the derived column changed; the frame's raw bytes are exact.""",
    "",
)
_e(
    "recorder.internal_error",
    E,
    "The recorder failed to handle an item",
    """Written by the recorder: an item handed over by the relay raised an error while it was
    turned into rows (a bug in mcptape). The recorder went on with the next item; what that
    item carried may be missing from the recording. Please report it with the detail.""",
    "",
)
_e(
    "recorder.body_cut",
    W,
    "A body was recorded in part",
    """Written by the HTTP relay and the forward proxy, not the analyzer: a compressed request or
    response body (Content-Encoding gzip, deflate, br or zstd) inflates past the most mcptape
    decodes for the recording (64 MiB, the recorded-body limit) — a decompression bomb, or a
    huge message. The body was forwarded unchanged, byte for byte; the recording keeps its first
    64 MiB decoded, as a frame marked incomplete, and the exchange's meta says so
    (request_body_inflate_cut / response_body_inflate_cut: coding, size on the wire, bytes
    recorded).""",
    f"{RFC9110}#name-content-encoding",
)

# ------------------------------------------------------------------------------ JSON-RPC errors
_e(
    "jsonrpc.parse_error",
    W,
    "Parse error (-32700)",
    """The receiver could not parse what it was sent as JSON. The answer usually has a null id
    because the request's id could not be read. Look for a noise or invalid frame just before
    it in the same direction as the request.""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.invalid_request",
    W,
    "Invalid request (-32600)",
    """The message was JSON but not a valid JSON-RPC request object. On Streamable HTTP servers
    of the initialize era also answer -32600 for a missing session id (400) and an unknown
    session (404).""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.method_not_found",
    W,
    "Method not found (-32601)",
    """The receiver does not implement the method, or does not offer it in this protocol era
    (ping, initialize and logging/setLevel no longer exist in 2026-07-28). A client using a
    feature whose capability the server did not advertise is also reported as
    capability.server_not_advertised.""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.invalid_params",
    W,
    "Invalid params (-32602)",
    """The method exists but its parameters were rejected: wrong argument types, a missing
    required field, an invalid or expired pagination cursor, an invalid log level, or (2026-07-28)
    a request without the required _meta envelope. The error message says which.""",
    f"{S25}/server/tools#error-handling",
)
_e(
    "jsonrpc.unknown_tool",
    W,
    "Unknown tool (-32602)",
    """tools/call named a tool the server does not have: the spec uses -32602 for an unknown
    tool name. Compare the name with the server's last tools/list; a client calling a stale or
    hallucinated tool name is the usual cause.""",
    f"{S25}/server/tools#error-handling",
)
_e(
    "jsonrpc.unknown_prompt",
    W,
    "Unknown prompt (-32602)",
    """prompts/get named a prompt the server does not have (or omitted a required argument,
    which the spec reports with the same code; the message tells which).""",
    f"{S25}/server/prompts#error-handling",
)
_e(
    "jsonrpc.resource_not_found",
    W,
    "Resource not found",
    """resources/read asked for a URI the server does not serve. Current revisions answer
    -32602 (the SDK adds data.uri); revisions up to 2025-06-18 used -32002, which 2026-07-28
    reserves and never reuses.""",
    f"{S25}/server/resources#error-handling",
)
_e(
    "jsonrpc.internal_error",
    E,
    "Internal error (-32603)",
    """The receiver failed while handling a valid request: an unhandled exception in the server
    (or client) code. Its stderr around the same moment usually holds the traceback.""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.server_error",
    W,
    "Implementation-defined server error",
    """A code from the band JSON-RPC leaves to implementations; its meaning is the server's.
    The official SDKs use -32000 (connection closed) and -32001 (request timeout) internally
    and never send them on the wire, so seeing them here means the server chose them.""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.reserved_code",
    W,
    "Error code from a reserved range",
    """The code lies in -32768..-32000, which JSON-RPC reserves for predefined errors, but is
    neither a JSON-RPC code nor one MCP defines for this revision (for example -32002 in the
    2026-07-28 era, or an unallocated code in -32020..-32099). Clients cannot interpret it.""",
    f"{JSONRPC}#error_object",
)
_e(
    "jsonrpc.application_error",
    W,
    "Application-defined error code",
    """A code outside every range JSON-RPC and MCP define (including 0). Clients cannot tell
    what kind of failure it is; a spec-defined code (-32602 for bad input, -32603 for a
    server fault) or a tool result with isError would carry more meaning.""",
    f"{JSONRPC}#error_object",
)
_e(
    "mcp.header_mismatch",
    E,
    "HTTP headers disagree with the body (-32020)",
    """2026-07-28 Streamable HTTP: the server rejected a request because MCP-Protocol-Version,
    Mcp-Method, Mcp-Name or an Mcp-Param-* header was missing, repeated or different from the
    JSON-RPC body. Either the client built the headers wrongly or something between client and
    server rewrote them. The HTTP status must be 400.""",
    f"{S26}/basic/transports/streamable-http",
)
_e(
    "mcp.missing_client_capability",
    W,
    "Missing required client capability (-32021)",
    """2026-07-28: the server needs a client capability (sampling, elicitation, roots, …) that
    the request's io.modelcontextprotocol/clientCapabilities did not declare;
    data.requiredCapabilities names it. The HTTP status must be 400.""",
    f"{S26}/basic",
)
_e(
    "mcp.unsupported_protocol_version",
    W,
    "Unsupported protocol version (-32022)",
    """2026-07-28: the server does not serve the protocol version the request named.
    data.supported lists what it does support and data.requested repeats the request's version;
    a client should retry with a mutually supported version. The HTTP status must be 400.""",
    f"{S26}/basic",
)
_e(
    "mcp.url_elicitation_required",
    I,
    "URL elicitation required (-32042)",
    """2025-11-25: the server needs the user to complete a URL-mode elicitation (for example an
    OAuth consent page) before it can serve the request; the error data carries the
    elicitations. A normal step of the flow, not a fault. 2026-07-28 retired the code (MRTR
    replaces it) and reserves it.""",
    f"{S25}/client/elicitation",
)
_e(
    "mcp.request_cancelled",
    I,
    "Request cancelled (-32800)",
    """The receiver stopped working on a request because it was cancelled, and said so. The
    official SDK answers a cancelled request with -32800 on Streamable HTTP.""",
    f"{S25}/basic/utilities/cancellation",
)
_e(
    "lifecycle.discover_fallback",
    I,
    "server/discover not supported: the client fell back to initialize",
    """An auto-negotiating client probed server/discover (2026-07-28) and the server, which
    speaks only the initialize era, answered -32601 (stdio) or an HTTP 4xx. This is the
    expected fallback path, not a fault.""",
    f"{S26}/basic",
)
_e(
    "tool.error_result",
    I,
    "Tool reported an error (isError: true)",
    """The tool ran and failed; the server reported it inside a successful tools/call result with
    isError: true so that the model can see the error and react. This is not a protocol error.
    The official SDK also reports an unknown tool name this way.""",
    f"{S25}/server/tools#error-handling",
)
_e(
    "tool.task_failed",
    W,
    "A task ended failed",
    """A task-augmented request (a tools/call, or a sampling or elicitation request run as a task)
    ended with status failed, or its result (tasks/result in 2025-11-25, the error inlined in a
    2026-07-28 tasks/get) was a JSON-RPC error: the operation did not complete. Attributed to
    the call that created the task. In 2025-11-25 a tool result with isError: true ends the task
    failed: that is this one finding (the result's text its reason), not a tool.error_result
    too; a 2026-07-28 task that completed with an isError result is reported as
    tool.error_result.""",
    f"{S25}/basic/utilities/tasks",
)

# ------------------------------------------------------------------------------ HTTP
_e(
    "http.bad_request",
    W,
    "HTTP 400 Bad Request",
    """The server rejected the HTTP request itself: an unsupported content type, a body that is
    not JSON-RPC, a missing session id, or (2026-07-28) a protocol error answered with 400. When
    the body carries a JSON-RPC error for a request, that error is reported by its own code.""",
    f"{S25}/basic/transports#streamable-http",
)
_e(
    "http.unauthorized",
    W,
    "HTTP 401 Unauthorized",
    """The server requires authorization and the client never got past it in this session. The
    WWW-Authenticate header (resource_metadata, scope, error) says where to authorize.""",
    f"{S25}/basic/authorization",
)
_e(
    "http.auth_challenge",
    I,
    "HTTP 401 answered by authorizing",
    """A 401 challenge that a later request in the same session got past: the normal start of
    the OAuth flow for a protected server.""",
    f"{S25}/basic/authorization",
)
_e(
    "http.forbidden",
    E,
    "HTTP 403 Forbidden",
    """The server refused the request: an Origin it does not allow (DNS-rebinding protection),
    or a token without the needed scope (WWW-Authenticate error="insufficient_scope").""",
    f"{S25}/basic/transports#security-warning",
)
_e(
    "http.session_not_found",
    W,
    "HTTP 404: session expired or unknown",
    """The request carried an Mcp-Session-Id the server no longer knows (it restarted or the
    session expired). The client must start a new session with a fresh initialize.""",
    f"{S25}/basic/transports#session-management",
)
_e(
    "http.not_found",
    E,
    "HTTP 404 Not Found",
    """Nothing answers at this URL: usually a wrong endpoint path (for example /mcp vs /sse).""",
    f"{S25}/basic/transports#streamable-http",
)
_e(
    "http.method_not_allowed",
    W,
    "HTTP 405 for a POST",
    """The endpoint does not accept POST: the URL is not an MCP Streamable HTTP endpoint, or it is
    a legacy HTTP+SSE server (2024-11-05) that expects GET /sse first.""",
    f"{S25}/basic/transports#streamable-http",
)
_e(
    "http.optional_method_unsupported",
    I,
    "HTTP 405 for GET or DELETE",
    """The server does not offer a standalone GET stream or session termination by DELETE; both
    are optional (and 2026-07-28 servers accept POST only).""",
    f"{S25}/basic/transports#listening-for-messages-from-the-server",
)
_e(
    "http.not_acceptable",
    W,
    "HTTP 406 Not Acceptable",
    """The client's Accept header did not list both application/json and text/event-stream, as
    Streamable HTTP requires for a POST.""",
    f"{S25}/basic/transports#sending-messages-to-the-server",
)
_e(
    "http.conflict",
    W,
    "HTTP 409 Conflict",
    """Usually a second standalone GET stream for the same session, which the SDK server
    refuses.""",
    f"{S25}/basic/transports#listening-for-messages-from-the-server",
)
_e(
    "http.payload_too_large",
    E,
    "HTTP 413 Payload Too Large",
    """The request body exceeded the server's limit (4 MiB for the official SDK); the request
    never reached its handler.""",
    f"{RFC9110}#name-413-content-too-large",
)
_e(
    "http.unsupported_media_type",
    W,
    "HTTP 415 Unsupported Media Type",
    """The POST body's Content-Type was not application/json.""",
    f"{S25}/basic/transports#sending-messages-to-the-server",
)
_e(
    "http.misdirected",
    E,
    "HTTP 421 Misdirected Request",
    """The Host header named a host the server does not serve. The official SDK answers 421 for
    a Host it does not expect (DNS-rebinding protection), which is what happens when a proxy
    forwards its own Host instead of the upstream's.""",
    f"{RFC9110}#name-421-misdirected-request",
)
_e(
    "http.foreign_host",
    W,
    "The host addressed another host (refused by mcptape)",
    """The host's request carried a Host header that is not the relay's own address, so mcptape
    answered 421 itself (DNS-rebinding protection, as the SDK servers do) and nothing went
    upstream. The server never saw the request: this is about the host (a wrong URL, a proxy
    forwarding its own Host, or a page trying DNS rebinding). Point the host at the relay's
    address, or allow the name with ``--allow-host``.""",
    f"{RFC9110}#name-421-misdirected-request",
)
_e(
    "http.rate_limited",
    W,
    "HTTP 429 Too Many Requests",
    """The server is rate-limiting the client; Retry-After, when present, says for how long.""",
    "https://www.rfc-editor.org/rfc/rfc6585#section-4",
)
_e(
    "http.client_error",
    W,
    "Other HTTP 4xx",
    """A client-error status not covered by a more specific code.""",
    f"{RFC9110}#name-client-error-4xx",
)
_e(
    "http.server_error",
    E,
    "HTTP 5xx",
    """The server (or a gateway in front of it) failed. 503 from the official SDK means it has
    too many sessions.""",
    f"{RFC9110}#name-server-error-5xx",
)
_e(
    "http.upstream_error",
    E,
    "The upstream could not be reached or broke the connection",
    """The relay got no complete HTTP response from the server: connection refused or reset, a
    timeout, or a malformed response. The host saw a gateway error.""",
    f"{S25}/basic/transports#streamable-http",
)
_e(
    "http.status_mismatch",
    W,
    "HTTP status disagrees with the JSON-RPC answer",
    """2026-07-28 maps JSON-RPC errors to statuses: 400 for -32700, -32600, -32602, -32020,
    -32021 and -32022, 404 for -32601, and 200 for every other answer sent as plain JSON. In the
    initialize era a JSON-RPC result must not come with an error status. Intermediaries and
    clients that branch on the status misread an answer that breaks this.""",
    f"{S26}/basic/transports/streamable-http",
)
_e(
    "http.protocol_version_header_missing",
    W,
    "MCP-Protocol-Version header missing after initialize",
    """From 2025-06-18 on, a client must send MCP-Protocol-Version with the negotiated version
    on every HTTP request after initialize; a server that sees none assumes 2025-03-26.""",
    f"{S25}/basic/transports#protocol-version-header",
)
_e(
    "http.protocol_version_header_mismatch",
    E,
    "MCP-Protocol-Version header disagrees with the negotiated version",
    """The header names a different version than the one negotiated by initialize (initialize
    era) or the one in the request's io.modelcontextprotocol/protocolVersion (2026-07-28, where
    the server must reject the request with 400 and -32020).""",
    f"{S25}/basic/transports#protocol-version-header",
)
_e(
    "http.session_id_missing",
    E,
    "Mcp-Session-Id missing after initialize",
    """The server assigned a session id in its initialize response; every later request of the
    session must carry it. Servers answer 400 when it is missing.""",
    f"{S25}/basic/transports#session-management",
)
_e(
    "http.routing_header_mismatch",
    E,
    "Mcp-Method / Mcp-Name / Mcp-Param-* disagree with the body",
    """2026-07-28 Streamable HTTP mirrors the JSON-RPC method into Mcp-Method, the tool or
    prompt name or resource URI into Mcp-Name, and each tools/call argument whose schema carries
    x-mcp-header into Mcp-Param-<Name> (values that are not plain ASCII as =?base64?…?=).
    Intermediaries route on these headers, so a missing, repeated or different value must be
    rejected with 400 and -32020.""",
    f"{S26}/basic/transports/streamable-http#custom-headers-from-tool-parameters",
)

# ------------------------------------------------------------------------------ transport
_e(
    "transport.server_noise",
    E,
    "Server sent something that is not JSON",
    """A line on the server's stdout (or an SSE event, or a 2xx HTTP body) that is not JSON.
    On stdio the server must not write anything to stdout that is not an MCP message: a stray
    print() or a library banner corrupts the stream, and some clients give up on it.""",
    f"{S25}/basic/transports#stdio",
)
_e(
    "transport.host_noise",
    E,
    "Host sent something that is not JSON",
    """A line the host wrote to the server's stdin (or an HTTP body it posted) that is not JSON.
    The official SDK server drops such lines silently, so the host never learns why nothing
    happened.""",
    f"{S25}/basic/transports#stdio",
)
_e(
    "transport.invalid_utf8",
    E,
    "Message bytes are not valid UTF-8",
    """JSON-RPC messages must be UTF-8. Invalid bytes break strict decoders: an SDK client
    reading with errors="strict" fails on the line and may drop the connection.""",
    f"{S25}/basic/transports",
)
_e(
    "jsonrpc.invalid_message",
    E,
    "JSON that is not a JSON-RPC message",
    """Valid JSON, but not a JSON-RPC 2.0 request, notification or response: missing "jsonrpc":
    "2.0", a null or non-scalar request id, both result and error, or neither.""",
    f"{S25}/basic#messages",
)
_e(
    "jsonrpc.batch_not_allowed",
    E,
    "JSON-RPC batch outside 2025-03-26",
    """Only protocol revision 2025-03-26 allowed JSON-RPC batches (arrays of messages); 2025-06-18
    removed them again and later revisions do not accept them.""",
    "https://modelcontextprotocol.io/specification/2025-06-18/changelog",
)
_e(
    "transport.incomplete_frame",
    W,
    "Message cut short",
    """The stream ended in the middle of a message: a last stdio line without its newline, so
    the receiver never got a complete message.""",
    f"{S25}/basic/transports#stdio",
)
_e(
    "transport.oversize",
    W,
    "Message larger than common limits",
    """An SSE event over 1 MiB (the official SDK client's default per-event limit) or a POST
    body over 4 MiB (the official SDK server's limit, answered with 413). Other peers with the
    same defaults will fail on it.""",
    f"{S25}/basic/transports#streamable-http",
)
_e(
    "transport.server_crashed",
    E,
    "Server process crashed",
    """The server exited with a non-zero status or died of a signal nobody sent it through the
    relay. The detail shows the exit status and the last lines it wrote on stderr.""",
    f"{S25}/basic/lifecycle#shutdown",
)
_e(
    "transport.exit_with_pending",
    E,
    "Server exited while requests were pending",
    """The server process ended while requests were still waiting for an answer; those answers
    are lost and the host saw its calls fail.""",
    f"{S25}/basic/lifecycle#shutdown",
)
_e(
    "transport.host_ended_with_pending",
    I,
    "Host stopped the server while its requests were pending",
    """The host ended a stdio session by a signal (SIGTERM, SIGINT) that mcptape forwarded to
    the server, while some of the host's own requests were still waiting for an answer. Many
    hosts close a server this way; the server did not crash and no answer was lost in transit —
    the host stopped waiting.""",
    f"{S25}/basic/lifecycle#shutdown",
)
_e(
    "transport.host_disconnected",
    W,
    "Host disconnected while a request was pending",
    """The host closed the HTTP connection that was to carry the answer before it arrived. In
    the initialize era a disconnect is not a cancellation: the server may still finish the work
    and the client should resume the stream or cancel explicitly.""",
    f"{S25}/basic/transports#resumability-and-redelivery",
)
_e(
    "transport.sse_ended_early",
    W,
    "SSE stream ended before the response",
    """The server closed the SSE response stream of a POST before it sent the JSON-RPC response
    for the request, and the response never arrived on a resumed stream either.""",
    f"{S25}/basic/transports#sending-messages-to-the-server",
)

# ------------------------------------------------------------------------------ exchanges
_e(
    "exchange.no_response",
    W,
    "Request never answered",
    """The session ended without a response to this request, and it was not cancelled: the
    receiver dropped it, or the sender closed the connection while waiting.""",
    f"{S25}/basic#responses",
)
_e(
    "exchange.unknown_response",
    E,
    "Response to an unknown request id",
    """A response whose id matches no request sent in the other direction in this session. The
    receiver cannot deliver it; usually an id rewritten by an intermediary, or a response sent
    to the wrong session.""",
    f"{S25}/basic#responses",
)
_e(
    "exchange.duplicate_response",
    E,
    "Second response to the same request",
    """A request was answered more than once. JSON-RPC allows exactly one response per request;
    the second one is dropped by conforming receivers.""",
    f"{JSONRPC}#response_object",
)
_e(
    "exchange.id_reused_in_flight",
    E,
    "Request id reused while the first request was in flight",
    """Two requests from the same side with the same id were pending at once, so their responses
    cannot be told apart. Ids must be unique per sender (1 and "1" are different ids).""",
    f"{S25}/basic#requests",
)
_e(
    "exchange.id_reused",
    W,
    "Request id reused within the session",
    """Unlike base JSON-RPC, MCP forbids a sender to reuse a request id within a session, even
    after the first request completed (initialize era).""",
    f"{S25}/basic#requests",
)
_e(
    "exchange.cancelled",
    I,
    "Request cancelled, no response",
    """The sender cancelled the request (notifications/cancelled, or in 2026-07-28 HTTP by
    closing the request's connection) and the receiver, as it should, sent no response.""",
    f"{S25}/basic/utilities/cancellation",
)
_e(
    "exchange.slow",
    I,
    "Slow response",
    """The response took longer than 10 seconds. Not a fault by itself; see mcptape stats for the
    latency distribution per method.""",
    f"{S25}/basic/lifecycle#timeouts",
)
_e(
    "notification.cancel_unknown",
    W,
    "Cancellation for an unknown request",
    """notifications/cancelled named a request id this side never sent. It must name a request
    previously issued in the same direction.""",
    f"{S25}/basic/utilities/cancellation",
)
_e(
    "notification.cancel_initialize",
    E,
    "initialize cancelled",
    """The client cancelled its initialize request, which the spec forbids.""",
    f"{S25}/basic/utilities/cancellation",
)
_e(
    "notification.progress_unknown",
    W,
    "Progress for an unknown token",
    """notifications/progress carried a progressToken that no request of the other side ever
    offered in its _meta.""",
    f"{S25}/basic/utilities/progress",
)
_e(
    "notification.progress_after_response",
    W,
    "Progress after the request completed",
    """Progress notifications must only reference tokens of operations still in progress; this
    one arrived after the request's response.""",
    f"{S25}/basic/utilities/progress",
)
_e(
    "notification.progress_not_increasing",
    W,
    "Progress value did not increase",
    """The progress value must increase with each notification for the same token.""",
    f"{S25}/basic/utilities/progress",
)

# ------------------------------------------------------------------------------ lifecycle
_e(
    "lifecycle.request_before_initialize",
    W,
    "Request before initialize completed",
    """In the initialize era the client should send nothing but pings until the server has
    answered initialize; a request that comes before (or in a session without any initialize)
    reaches a server that has not negotiated anything yet. A request the client sent after its
    own notifications/initialized, or stamped within 100 ms of the initialize result (the relay
    timestamps each direction separately), is given the benefit of the doubt.""",
    f"{S25}/basic/lifecycle#initialization",
)
_e(
    "lifecycle.server_request_before_initialized",
    W,
    "Server request before notifications/initialized",
    """The server should not send requests other than pings before it received the client's
    notifications/initialized (reported when it came more than 100 ms before it, beyond the
    relay's timestamp jitter between directions).""",
    f"{S25}/basic/lifecycle#initialization",
)
_e(
    "lifecycle.initialized_missing",
    E,
    "notifications/initialized never sent",
    """After a successful initialize the client must send notifications/initialized. Servers may
    refuse or delay everything until it arrives.""",
    f"{S25}/basic/lifecycle#initialization",
)
_e(
    "lifecycle.unknown_protocol_version",
    W,
    "Unknown protocol version negotiated",
    """The protocol version in use is none of the published revisions (2024-11-05, 2025-03-26,
    2025-06-18, 2025-11-25, 2026-07-28); peers may disagree about what it means.""",
    f"{S25}/basic/lifecycle#version-negotiation",
)
_e(
    "envelope.missing",
    E,
    "Request without the 2026-07-28 _meta envelope",
    """In 2026-07-28 every request must carry params._meta with io.modelcontextprotocol/
    protocolVersion and io.modelcontextprotocol/clientCapabilities; servers answer -32602
    without them.""",
    f"{S26}/basic",
)
_e(
    "result.missing_result_type",
    W,
    "Result without resultType",
    """Servers implementing 2026-07-28 must include resultType ("complete" or
    "input_required") in every result; clients then have to guess "complete".""",
    f"{S26}/basic/patterns/mrtr",
)
_e(
    "capability.server_not_advertised",
    W,
    "Client used a server feature that was not advertised",
    """The client called a method (tools/*, resources/*, prompts/*, completion/complete,
    logging/setLevel, resources/subscribe) whose capability the server did not declare in its
    initialize or server/discover result.""",
    f"{S25}/basic/lifecycle#capability-negotiation",
)
_e(
    "capability.client_not_advertised",
    W,
    "Server used a client feature that was not advertised",
    """The server sent sampling/createMessage, elicitation/create or roots/list (standalone, or
    as an MRTR inputRequest) although the client did not declare sampling, elicitation (in that
    mode) or roots.""",
    f"{S25}/basic/lifecycle#capability-negotiation",
)
_e(
    "capability.notification_not_advertised",
    W,
    "Notification without the capability that announces it",
    """A list_changed notification from a side that declared listChanged: false (or nothing),
    or resources/updated from a server without resources.subscribe.""",
    f"{S25}/basic/lifecycle#capability-negotiation",
)
_e(
    "capability.logging_not_advertised",
    I,
    "Log messages without the logging capability",
    """The spec says a server that emits notifications/message must declare the logging
    capability. Reported as info only: the official SDK servers (2.x) send logs without
    declaring it and every client known to us accepts them.""",
    f"{S25}/server/utilities/logging",
)
_e(
    "log.without_opt_in",
    W,
    "Log message the request did not opt in to",
    """2026-07-28: a server may send notifications/message for a request only if the request's
    io.modelcontextprotocol/logLevel asked for that level or a lower one; without it the server
    must not log to the client at all.""",
    f"{S26}/basic",
)
_e(
    "tools.invalid_x_mcp_header",
    E,
    "Tool schema carries an invalid x-mcp-header",
    """An x-mcp-header annotation must sit on a property reachable through properties keys only,
    on a string, integer or boolean property, name an RFC 9110 token, and be unique
    (case-insensitively) within the schema. Clients must reject a tool that breaks this.""",
    f"{S26}/basic/transports/streamable-http#custom-headers-from-tool-parameters",
)
_e(
    "list.duplicate",
    W,
    "Duplicate entry in a list",
    """tools/list, prompts/list, resources/list or resources/templates/list returned the same
    tool name, prompt name, resource URI or URI template twice (within one page or across the
    pages of one walk); clients keep one of them arbitrarily.""",
    f"{S25}/server/tools#listing-tools",
)
_e(
    "pagination.unknown_cursor",
    W,
    "Cursor not returned verbatim",
    """The client sent a cursor that the server never returned as nextCursor for this list
    method. Cursors are opaque: they must be sent back exactly as received.""",
    f"{S25}/server/utilities/pagination",
)
_e(
    "pagination.empty_cursor_dropped",
    W,
    "Empty-string nextCursor treated as the end",
    """The server returned nextCursor: "" and the client never asked for that page. A present
    nextCursor, even the empty string, means more results may exist; a client that tests the
    cursor for truthiness silently misses them.""",
    f"{S25}/server/utilities/pagination",
)
_e(
    "mrtr.chain_incomplete",
    W,
    "MRTR conversation never completed",
    """The server answered resultType: "input_required" and the client never retried, so the
    operation never finished (the user declined to answer, the client gave up after its round
    limit, or it does not implement MRTR).""",
    f"{S26}/basic/patterns/mrtr",
)
_e(
    "mrtr.unmatched_retry",
    W,
    "MRTR retry that matches no input_required result",
    """A request carried inputResponses or requestState that no earlier input_required result
    asked for, or a requestState that differs from the one the server sent. The client must echo
    requestState verbatim.""",
    f"{S26}/basic/patterns/mrtr",
)
_e(
    "mrtr.responses_mismatch",
    W,
    "inputResponses do not answer the inputRequests",
    """The retry must carry one inputResponses entry for each key of the inputRequests the
    server sent; some were missing (or extra keys were sent).""",
    f"{S26}/basic/patterns/mrtr",
)
_e(
    "mrtr.in_initialize_era",
    E,
    "input_required result in an initialize-era session",
    """resultType: "input_required" exists only in 2026-07-28. A client of an earlier revision
    reads the result as complete and the operation silently fails.""",
    f"{S26}/basic/patterns/mrtr",
)
_e(
    "task.unfinished",
    W,
    "Task still running when the session ended",
    """A task was created (its handle answered the request) but no terminal status (completed,
    failed, cancelled) was seen before the session ended: the last status was working or
    input_required. The requestor stopped polling, or the session was cut; the result was
    never read.""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "task.unknown_id",
    W,
    "Poll, result, update or cancel for an unknown task",
    """A tasks/get, tasks/result, tasks/update or tasks/cancel named a taskId that no answer of
    this session created and no tasks/list named. Task ids are generated by the receiver; a
    requestor can only know the ids it was given (a recording that began mid-session can also
    show this).""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "task.not_advertised",
    W,
    "Task-augmented request the receiver did not advertise",
    """2025-11-25: a request carried params.task although the receiver's capabilities.tasks.requests
    does not list that request (tools.call for a server; sampling.createMessage or
    elicitation.create for a client). 2026-07-28: the server answered resultType task to a
    request whose clientCapabilities did not declare the io.modelcontextprotocol/tasks
    extension; a client that did not opt in cannot read the handle.""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "task.poll_too_fast",
    I,
    "Task polled much faster than its pollInterval",
    """The requestor polled tasks/get several times sooner than half the pollInterval (2025-11-25;
    pollIntervalMs in the 2026-07-28 tasks extension) the receiver suggested. Requestors should
    respect it; fast polling costs the server work for no news.""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "task.status_after_terminal",
    E,
    "Task status changed after a terminal status",
    """A task reported completed, failed or cancelled, and later a different status (in a
    tasks/get answer or a status notification). Terminal statuses must not change; a requestor
    that already took the result may act on a state that no longer holds.""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "task.untracked",
    I,
    "Some tasks were not followed to their end",
    """More tasks were open at once than the analysis follows (MAX_TASKS_TRACKED); the oldest
    were forgotten, so their later polls and results are not linked or checked.""",
    f"{S25}/basic/utilities/tasks",
)
_e(
    "extension.undeclared",
    W,
    "Extension method used without both sides declaring the extension",
    """2026-07-28: a method of an extension (tasks/get, tasks/update, tasks/cancel of
    io.modelcontextprotocol/tasks) was used although the client's per-request capabilities or
    the server's capabilities did not declare the extension in capabilities.extensions
    (SEP-2133). A strict receiver refuses it with -32021 (2026-07-28) or -32601.""",
    "https://modelcontextprotocol.github.io/ext-tasks/specification/2026-07-28/tasks.html",
)
_e(
    "skill.digest_mismatch",
    W,
    "A skill file served differs from its entry's digest or size",
    """2026-07-28 skills extension (io.modelcontextprotocol/skills, SEP-2640): a skills/list or
    skills/get entry listed this file with the SHA-256 digest and size of its raw bytes, and a
    later resources/read served other bytes (a text content's UTF-8, a blob decoded). A host
    must verify each skill file it reads against its entry and must not use content that does
    not match: it is corrupted, tampered with, or the skill changed after it was listed.""",
    "https://github.com/modelcontextprotocol/ext-skills/blob/main/specification/stable/skills.mdx",
)
_e(
    "oauth.resource_mismatch",
    E,
    "Protected-resource metadata names another resource",
    """The resource server's OAuth protected-resource metadata (RFC 9728) gives a ``resource``
    that is not the MCP server URL the client connected to. A conforming client must refuse
    the metadata (the SDKs do: authorization stops before any token is requested), and tokens
    bound to the named resource would not be accepted here anyway. Usually a server behind a
    proxy or load balancer configured with its internal URL.""",
    f"{S25}/basic/authorization",
)
_e(
    "oauth.missing_www_authenticate",
    W,
    "401 without WWW-Authenticate",
    """An MCP endpoint answered 401 without a ``WWW-Authenticate`` header. Servers must say how
    to authorize there (``Bearer resource_metadata=…``): without it a client can only guess the
    protected-resource metadata location, and many give up.""",
    f"{S25}/basic/authorization",
)
_e(
    "oauth.token_error",
    W,
    "Token endpoint refused the request",
    """The authorization server's token endpoint answered with an error (``invalid_grant``,
    ``invalid_client``, ``invalid_scope``…): an authorization code or refresh token was not
    exchanged, so the MCP requests that follow go unauthorized. The ``error`` and
    ``error_description`` of the answer are in the finding.""",
    "https://www.rfc-editor.org/rfc/rfc6749#section-5.2",
)
_e(
    "oauth.unauthorized_loop",
    E,
    "Repeated 401 with a token presented",
    """The client kept presenting a bearer token that the MCP server refused with 401, several
    times in a row, with no successful request in between: typically an expired token that is
    never refreshed, or a token issued for another resource. The host loops or stalls instead
    of re-authorizing.""",
    f"{S25}/basic/authorization",
)
_e(
    "forward.upstream_tls",
    E,
    "The upstream's TLS handshake failed",
    """Written by the forward proxy (mitmproxy addon), not the analyzer: mitmproxy could not
    establish TLS with the MCP server (certificate expired, self-signed or for another host, or
    signed by a private CA mitmproxy was not told to trust). The host got mitmproxy's error
    response; the exchange's error says what the handshake reported.""",
    "https://docs.mitmproxy.org/stable/concepts/certificates/",
)

# ------------------------------------------------------------------------------ injected faults
# Written by the relays (``mcptape record --fault``) and the mock, never by the analyzer: each
# marks a fault mcptape caused on purpose (docs/faults.md), never a failure of the server.
_INJECT_WHAT = {
    "delay": (
        "A frame was delayed on purpose",
        """A fault rule held this frame for the time in the finding's detail before passing it
        on (``delay ms=… jitter=…``). The peer saw a slow server (or a slow host); the frame
        itself is unchanged.""",
    ),
    "throttle": (
        "A frame was throttled on purpose",
        """A fault rule wrote this frame at a limited rate (``throttle bps=…``), the way a slow
        link would. The bytes are unchanged; only their pace was.""",
    ),
    "drop": (
        "A frame was dropped on purpose",
        """A fault rule kept this frame from its receiver (``drop``): a request the server never
        saw, or a response or notification the host never got. The recording keeps the frame
        the sender really sent; nothing was delivered in its place.""",
    ),
    "error": (
        "A JSON-RPC error was injected",
        """A fault rule answered in a peer's place with a JSON-RPC error (``error code=…
        message=…``): a request answered without reaching the server, or a response replaced.
        The injected error is on the ``inject`` channel beside the frame the sender really
        sent.""",
    ),
    "tool_error": (
        "A failing tool result was injected",
        """A fault rule answered a ``tools/call`` with an ``isError: true`` result in the
        server's place (``tool-error text=…``). The injected result is on the ``inject``
        channel.""",
    ),
    "http": (
        "An HTTP error status was injected",
        """A fault rule answered an HTTP request with a status and headers in the server's place
        (``http status=429 header=Retry-After:2``, a 404 for an expired session, a 401 with
        ``WWW-Authenticate``, a 503). The server never saw the request.""",
    ),
    "corrupt": (
        "A frame was corrupted on purpose",
        """A fault rule delivered this frame broken (``corrupt mode=truncate|cut-utf8|
        invalid-json``). The frame the sender really sent and the broken bytes the receiver got
        are both recorded (the latter on the ``inject`` channel).""",
    ),
    "disconnect": (
        "The connection was cut on purpose",
        """A fault rule ended the connection at this frame: the server was killed with a signal
        or its stdio was closed (stdio), or the HTTP connection was reset or an SSE stream ended
        (HTTP). What follows — the server's exit, the host's lost connection — is mcptape's
        doing, not a crash.""",
    ),
    "duplicate": (
        "A frame was delivered twice on purpose",
        """A fault rule delivered this frame a second time (``duplicate``); the copy is on the
        ``inject`` channel.""",
    ),
    "reorder": (
        "A frame was delivered out of order on purpose",
        """A fault rule held this frame and delivered it after the next frame in its direction
        (``reorder``); the late delivery is on the ``inject`` channel.""",
    ),
    "intercept": (
        "A message was held for a person (intercept)",
        """An intercept rule (``--intercept``, docs/intercept.md) held this message until a
        person decided: forwarded as it was, forwarded edited, answered in the peer's place or
        dropped — or forwarded unchanged when nobody decided in time. The detail says which,
        who decided, and the intercept's number; an edit or an answer is on the ``inject``
        channel beside the message the sender really sent.""",
    ),
}
for _action, (_title, _text) in _INJECT_WHAT.items():
    _e(f"inject.{_action}", I, _title, _text, "")
_e(
    "inject.reaction",
    I,
    "How the host reacted to an injected fault",
    """Reported by ``mcptape check`` (not stored): what the host did after a fault mcptape
    injected — retried the request, cancelled it (``notifications/cancelled``), or moved on to
    other requests. Which of them is right depends on the fault; the point is to see it.""",
    "",
)
_e(
    "inject.ended_with_pending",
    I,
    "A fault rule ended the session while requests were pending",
    """Reported by the analyzer: a ``disconnect`` fault rule (``mode=kill`` or ``close-stdin``)
    cut the connection while some of the host's requests were still waiting for an answer. The
    recording shows it as mcptape's doing: the server's exit or signal that follows is not a
    crash, and the host did not stop the server — the answers were never going to come.""",
    "",
)
_e(
    "inject.host_silent",
    W,
    "The host sent nothing after an injected fault",
    """Reported by ``mcptape check`` (not stored): after a fault mcptape injected on a request
    (a dropped, corrupted or replaced answer), the host sent nothing more on the connection — no
    retry, no cancellation, no other request. A host without a timeout hangs here for ever when
    a real server fails the same way.""",
    "",
)

#: Every code, in catalogue order.
CATALOGUE: dict[str, Entry] = {e.code: e for e in _ENTRIES}
if len(CATALOGUE) != len(_ENTRIES):  # pragma: no cover - guards an editing mistake
    raise RuntimeError("duplicate finding code in the catalogue")

#: Codes written by other parts of mcptape; the analyzer never produces them.
FOREIGN_CODES = frozenset(
    {
        "recorder.gap",
        "recorder.undecodable",
        "recorder.value_escaped",
        "recorder.internal_error",
        "recorder.body_cut",
        "forward.upstream_tls",
    }
    | {e.code for e in _ENTRIES if e.area == "inject"}
)
SUMMARY_CODE = "analysis.summary"

AREAS: dict[str, str] = {
    "analysis": "Bookkeeping",
    "recorder": "Bookkeeping",
    "jsonrpc": "JSON-RPC messages and error codes",
    "mcp": "MCP error codes",
    "tool": "Tool results",
    "http": "HTTP",
    "transport": "Transport",
    "exchange": "Exchanges",
    "notification": "Notifications",
    "lifecycle": "Lifecycle",
    "envelope": "2026-07-28 envelope and results",
    "result": "2026-07-28 envelope and results",
    "capability": "Capabilities",
    "log": "Capabilities",
    "tools": "Lists and pagination",
    "list": "Lists and pagination",
    "pagination": "Lists and pagination",
    "mrtr": "Multi round-trip requests (MRTR)",
    "task": "Tasks and extensions",
    "extension": "Tasks and extensions",
    "inject": "Injected faults (docs/faults.md)",
}


def at_least(severity: str, threshold: str) -> bool:
    """True when ``severity`` is ``threshold`` or worse."""
    return SEVERITY_RANK.get(severity, 0) >= SEVERITY_RANK.get(threshold, 0)


def markdown() -> str:
    """``docs/taxonomy.md``: the catalogue for people, generated so that it cannot drift."""
    lines = [
        "# Finding taxonomy",
        "",
        "<!-- Generated by `python -m mcp_proxy.analysis.catalogue --markdown`;"
        " do not edit by hand. -->",
        "",
        "Every finding mcptape reports has a stable code, a severity, a one-line title, the",
        "frames that prove it and a reference to the rule it is about. Codes never change",
        "meaning; new codes are added as the analysis grows.",
        "",
        "- **error**: a rule the specification makes mandatory was broken, or data was lost.",
        "- **warning**: a request failed, a recommendation was ignored, or a pattern that breaks",
        "  real clients was seen.",
        "- **info**: a fact worth seeing that is not a fault.",
        "",
        "`mcptape check SESSION --fail-on warning` exits non-zero when a session has findings of",
        "that severity or worse (see [cli-exit-codes.md](cli-exit-codes.md)).",
        "",
        "| Code | Severity | Title |",
        "| --- | --- | --- |",
    ]
    for e in _ENTRIES:
        lines.append(f"| [`{e.code}`](#{_anchor(e.code)}) | {e.severity.value} | {e.title} |")
    current = None
    for e in _ENTRIES:
        heading = AREAS.get(e.area, e.area)
        if heading != current:
            current = heading
            lines += ["", f"## {heading}"]
        lines += [
            "",
            f"### {e.code}",
            "",
            f"**{e.severity.value}** — {e.title}",
            "",
            e.explanation,
            "",
            f"Reference: <{e.spec}>"
            if e.spec
            else "Reference: mcptape itself (not a protocol rule).",
        ]
    return "\n".join(lines) + "\n"


def _anchor(code: str) -> str:
    """The GitHub-style anchor of a ``### code`` heading (dots and such dropped)."""
    return "".join(ch for ch in code.lower() if ch.isalnum() or ch in "-_ ").replace(" ", "-")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if args == ["--codes"]:
        for e in _ENTRIES:
            print(f"{e.code}\t{e.severity.value}\t{e.title}")
        return 0
    print("usage: python -m mcp_proxy.analysis.catalogue --markdown | --codes", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
