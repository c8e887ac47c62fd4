"""mcp_proxy.headers: the =?base64?…?= rule (same acceptance as the SDK) and hop-by-hop names."""

from __future__ import annotations

import base64

import pytest

from mcp_proxy.headers import (
    HOP_BY_HOP,
    decode_header_value,
    display_header_value,
    end_to_end,
    hop_by_hop_names,
    is_mcp_header,
    mcp_headers,
)


def enc(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode()).decode() + "?="


@pytest.mark.parametrize("text", ["naïve", "  padded  ", "line\nbreak", "✓", "", "plain"])
def test_round_trip(text: str) -> None:
    assert decode_header_value(enc(text)) == text


def test_plain_values_verbatim() -> None:
    assert decode_header_value("tools/call") == "tools/call"
    assert decode_header_value(None) is None
    assert decode_header_value("=?base64?") == "=?base64?"  # not a whole sentinel


@pytest.mark.parametrize(
    "bad",
    [
        "=?base64?not base64!?=",
        "=?base64?YQ=?=",
        "=?base64?YR==?=",
        "=?base64?" + base64.b64encode(b"\xff").decode() + "?=",
    ],
)
def test_malformed_sentinel_is_none(bad: str) -> None:
    # bad alphabet, bad padding, non-canonical trailing bits, payload not UTF-8
    assert decode_header_value(bad) is None
    assert display_header_value(bad).endswith("(malformed base64 sentinel)")


def test_matches_the_sdk() -> None:
    from mcp.shared.inbound import decode_header_value as sdk_decode
    from mcp.shared.inbound import encode_header_value as sdk_encode

    for text in ["naïve", " x", "ok", "=?base64?abc?=", "tab\tin"]:
        wire = sdk_encode(text)
        assert decode_header_value(wire) == sdk_decode(wire) == text
    for bad in ["=?base64?YR==?=", "=?base64?%%?="]:
        assert decode_header_value(bad) == sdk_decode(bad)


def test_mcp_headers_for_display() -> None:
    pairs = [
        ("Host", "x"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", enc("naïve")),
        ("mcp-param-region", "eu"),
        ("mcp-param-region", "us"),
        ("Last-Event-ID", "7"),
    ]
    out = mcp_headers(pairs)
    assert out == {
        "Mcp-Method": "tools/call",
        "Mcp-Name": {"raw": enc("naïve"), "decoded": "naïve"},
        "mcp-param-region": ["eu", "us"],
        "Last-Event-ID": "7",
    }
    assert is_mcp_header("MCP-Protocol-Version") and not is_mcp_header("Host")


def test_hop_by_hop_names() -> None:
    assert hop_by_hop_names([]) == HOP_BY_HOP
    names = hop_by_hop_names(["keep-alive, X-Trace", " Foo "])
    assert {"x-trace", "foo", "connection", "transfer-encoding"} <= names


def test_end_to_end_drops_hop_by_hop_and_connection_named_headers() -> None:
    pairs = [
        (b"Content-Type", b"application/json"),
        (b"Connection", b"close, X-Secret-Hop"),
        (b"X-Secret-Hop", b"1"),
        (b"Keep-Alive", b"timeout=5"),
        (b"connection", b" x-other ,"),
        (b"X-Other", b"2"),
        (b"Host", b"h"),
        (b"X-Kept", b"3"),
    ]
    assert end_to_end(pairs) == [
        (b"Content-Type", b"application/json"),
        (b"Host", b"h"),
        (b"X-Kept", b"3"),
    ]
    # A name to keep survives a Connection that names it (a request's Host).
    named_host = [(b"Connection", b"Host"), (b"Host", b"h")]
    assert end_to_end(named_host, keep=frozenset({b"host"})) == [(b"Host", b"h")]
    assert end_to_end(named_host) == []
    assert end_to_end([]) == []
