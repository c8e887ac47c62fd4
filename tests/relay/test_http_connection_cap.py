"""The cap on host connections through the real relay (``mcptape record --upstream``): with
``MCPTAPE_MAX_HOST_CONNECTIONS=2`` and two keep-alive connections open, a third gets a 503
(``Connection: close``, ``Retry-After``, ``X-Mcptape-Error``), nothing goes upstream for it,
stderr says so once, the two open connections are still served, and a freed place is taken.
Before the cap, the relay took every connection a host opened (one descriptor, parser and
upstream connection each, without end)."""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.helpers.db import wait_until
from tests.helpers.rawhttp import read_raw
from tests.relay.conftest import FakeUpstream

pytestmark = pytest.mark.timeout(90)


def _request(host: str) -> bytes:
    return f"GET /echo HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()


def test_past_the_cap_a_host_connection_gets_503(
    proxy: Any, fake_upstream: FakeUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCPTAPE_MAX_HOST_CONNECTIONS", "2")  # the start-up override
    with proxy(fake_upstream.origin) as px:
        u = urlsplit(px.url)
        where = (u.hostname, u.port)
        host = u.netloc
        held = [socket.create_connection(where, timeout=20) for _ in range(2)]
        try:
            for s in held:
                s.sendall(_request(host))
                assert read_raw(s).startswith(b"HTTP/1.1 200 ")
            seen = len(fake_upstream.seen)
            with socket.create_connection(where, timeout=20) as extra:
                extra.sendall(_request(host))
                answer = read_raw(extra)
                assert extra.recv(1) == b""  # then the relay closes it
            head = answer.partition(b"\r\n\r\n")[0]
            assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
            assert b"\r\nConnection: close" in head and b"\r\nRetry-After: 1" in head
            assert b"\r\nX-Mcptape-Error: too-many-connections" in head
            assert b"too many host connections" in answer
            assert len(fake_upstream.seen) == seen  # nothing went upstream for it
            assert wait_until(
                lambda: any("host connections open" in line for line in px.stderr), 10
            ), px.stderr
            # The open connections are still served.
            held[0].sendall(_request(host))
            assert read_raw(held[0]).startswith(b"HTTP/1.1 200 ")
            held.pop().close()

            def served() -> bool:
                with socket.create_connection(where, timeout=20) as s:
                    s.sendall(_request(host))
                    return read_raw(s).startswith(b"HTTP/1.1 200 ")

            assert wait_until(served, 10)  # a freed place is taken (once the relay saw it go)
        finally:
            for s in held:
                s.close()
        refusals = [line for line in px.stderr if "host connections open" in line]
        assert len(refusals) == 1, px.stderr
        assert "refused 1 new connection with 503" in refusals[0]
    # Refused connections record nothing: only the served requests are exchanges.
    assert all(ex["status"] == 200 for ex in px.exchanges())
