"""The HTTP fault layer's pure pieces: an ``http`` rule's status line, a corrupted request's
``Content-Length``, an injected SSE event's bytes."""

from __future__ import annotations

from mcp_proxy.faults import parse_rule
from mcp_proxy.framing import SSEEvent, SSEParser
from mcp_proxy.relay.http.faults import event_bytes, injected_status
from mcp_proxy.relay.http.forward import build_request_head, with_content_length


def test_http_rule_status_headers_and_body() -> None:
    rule = parse_rule(
        'http status=401 "header=WWW-Authenticate: Bearer realm=\\"mcp\\"" header=X-A:1'
    )
    status, headers, body = injected_status(rule.settings)
    assert status == 401 and body == b""
    assert headers == [("WWW-Authenticate", 'Bearer realm="mcp"'), ("X-A", "1")]
    status, headers, body = injected_status(
        parse_rule('http status=503 \'body={"error":"down"}\'').settings
    )
    assert body == b'{"error":"down"}' and ("Content-Type", "application/json") in headers
    _, headers, body = injected_status(parse_rule("http status=429 body=slow-down").settings)
    assert body == b"slow-down" and ("Content-Type", "text/plain") in headers


def test_a_corrupted_body_gets_its_own_length() -> None:
    head = build_request_head(
        "POST",
        "/mcp",
        [(b"Host", b"h"), (b"Content-Length", b"40"), (b"Content-Type", b"application/json")],
        b"up:1",
        body_exists=True,
    )
    short = with_content_length(head, 40, 20)
    assert b"\r\nContent-Length: 20\r\n" in short.head and b"40" not in short.head
    assert short.head.replace(b"20", b"40") == head.head
    assert with_content_length(head, 40, 40) is head


def test_an_injected_event_parses_back() -> None:
    ev = SSEEvent(raw=b"", data=b"", event="message", id="7")
    out = event_bytes(ev, b'{"a":1}\n{"b":2}')
    (back,) = SSEParser().feed(out)
    assert (back.event, back.id, back.data) == ("message", "7", b'{"a":1}\n{"b":2}')
