"""The bytes a fault puts on the wire in the server's (or the host's) place — pure functions.

Each function returns exactly what a misbehaving peer would have sent, so the peer under test
sees the same bytes, and raises the same exception, as it would from a real failing server:
a JSON-RPC error with the request's own id, an ``isError`` tool result, a truncated line, a line
cut inside a UTF-8 sequence, or JSON that does not parse. Line ends are kept as they were, so a
stdio peer still sees one message per line.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_proxy.faults.engine import MessageFacts

__all__ = ["corrupt", "error_response", "split_line_end", "tool_error_response"]

_MODERN = "2026-07-28"


def split_line_end(raw: bytes) -> tuple[bytes, bytes]:
    """``(content, terminator)`` of one frame (``\\n``, ``\\r\\n`` or nothing)."""
    if raw.endswith(b"\r\n"):
        return raw[:-2], b"\r\n"
    if raw.endswith(b"\n"):
        return raw[:-1], b"\n"
    return raw, b""


def _encode(message: dict[str, Any], end: bytes) -> bytes:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + end


def _is_modern(request: MessageFacts) -> bool:
    msg = request.message if isinstance(request.message, dict) else {}
    params = msg.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = (
        meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
    )
    return version == _MODERN


def error_response(
    request: MessageFacts, code: int, message: str, data: Any = None, *, end: bytes = b"\n"
) -> bytes:
    """A JSON-RPC error answering ``request`` (same id), as a server would send it."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _encode({"jsonrpc": "2.0", "id": request.id, "error": error}, end)


def tool_error_response(request: MessageFacts, text: str, *, end: bytes = b"\n") -> bytes:
    """A ``tools/call`` result with ``isError: true``: the tool ran and failed."""
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": True}
    if _is_modern(request):
        result["resultType"] = "complete"
    return _encode({"jsonrpc": "2.0", "id": request.id, "result": result}, end)


def corrupt(raw: bytes, mode: str, at: int | None = None) -> bytes:
    """``raw`` broken the way ``mode`` says, terminator kept.

    - ``truncate``: only the first ``at`` bytes (default: half) of the content;
    - ``cut-utf8``: cut inside a multi-byte UTF-8 character (the first one, or a lone lead
      byte appended to the first half when the content is all ASCII);
    - ``invalid-json``: a stray comma after the opening brace — still looks like JSON-RPC to a
      human, does not parse.
    """
    content, end = split_line_end(raw)
    if mode == "truncate":
        keep = len(content) // 2 if at is None else min(at, len(content))
        return content[:keep] + end
    if mode == "cut-utf8":
        for i, byte in enumerate(content):
            if byte >= 0xC0:  # a UTF-8 lead byte: keep it, drop its continuation bytes
                return content[: i + 1] + end
        return content[: len(content) // 2] + b"\xe2\x82" + end
    if mode == "invalid-json":
        brace = content.find(b"{")
        if brace < 0:
            return content + b"}" + end
        return content[: brace + 1] + b"," + content[brace + 1 :] + end
    raise ValueError(f"unknown corrupt mode {mode!r}")
