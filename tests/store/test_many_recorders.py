"""Fifty recorders, one PostgreSQL: a team's CI jobs and laptops recording at the same time.

Forty ``mcptape record -- SERVER`` (stdio) and ten ``mcptape record --upstream URL`` (HTTP),
each a real relay with its own recorder process, all writing into one PostgreSQL database at
once while their clients talk through them. Afterwards: no error on any relay's stderr, every
session distinct and ended, every frame there in order, and the recorded bytes equal to what
crossed the wire.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from aiohttp import web

from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.db import PgServer

PY = sys.executable
STDIO = 40
HTTP = 10
CALLS = 60  # requests per stdio client
HTTP_CALLS = 30  # tools/call per HTTP client (after its initialize)

pytestmark = pytest.mark.timeout(300)


class Upstream:
    """A small Streamable-HTTP JSON-RPC server (JSON responses) in a thread of its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def handle(request: web.Request) -> web.StreamResponse:
            msg = json.loads(await request.read())
            if "id" not in msg:
                return web.Response(status=202)
            headers = {}
            if msg["method"] == "initialize":
                headers["Mcp-Session-Id"] = uuid.uuid4().hex
                result = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "many", "version": "1"},
                }
            else:
                result = {"content": [{"type": "text", "text": f"ok {msg['id']}"}]}
            body = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            return web.Response(body=body, content_type="application/json", headers=headers)

        async def start() -> None:
            app = web.Application()
            app.router.add_post("/mcp", handle)
            self.runner = web.AppRunner(app)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

        self.loop.run_until_complete(start())
        self._ready.set()
        self.loop.run_forever()

    def __enter__(self) -> Upstream:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture
def team_db(pg_server: PgServer) -> Iterator[str]:
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


def _stdio(url: str, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*mcptape_cmd(), "record", "--db", url, "--name", name, "--",
         PY, "-m", "mcp_proxy.testing.rawecho"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def _http(url: str, name: str, upstream: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*mcptape_cmd(), "record", "--upstream", upstream, "--port", "0", "--db", url,
         "--name", name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def _listening(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[str, list[bytes]]:
    """Read the relay's ``mcptape: relaying <url> -> …`` line; keep its other lines."""
    assert proc.stderr is not None
    seen: list[bytes] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if line.startswith(b"mcptape: relaying "):
            return line.split()[2].decode(), seen
        seen.append(line)
    raise AssertionError(f"HTTP relay did not start: {seen}")


def _post(base: str, body: dict, session: str | None) -> tuple[int, dict[str, str], bytes]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session:
        headers["Mcp-Session-Id"] = session
    conn.request("POST", "/mcp", json.dumps(body).encode(), headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data


def _http_client(base: str) -> list[bytes]:
    """One HTTP session through the relay: initialize then tool calls. Returns the bodies sent."""
    sent = []
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "many-client", "version": "1"}}}  # fmt: skip
    status, headers, _ = _post(base, init, None)
    assert status == 200
    sent.append(json.dumps(init).encode())
    sid = headers["mcp-session-id"]
    for i in range(1, HTTP_CALLS + 1):
        call = {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"i": i}}}  # fmt: skip
        status, _, body = _post(base, call, sid)
        assert status == 200 and f"ok {i}".encode() in body
        sent.append(json.dumps(call).encode())
    return sent


@pytest.mark.full  # a load test (50 recorder processes): the store's contract is tested above
def test_fifty_recorders_into_one_postgresql(team_db: str):
    with Upstream() as up:
        upstream = f"http://127.0.0.1:{up.port}/mcp"
        stdio = {f"s{i}": _stdio(team_db, f"s{i}") for i in range(STDIO)}
        http = {f"h{i}": _http(team_db, f"h{i}", upstream) for i in range(HTTP)}
        try:
            bases = {name: _listening(p)[0] for name, p in http.items()}
            # Every stdio client sends all its requests at once, then reads the answers.
            sent: dict[str, bytes] = {}
            for name, p in stdio.items():
                assert p.stdin is not None
                data = b"".join(
                    b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"who":"%s"}}\n'
                    % (i, name.encode())
                    for i in range(1, CALLS + 1)
                )
                p.stdin.write(data)
                p.stdin.flush()
                sent[name] = data
            with ThreadPoolExecutor(HTTP) as pool:
                http_sent = dict(zip(bases, pool.map(_http_client, bases.values()), strict=True))
            received: dict[str, bytes] = {}
            for name, p in stdio.items():
                assert p.stdin and p.stdout
                p.stdin.close()
                received[name] = p.stdout.read()
                assert received[name].count(b"\n") == CALLS, name
            for p in http.values():
                p.send_signal(signal.SIGINT)  # a relay stops on SIGINT and drains its recorder
            errors = {}
            for name, p in {**stdio, **http}.items():
                assert p.wait(120) == 0, name
                assert p.stderr is not None
                # An HTTP relay's closing summary is the one line expected; nothing else.
                err = [
                    line
                    for line in p.stderr.read().decode().splitlines()
                    if line.strip() and not line.startswith("mcptape: stopped; ")
                ]
                if err:
                    errors[name] = err
            assert not errors, errors
        finally:
            for p in (*stdio.values(), *http.values()):
                if p.poll() is None:
                    p.kill()
                    p.wait(10)

    rows = rdb.sessions(team_db)
    names = sorted(r["name"] for r in rows)
    assert names == sorted([*stdio, *http]), names
    assert len({r["id"] for r in rows}) == STDIO + HTTP
    assert {r["status"] for r in rows} == {"ended"}
    by_name = {r["name"]: r for r in rows}
    for name in stdio:
        s = by_name[name]
        seqs = [f["seq"] for f in rdb.frames(team_db, s["id"])]
        assert seqs == list(range(1, 2 * CALLS + 1)), name
        assert s["frame_count"] == 2 * CALLS and s["gap_count"] == 0
        assert rdb.stream(team_db, s["id"], "c2s") == sent[name]
        assert rdb.stream(team_db, s["id"], "s2c") == received[name]
    for name, bodies in http_sent.items():
        s = by_name[name]
        frames = rdb.frames(team_db, s["id"])
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert [f["raw"] for f in frames if f["direction"] == "c2s"] == bodies, name
        assert len([f for f in frames if f["direction"] == "s2c"]) == HTTP_CALLS + 1
        exchanges = rdb.rows(team_db, "SELECT * FROM http_exchanges WHERE session_id = ?", s["id"])
        assert len(exchanges) == HTTP_CALLS + 1 and {x["status"] for x in exchanges} == {200}
    gaps = rdb.rows(team_db, "SELECT * FROM findings WHERE code = 'recorder.gap'")
    assert gaps == []
