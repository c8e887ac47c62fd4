"""One MCP client layer for replay and mock: the header rule and the message codec, sans I/O.

``mcptape replay --upstream`` plays a host over Streamable HTTP, and ``mcptape mock`` forwards
misses to a live HTTP server (record modes). Both are MCP clients speaking the same wire format,
so both take their headers from one rule, :meth:`ClientState.headers_for`, and read answers
with the same codec (:func:`messages_in`). Only the I/O differs (threads with ``http.client``
for replay, which must keep the recorded order on the wire; aiohttp for the asyncio mock).

The header rule is the SDK client's (``mcp.client.session``, 2.3):

- always ``Accept: application/json, text/event-stream`` and ``Content-Type: application/json``;
- ``Mcp-Session-Id`` once a response handed one out (initialize era, stateful servers);
- ``initialize`` carries nothing else;
- ``MCP-Protocol-Version``: the negotiated version (``initialize`` result), else the one the
  message's ``_meta`` names (2026-07-28 era), else what the recorded exchange carried, else the
  recorded session's version;
- 2026-07-28 era: ``Mcp-Method``, ``Mcp-Name`` (the name/uri of name-bearing methods, encoded
  as ``=?base64?…?=`` when not plain printable ASCII) and ``Mcp-Param-<Token>`` for ``tools/call``
  arguments whose schema carries ``x-mcp-header`` (learned from ``tools/list`` results, as the
  SDK does). When the message was recorded over HTTP, the recorded ``Mcp-*`` values are sent
  verbatim instead: a replay repeats what the host sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ACCEPT = "application/json, text/event-stream"
#: The first protocol version of the sessionless era (routing headers, no ``initialize``).
MODERN_VERSION = "2026-07-28"
#: Request header names a replay copies from the recorded exchange (lower case).
COPIED_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")
META_VERSION = "io.modelcontextprotocol/protocolVersion"


def compact(msg: Any) -> bytes:
    """A message as the SDK writes it: compact JSON, UTF-8, no trailing newline."""
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


def messages_in(data: bytes | bytearray) -> list[dict[str, Any]]:
    """The JSON-RPC messages of one body or SSE event (a batch gives several; junk gives none).

    A body nested too deep for the parser is no message at all rather than a crash: the live
    side then simply did not answer, which replay reports as a timeout.
    """
    if not data.strip():
        return []
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        return []
    items = parsed if isinstance(parsed, list) else [parsed]
    return [m for m in items if isinstance(m, dict)]


def is_modern(version: str | None) -> bool:
    return isinstance(version, str) and version >= MODERN_VERSION


def _recorded_pairs(pairs: Any) -> dict[str, str]:
    if isinstance(pairs, dict):
        pairs = list(pairs.items())
    out: dict[str, str] = {}
    for p in pairs or []:
        if isinstance(p, list | tuple) and len(p) == 2:
            name = str(p[0]).lower()
            if name in COPIED_HEADERS or name.startswith("mcp-param-"):
                out[name] = str(p[1])
    return out


def recorded_request_headers(
    frames: Iterable[dict[str, Any]], exchanges: Iterable[dict[str, Any]]
) -> dict[bytes, dict[str, str]]:
    """Recorded host frame bytes (stripped) → the MCP headers its HTTP request carried."""
    by_ex = {ex["id"]: ex for ex in exchanges}
    out: dict[bytes, dict[str, str]] = {}
    for f in frames:
        ex = by_ex.get(f.get("http_exchange_id"))
        if ex is not None and f.get("direction") == "c2s":
            out[bytes(f["raw"]).strip()] = _recorded_pairs(ex.get("request_headers"))
    return out


@dataclass
class ClientState:
    """What one MCP client connection knows: session id, negotiated version, header schemas."""

    session_id: str | None = None
    version: str | None = None
    #: The recorded session's protocol version (a fallback for a sessionless replay).
    recorded_version: str | None = None
    #: Recorded frame bytes → the MCP headers its request carried (replays of HTTP recordings).
    recorded: dict[bytes, dict[str, str]] = field(default_factory=dict)
    #: Tool name → its ``x-mcp-header`` map (property path → token), from ``tools/list``.
    param_maps: dict[str, dict[tuple[str, ...], str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ requests
    def headers_for(self, msg: Any, raw: bytes | None = None) -> dict[str, str]:
        """The HTTP headers to POST ``msg`` with (``raw``: its recorded bytes, if any)."""
        headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        method = msg.get("method") if isinstance(msg, dict) else None
        if method == "initialize":
            return headers
        recorded = self.recorded.get(raw.strip()) if raw is not None else None
        params = msg.get("params") if isinstance(msg, dict) else None
        params = params if isinstance(params, dict) else {}
        meta = params.get("_meta")
        meta_version = meta.get(META_VERSION) if isinstance(meta, dict) else None
        version = (
            self.version
            or (meta_version if isinstance(meta_version, str) else None)
            or (recorded or {}).get("mcp-protocol-version")
            or (self.recorded_version if is_modern(self.recorded_version) else None)
        )
        if version:
            headers["MCP-Protocol-Version"] = version
        if not is_modern(version) or not isinstance(method, str):
            return headers
        if recorded and "mcp-method" in recorded:
            for name, value in recorded.items():
                if name != "mcp-protocol-version":
                    headers[_title(name)] = value
            return headers
        headers.update(self._routing_headers(method, params))
        return headers

    def _routing_headers(self, method: str, params: dict[str, Any]) -> dict[str, str]:
        from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

        out = {"Mcp-Method": method}
        key = NAME_BEARING_METHODS.get(method)
        if key and isinstance(params.get(key), str):
            out["Mcp-Name"] = encode_header_value(params[key])
        name = params.get("name")
        args = params.get("arguments")
        if method == "tools/call" and isinstance(name, str) and name in self.param_maps:
            from mcp.shared.inbound import mcp_param_headers

            out.update(mcp_param_headers(self.param_maps[name], args or {}))
        return out

    # ------------------------------------------------------------------ responses
    def learn_headers(self, headers: Mapping[str, str]) -> None:
        """Take the session id a response hands out (header names are case-insensitive)."""
        for name, value in headers.items():
            if name.lower() == "mcp-session-id" and value:
                self.session_id = value

    def learn_message(self, msg: dict[str, Any]) -> None:
        """Take the negotiated version and the tools' ``x-mcp-header`` maps from a result."""
        res = msg.get("result")
        if not isinstance(res, dict):
            return
        if isinstance(res.get("protocolVersion"), str):
            self.version = res["protocolVersion"]
        tools = res.get("tools")
        if isinstance(tools, list):
            self._learn_tools(tools)

    def _learn_tools(self, tools: list[Any]) -> None:
        from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            schema = tool.get("inputSchema")
            if isinstance(schema, dict) and find_invalid_x_mcp_header(schema) is None:
                found = x_mcp_header_map(schema)
                if found:
                    self.param_maps[tool["name"]] = found


def _title(name: str) -> str:
    """``mcp-param-api-key`` → ``Mcp-Param-Api-Key`` (HTTP names are case-insensitive)."""
    return "-".join(part[:1].upper() + part[1:] for part in name.split("-"))


__all__ = [
    "ACCEPT",
    "ClientState",
    "compact",
    "is_modern",
    "messages_in",
    "recorded_request_headers",
]
