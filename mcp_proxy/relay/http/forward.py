"""Request-head forwarding: the host's head, as bytes, made fit for the upstream hop.

Pure (no I/O): the relay hands it the host's raw header pairs and gets back the bytes to write
upstream plus the few facts routing and recording need. Hand-written on purpose: a generic HTTP
client would decode names and values and re-encode them (changing case, order, folding
duplicates, refusing non-UTF-8 values); here every end-to-end header goes out as the host's own
bytes, in the host's order. What changes, and why:

- ``Host`` is rewritten to the upstream's (servers with DNS-rebinding protection refuse
  anything else), in place;
- hop-by-hop headers (RFC 9110 §7.6.1) and those the host's ``Connection`` names are dropped;
- ``Expect`` is answered by the relay (``100 Continue``), not forwarded;
- a body without ``Content-Length`` goes up ``Transfer-Encoding: chunked``; a body method
  without a body gets ``Content-Length: 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcp_proxy.relay.http.common import HOP_BY_HOP_B, decode_header

__all__ = ["BODY_METHODS", "RequestHead", "build_request_head"]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(slots=True)
class RequestHead:
    """What the relay learned from the host's head while rewriting it."""

    #: The request line and headers for the upstream, ready to write.
    head: bytes
    #: The host's headers as sent (names, values decoded for the recording), in order.
    rec_headers: list[list[str]]
    session_id: str | None
    authorization: str | None
    #: Any ``Mcp-*`` header present (then their decoded values go in the exchange's meta).
    has_mcp: bool
    #: The body goes upstream chunked (the host sent one without a length).
    chunked: bool
    expect_continue: bool


def build_request_head(
    method: str,
    raw_path: str,
    raw_headers: tuple[tuple[bytes, bytes], ...] | list[tuple[bytes, bytes]],
    host_header: bytes,
    *,
    body_exists: bool,
) -> RequestHead:
    """The upstream request head for a host request (see the module docstring for the rules)."""
    rec_headers: list[list[str]] = []
    keep: list[tuple[bytes, bytes, bytes]] = []  # (lower name, name, value) to forward
    connection_tokens: list[str] = []
    session_hdr: str | None = None
    authorization: str | None = None
    has_mcp = False
    has_length = False
    expect_continue = False
    for kb, vb in raw_headers:
        name = kb.decode("latin-1")
        value = vb.decode("ascii") if vb.isascii() else decode_header(vb)
        rec_headers.append([name, value])
        lowb = kb.lower()
        if lowb == b"host":
            keep.append((lowb, b"Host", host_header))
            continue
        if lowb in HOP_BY_HOP_B:
            if lowb == b"connection":
                connection_tokens.append(value)
            continue
        if lowb == b"expect":
            expect_continue = expect_continue or value.strip().lower() == "100-continue"
            continue
        if lowb.startswith(b"mcp-"):
            has_mcp = True
            if lowb == b"mcp-session-id":
                session_hdr = value
        elif lowb == b"authorization":
            authorization = value
        elif lowb == b"content-length":
            has_length = True
        keep.append((lowb, kb, vb))
    if connection_tokens:
        named = {
            t.strip().lower().encode("latin-1", "replace")
            for t in ",".join(connection_tokens).split(",")
            if t.strip()
        }
        keep = [k for k in keep if k[0] not in named or k[0] == b"host"]
    if not any(k[0] == b"host" for k in keep):
        keep.insert(0, (b"host", b"Host", host_header))
    # Forward chunked only when the host sent a body without a length.
    chunked = body_exists and not has_length
    parts = [method.encode("ascii") + b" " + raw_path.encode("utf-8", "surrogateescape")]
    parts[0] += b" HTTP/1.1\r\n"
    for _, kb, vb in keep:
        parts.append(kb + b": " + vb + b"\r\n")
    if chunked:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    elif method in BODY_METHODS and not body_exists and not has_length:
        parts.append(b"Content-Length: 0\r\n")
    parts.append(b"\r\n")
    return RequestHead(
        b"".join(parts),
        rec_headers,
        session_hdr,
        authorization,
        has_mcp,
        chunked,
        expect_continue,
    )
