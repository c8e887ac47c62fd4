"""MCP protocol constants: eras, versions, header names, error codes — one home for each.

The relay, the recorder's handshake tracker, the analysis, replay and mock all speak the same
wire format; when a constant lives in two places the two drift (the redesign issue counted era
and version constants twice). This module is *core*: it imports nothing of the project, so any
layer may import it.

Facts are read off the official Python SDK (``mcp_types/version.py``, the Streamable HTTP
transport) and the specification; see ``/docs/taxonomy.md`` for what each error code means.
"""

from __future__ import annotations

from typing import Final

# ------------------------------------------------------------------------------ versions & eras
#: Every published protocol revision, oldest first (order matters: "from 2025-06-18 on").
KNOWN_VERSIONS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
#: Revisions negotiated by the ``initialize`` handshake.
HANDSHAKE_VERSIONS: Final = frozenset(KNOWN_VERSIONS[:4])
#: Revisions of the sessionless era (a ``_meta`` envelope on every request, ``server/discover``).
MODERN_VERSIONS: Final = frozenset({"2026-07-28"})
#: The version the SDK assumes when an HTTP request carries no ``MCP-Protocol-Version``.
DEFAULT_NEGOTIATED_VERSION: Final = "2025-03-26"
#: The only revision that allowed JSON-RPC batches.
BATCH_VERSION: Final = "2025-03-26"

#: The era names stored in ``sessions.era``.
ERA_INITIALIZE: Final = "initialize"
ERA_MODERN: Final = "2026-07-28"


def era_of(version: str | None) -> str | None:
    """The era a protocol version belongs to (a future, unknown revision counts as modern)."""
    if version is None:
        return None
    if version in MODERN_VERSIONS or version > "2026":
        return ERA_MODERN
    return ERA_INITIALIZE


def version_at_least(version: str | None, floor: str) -> bool:
    """True when ``version`` is a known revision no older than ``floor`` (also known)."""
    if version not in KNOWN_VERSIONS or floor not in KNOWN_VERSIONS:
        return False
    return KNOWN_VERSIONS.index(version) >= KNOWN_VERSIONS.index(floor)


# ------------------------------------------------------------------------------ _meta envelope
#: Prefix of the reserved ``_meta`` keys (2026-07-28 envelope, serverInfo in results, …).
META_PREFIX: Final = "io.modelcontextprotocol/"
META_PROTOCOL_VERSION: Final = META_PREFIX + "protocolVersion"
META_CLIENT_INFO: Final = META_PREFIX + "clientInfo"
META_CLIENT_CAPABILITIES: Final = META_PREFIX + "clientCapabilities"
META_LOG_LEVEL: Final = META_PREFIX + "logLevel"
META_SERVER_INFO: Final = META_PREFIX + "serverInfo"
META_SUBSCRIPTION_ID: Final = META_PREFIX + "subscriptionId"

# ------------------------------------------------------------------------------ methods
INITIALIZE: Final = "initialize"
INITIALIZED: Final = "notifications/initialized"
DISCOVER: Final = "server/discover"
PING: Final = "ping"
CANCELLED: Final = "notifications/cancelled"
PROGRESS: Final = "notifications/progress"
LOG_MESSAGE: Final = "notifications/message"
LISTEN: Final = "subscriptions/listen"
#: Methods whose ``params`` name the thing acted on (mirrored into ``Mcp-Name`` in 2026-07-28).
NAME_PARAM: Final = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "resources/subscribe": "uri",
    "resources/unsubscribe": "uri",
}
#: Log levels, least severe first (RFC 5424 order).
LOG_LEVELS: Final = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

# ------------------------------------------------------------------------------ HTTP headers
#: Header names in their canonical spelling (compare lower-cased: HTTP names are case-blind).
H_SESSION_ID: Final = "Mcp-Session-Id"
H_PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
H_METHOD: Final = "Mcp-Method"
H_NAME: Final = "Mcp-Name"
H_PARAM_PREFIX: Final = "Mcp-Param-"
H_LAST_EVENT_ID: Final = "Last-Event-ID"
#: Set by the HTTP relay on a response it made itself (502/504) instead of the upstream.
H_MCPTAPE_ERROR: Final = "X-Mcptape-Error"
#: The 2026-07-28 routing headers that mirror the body.
ROUTING_HEADERS: Final = (H_PROTOCOL_VERSION, H_METHOD, H_NAME)

# ------------------------------------------------------------------------------ error codes
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602
INTERNAL_ERROR: Final = -32603
HEADER_MISMATCH: Final = -32020  # 2026-07-28 Streamable HTTP only
MISSING_CLIENT_CAPABILITY: Final = -32021
UNSUPPORTED_PROTOCOL_VERSION: Final = -32022
URL_ELICITATION_REQUIRED: Final = -32042  # initialize era; retired in 2026-07-28
REQUEST_CANCELLED: Final = -32800
RESOURCE_NOT_FOUND_LEGACY: Final = -32002  # up to 2025-06-18

#: Short names of the codes JSON-RPC and MCP define.
ERROR_NAMES: Final = {
    PARSE_ERROR: "Parse error",
    INVALID_REQUEST: "Invalid request",
    METHOD_NOT_FOUND: "Method not found",
    INVALID_PARAMS: "Invalid params",
    INTERNAL_ERROR: "Internal error",
    HEADER_MISMATCH: "Header mismatch",
    MISSING_CLIENT_CAPABILITY: "Missing required client capability",
    UNSUPPORTED_PROTOCOL_VERSION: "Unsupported protocol version",
    URL_ELICITATION_REQUIRED: "URL elicitation required",
    REQUEST_CANCELLED: "Request cancelled",
    -32000: "Server error",
    -32001: "Server error",
    RESOURCE_NOT_FOUND_LEGACY: "Resource not found (up to 2025-06-18)",
}

#: 2026-07-28 Streamable HTTP: the status a JSON-RPC error must come with (any other code: 200).
MODERN_ERROR_STATUS: Final = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

#: Transports as stored in ``sessions.transport``.
TRANSPORT_STDIO: Final = "stdio"
TRANSPORT_HTTP: Final = "http"
TRANSPORT_SSE: Final = "sse"
