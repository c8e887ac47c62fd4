"""HTTP header helpers shared by the relay, the dashboard and the analysers: pure, no I/O.

Two jobs:

- ``Mcp-*`` routing headers (2026-07-28 era: ``Mcp-Method``, ``Mcp-Name``, ``Mcp-Param-<Token>``)
  carry values that are not plain printable ASCII as ``=?base64?<payload>?=``. The original
  header is what is stored (it is what crossed the wire); :func:`decode_header_value` gives the
  value a person wants to read and that an analyser compares with the body. It mirrors the SDK's
  ``mcp.shared.inbound.decode_header_value`` (same acceptance rules) without importing ``mcp``,
  which costs most of a second.
- Hop-by-hop headers (RFC 9110 §7.6.1) are meaningful for one connection only, so a proxy must
  not forward them; :func:`hop_by_hop_names` says which ones a given message declares.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "HOP_BY_HOP",
    "HOP_BY_HOP_B",
    "MCP_HEADER_PREFIXES",
    "decode_header_value",
    "display_header_value",
    "end_to_end",
    "hop_by_hop_names",
    "is_mcp_header",
    "mcp_headers",
]

_B64_SENTINEL = re.compile(r"=\?base64\?(?P<payload>.*)\?=", re.DOTALL)

#: Headers that belong to one hop (RFC 9110 §7.6.1, plus the de-facto ``Keep-Alive`` and
#: ``Proxy-Connection``). ``Proxy-Authorization`` is meant for the proxy it is sent to — us —
#: and ``TE``/``Trailer`` describe this connection's transfer coding.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)

#: :data:`HOP_BY_HOP` as bytes, for the relays' raw header pairs.
HOP_BY_HOP_B = frozenset(h.encode() for h in HOP_BY_HOP)

#: Header names (lower case) whose values MCP defines; kept per exchange and decoded for display.
MCP_HEADER_PREFIXES = ("mcp-", "last-event-id")


def decode_header_value(value: str | None) -> str | None:
    """The readable value of an MCP header: the base64 payload decoded, or the value as is.

    Returns ``None`` for ``None`` and for a malformed sentinel (bad or non-canonical base64,
    payload not UTF-8) — the same rule as the SDK, so that a corrupt header never looks equal to
    a body value when an analyser compares the two.
    """
    if value is None:
        return None
    m = _B64_SENTINEL.fullmatch(value)
    if m is None:
        return value
    payload = m.group("payload")
    try:
        decoded = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(decoded).decode("ascii") != payload:
        return None
    try:
        return decoded.decode("utf-8")
    except UnicodeDecodeError:
        return None


def display_header_value(value: str) -> str:
    """What to show a person: the decoded value, or the original marked when it cannot decode."""
    decoded = decode_header_value(value)
    if decoded is None:
        return f"{value} (malformed base64 sentinel)"
    return decoded


def is_mcp_header(name: str) -> bool:
    """True for headers MCP defines (``Mcp-Session-Id``, ``MCP-Protocol-Version``, ``Mcp-Param-*``…)."""
    low = name.lower()
    return low.startswith(MCP_HEADER_PREFIXES)


def mcp_headers(headers: Iterable[tuple[str, str]] | Iterable[list[str]]) -> dict[str, Any]:
    """The MCP headers of a message, for display and for the exchange's metadata.

    Maps each header name (as sent) to its value; a value in ``=?base64?…?=`` form becomes
    ``{"raw": original, "decoded": text-or-None}`` so both the wire form and the readable form
    are at hand. A repeated header (which the 2026-07-28 era rejects with -32020) becomes a list.
    """
    out: dict[str, Any] = {}
    for pair in headers:
        name, value = pair[0], pair[1]
        if not is_mcp_header(name):
            continue
        item: Any = value
        if _B64_SENTINEL.fullmatch(value):
            item = {"raw": value, "decoded": decode_header_value(value)}
        if name in out:
            prev = out[name]
            out[name] = [*prev, item] if isinstance(prev, list) else [prev, item]
        else:
            out[name] = item
    return out


def hop_by_hop_names(connection_values: Iterable[str]) -> frozenset[str]:
    """All hop-by-hop names for a message: the fixed set plus those its ``Connection`` lists."""
    extra = {
        token.strip().lower()
        for value in connection_values
        for token in value.split(",")
        if token.strip()
    }
    return HOP_BY_HOP | extra if extra else HOP_BY_HOP


def end_to_end(
    pairs: Iterable[tuple[bytes, bytes]], *, keep: frozenset[bytes] = frozenset()
) -> list[tuple[bytes, bytes]]:
    """The raw header pairs a proxy forwards, in order, as they came (RFC 9110 §7.6.1).

    Dropped: the :data:`HOP_BY_HOP` headers and every header a ``Connection`` header names
    (``Connection: close, X-Secret-Hop`` drops ``X-Secret-Hop``), except the lower-case names in
    ``keep`` (a request's ``Host``, which the relay rewrites, must survive a ``Connection: host``).
    The one rule every relay path uses (reverse requests and responses, the lean forward engine).
    """
    out: list[tuple[bytes, bytes]] = []
    tokens: list[bytes] | None = None
    hop = HOP_BY_HOP_B
    for kb, vb in pairs:
        low = kb.lower()
        if low in hop:
            if low == b"connection":
                tokens = [vb] if tokens is None else [*tokens, vb]
            continue
        out.append((kb, vb))
    if tokens is not None:
        named = _connection_names(tokens) - keep
        if named:
            out = [p for p in out if p[0].lower() not in named]
    return out


def _connection_names(values: Sequence[bytes]) -> set[bytes]:
    return {t.strip().lower() for t in b",".join(values).split(b",") if t.strip()}
