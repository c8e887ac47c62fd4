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

from mcp_proxy.headers import end_to_end
from mcp_proxy.relay.http.common import decode_header

__all__ = ["BODY_METHODS", "RequestHead", "build_request_head", "with_content_length"]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
#: Kept even when the host's ``Connection`` names it: ``Host`` is rewritten, never dropped.
_KEEP = frozenset({b"host"})


@dataclass(slots=True)
class RequestHead:
    """What the relay learned from the host's head while rewriting it."""

    #: The request line and headers for the upstream, ready to write.
    head: bytes
    #: The host's header pairs as sent (bytes; the recording decodes them, off the path).
    rec_headers: list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]
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
    """The upstream request head for a host request (see the module docstring for the rules).

    The host's pairs as bytes, hop-by-hop ones dropped (:func:`mcp_proxy.headers.end_to_end`,
    the one rule of every relay path); only the few values the relay acts on are decoded
    (session id, credential, ``Connection`` tokens, ``Expect``); the others go out as they came.
    """
    parts = [
        b"%b %b HTTP/1.1\r\n"
        % (method.encode("ascii"), raw_path.encode("utf-8", "surrogateescape"))
    ]
    session_hdr: str | None = None
    authorization: str | None = None
    has_mcp = False
    has_length = False
    has_host = False
    expect_continue = False
    # Hop-by-hop headers and those the host's Connection names go (Host stays: rewritten).
    for kb, vb in end_to_end(raw_headers, keep=_KEEP):
        lowb = kb.lower()
        if lowb[:4] == b"mcp-":
            has_mcp = True
            if lowb == b"mcp-session-id":
                session_hdr = decode_header(vb)
        elif lowb == b"host":
            has_host = True
            parts.append(b"Host: %b\r\n" % host_header)
            continue
        elif lowb == b"content-length":
            has_length = True
        elif lowb == b"authorization":
            authorization = decode_header(vb)
        elif lowb == b"expect":
            expect_continue = expect_continue or vb.strip().lower() == b"100-continue"
            continue
        parts.append(b"%b: %b\r\n" % (kb, vb))
    if not has_host:
        parts.insert(1, b"Host: %b\r\n" % host_header)
    # Forward chunked only when the host sent a body without a length.
    chunked = body_exists and not has_length
    if chunked:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    elif method in BODY_METHODS and not body_exists and not has_length:
        parts.append(b"Content-Length: 0\r\n")
    parts.append(b"\r\n")
    return RequestHead(
        b"".join(parts),
        raw_headers,
        session_hdr,
        authorization,
        has_mcp,
        chunked,
        expect_continue,
    )


def with_content_length(rh: RequestHead, old: int, new: int) -> RequestHead:
    """The request head with its ``Content-Length`` made to fit a body replaced by a hook."""
    if old == new:
        return rh
    import dataclasses

    head = rh.head
    for name in (b"Content-Length", b"content-length", b"Content-length"):
        needle = b"\r\n" + name + b": " + str(old).encode() + b"\r\n"
        if needle in head:
            head = head.replace(needle, b"\r\n" + name + b": " + str(new).encode() + b"\r\n", 1)
            break
    return dataclasses.replace(rh, head=head)
