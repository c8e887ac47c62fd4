"""The cap on host connections (``MAX_HOST_CONNECTIONS``), at ``FrontServer``: past it a new
connection gets a 503 and is closed, counted and reported once; the ones open are untouched,
and a freed place is taken by the next connection."""

from __future__ import annotations

import asyncio

import pytest

from mcp_proxy.limits import MAX_HOST_CONNECTIONS
from mcp_proxy.relay.http.admission import ENV_MAX_HOST_CONNECTIONS, host_connection_cap
from mcp_proxy.relay.http.front import (
    FrontRequest,
    FrontServer,
    RelayResponse,
    ignore,
    plain_response,
)
from tests.relay.unit.fakes import until

pytestmark = pytest.mark.timeout(20)

REQUEST = b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n"


async def _ok(_req: FrontRequest) -> RelayResponse:
    return plain_response(200, "ok\n")


async def _answer(port: int) -> bytes:
    """One request on a new connection; everything the server sent until it closed or
    answered (a keep-alive answer is read up to its body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    data = b""
    while not data.endswith(b"ok\n") and not data.endswith(b"}"):
        got = await reader.read(65536)
        if not got:
            break
        data += got
    writer.close()
    return data


def test_past_the_cap_a_new_connection_gets_503_and_is_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def main() -> None:
        server = FrontServer(_ok, ignore, max_connections=2)
        port = await server.listen("127.0.0.1", 0)
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
        await until(lambda: len(server.connections) == 2)
        refused = [await _answer(port) for _ in range(3)]
        for data in refused:
            assert data.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), data
            assert b"Connection: close\r\n" in data and b"Retry-After: 1\r\n" in data
            assert b"X-Mcptape-Error: too-many-connections\r\n" in data
            assert b'"message":"mcptape: too many host connections; retry shortly"' in data
        assert server.admission.refused == 3
        assert len(server.connections) == 2
        # The held connections are still served.
        reader, writer = held[0]
        writer.write(REQUEST)
        head = await reader.readuntil(b"ok\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        # A place freed is taken by the next connection.
        for _, w in held:
            w.close()
        await until(lambda: not server.connections)
        assert (await _answer(port)).startswith(b"HTTP/1.1 200 OK\r\n")
        await server.close(grace=1)

    asyncio.run(main())
    err = capsys.readouterr().err
    # Reported once (the first refusal at once; later ones folded into the next line).
    assert err.count("host connections open") == 1, err
    assert "refused 1 new connection with 503 (1 since the start)" in err


def test_the_cap_is_the_limit_or_the_start_up_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_MAX_HOST_CONNECTIONS, raising=False)
    assert host_connection_cap() == MAX_HOST_CONNECTIONS
    monkeypatch.setenv(ENV_MAX_HOST_CONNECTIONS, "3")
    assert host_connection_cap() == 3
    monkeypatch.setenv(ENV_MAX_HOST_CONNECTIONS, "0")
    assert host_connection_cap() == 1
    monkeypatch.setenv(ENV_MAX_HOST_CONNECTIONS, "many")
    assert host_connection_cap() == MAX_HOST_CONNECTIONS
