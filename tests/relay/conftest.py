"""Harness for the HTTP relay tests: real upstream servers, the real proxy, the real database.

- SDK upstreams run as subprocesses (``tests/relay/upstream_server.py``: the project's test
  server plus ``count``/``watch`` probe tools that report on stderr), one per mode, shared by
  the whole session.
- The proxy is ``mcptape record --upstream URL --port 0 --db FILE``, a real subprocess, read
  for its ``mcptape: relaying <url> -> …`` line; stopping it with SIGINT drains the recording.
- ``FakeUpstream`` is a small aiohttp server in a thread for what the SDK never sends (resets
  mid-stream, absolute legacy endpoints, gzip, OAuth token bodies, reflected raw requests).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.helpers.forkserver import server_python
from tests.relay.launch import relay_process

HERE = Path(__file__).resolve().parent
UPSTREAM_SCRIPT = HERE / "upstream_server.py"
MCPTAPE = Path(sys.executable).with_name("mcptape")
READY = "MCPTAPE_TEST_SERVER_READY"


# --------------------------------------------------------------------------- SDK upstreams
@dataclass
class Upstream:
    url: str
    proc: subprocess.Popen[bytes]
    lines: list[str] = field(default_factory=list)

    def count(self, line: str) -> int:
        return sum(1 for x in list(self.lines) if x == line)

    async def await_line(self, line: str, within: float = 10.0) -> bool:
        """Like :meth:`wait_for`, without blocking the event loop the client runs on."""
        import anyio

        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if line in self.lines:
                return True
            await anyio.sleep(0.02)
        return False

    def wait_for(self, line: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if line in self.lines:
                return True
            time.sleep(0.02)
        return False


def _drain(stream: Any, sink: list[str], ready: list[str], event: threading.Event) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        if not event.is_set() and line.startswith(READY + " "):
            ready.append(line.split(" ", 1)[1].strip())
            event.set()
            continue
        sink.append(line)


@contextlib.contextmanager
def start_upstream(*args: str, timeout: float = 30.0) -> Iterator[Upstream]:
    """Run the SDK upstream with these options; yields once it accepts connections.

    (``mcp_proxy.testing.process.start_http_server`` runs only ``mcp_proxy.testing.server``;
    the probe tools need this script, hence a launcher of our own.)
    """
    proc = subprocess.Popen(
        [server_python(), str(UPSTREAM_SCRIPT), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []
    ready: list[str] = []
    event = threading.Event()
    t = threading.Thread(target=_drain, args=(proc.stderr, lines, ready, event), daemon=True)
    t.start()
    try:
        if not event.wait(timeout):
            raise RuntimeError(f"upstream did not start: {args} {lines[-20:]}")
        yield Upstream(ready[0], proc, lines)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        t.join(2)


@pytest.fixture(scope="session")
def up_stateful() -> Iterator[Upstream]:
    with start_upstream("--transport", "http") as up:
        yield up


@pytest.fixture(scope="session")
def up_stateless() -> Iterator[Upstream]:
    with start_upstream("--transport", "http", "--stateless") as up:
        yield up


@pytest.fixture(scope="session")
def up_json() -> Iterator[Upstream]:
    with start_upstream("--transport", "http", "--json-response") as up:
        yield up


@pytest.fixture(scope="session")
def up_sse() -> Iterator[Upstream]:
    with start_upstream("--transport", "sse") as up:
        yield up


# --------------------------------------------------------------------------- the proxy
@dataclass
class Proxy:
    url: str
    proc: subprocess.Popen[bytes]
    db: Path
    stderr: list[str]
    returncode: int | None = None

    @property
    def origin(self) -> str:
        return self.url.split("/", 3)[0] + "//" + self.url.split("/", 3)[2]

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> int:
        if self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
            self.returncode = self.proc.wait(timeout)
        return self.returncode

    def query(self, sql: str, *params: Any) -> list[sqlite3.Row]:
        """Rows from the recording (stop the proxy first: stopping drains it)."""
        con = sqlite3.connect(self.db)
        con.row_factory = sqlite3.Row
        try:
            return con.execute(sql, params).fetchall()
        finally:
            con.close()

    def exchanges(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self.query("SELECT 1 FROM sqlite_master WHERE name = 'http_exchanges'"):
            return out  # nothing recorded yet: the recorder makes its tables on first write
        for r in self.query("SELECT * FROM http_exchanges ORDER BY id"):
            d = dict(r)
            for k in ("request_headers", "response_headers", "meta"):
                d[k] = json.loads(d[k]) if d[k] else None
            out.append(d)
        return out

    def frames(self, session_id: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM frames"
        params: tuple[Any, ...] = ()
        if session_id:
            sql += " WHERE session_id = ?"
            params = (session_id,)
        return [dict(r) for r in self.query(sql + " ORDER BY session_id, seq", *params)]

    def sessions(self) -> list[dict[str, Any]]:
        out = []
        for r in self.query("SELECT * FROM sessions ORDER BY started_at"):
            d = dict(r)
            d["meta"] = json.loads(d["meta"]) if d["meta"] else {}
            out.append(d)
        return out


@contextlib.contextmanager
def run_proxy(upstream: str, db: Path, *extra: str, timeout: float = 30.0) -> Iterator[Proxy]:
    argv = [str(MCPTAPE), "record", "--upstream", upstream, "--port", "0", "--db", str(db), *extra]
    with relay_process(argv, timeout=timeout) as (proc, url, lines):
        px = Proxy(url, proc, db, lines)
        try:
            yield px
        finally:
            if proc.poll() is None:
                px.stop()


@pytest.fixture
def proxy(tmp_path: Path) -> Callable[..., contextlib.AbstractContextManager[Proxy]]:
    """``with proxy(upstream_url, *extra_args) as px:`` — a fresh proxy and database."""
    counter = iter(range(1000))

    def make(upstream: str, *extra: str) -> contextlib.AbstractContextManager[Proxy]:
        return run_proxy(upstream, tmp_path / f"rec{next(counter)}.db", *extra)

    return make


def local_url(px: Proxy, upstream_url: str) -> str:
    """The proxy URL for an upstream URL (paths are relayed unchanged)."""
    rest = upstream_url.split("/", 3)[3] if upstream_url.count("/") >= 3 else ""
    return px.origin + "/" + rest


# --------------------------------------------------------------------------- fake upstream
class FakeUpstream:
    """A small aiohttp server in its own thread; ``seen`` keeps each raw request it got."""

    def __init__(self) -> None:
        self.seen: collections.deque[dict[str, Any]] = collections.deque(maxlen=200)
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.closed_early: list[str] = []

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._started.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        server = web.Server(self._handle, handler_cancellation=True)
        self._runner = web.ServerRunner(server)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def start(self) -> FakeUpstream:
        self._thread.start()
        self._started.wait(10)
        return self

    def stop(self) -> None:
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop)
        with contextlib.suppress(Exception):
            fut.result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        body = await request.content.read() if request.body_exists else b""
        self.seen.append(
            {
                "method": request.method,
                "raw_path": request.raw_path,
                "raw_headers": [
                    [k.decode("latin-1"), v.decode("latin-1")] for k, v in request.raw_headers
                ],
                "body": body,
            }
        )
        path = request.path
        if path.startswith("/echo") or path.startswith("/.well-known"):
            reflected = {
                "method": request.method,
                "raw_path": request.raw_path,
                "raw_headers": [
                    [k.decode("latin-1"), base64.b64encode(v).decode()]
                    for k, v in request.raw_headers
                ],
                "body": base64.b64encode(body).decode(),
            }
            status = int(request.query.get("status", "200"))
            resp = web.Response(status=status, body=json.dumps(reflected).encode())
            resp.headers["Content-Type"] = "application/json"
            resp.headers.add("Set-Cookie", "a=1; Path=/")
            resp.headers.add("Set-Cookie", "b=2; HttpOnly")
            resp.headers["X-Custom-Reply"] = "yes"
            if status == 401:
                resp.headers["WWW-Authenticate"] = (
                    'Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'
                    ', scope="mcp"'
                )
            return resp
        if path == "/deep":
            # A response nested deeper than Python's recursion limit (issue 10, defect 1).
            deep = b"[" * 1500 + b"]" * 1500
            return web.Response(
                body=b'{"jsonrpc":"2.0","id":1,"result":' + deep + b"}",
                headers={"Content-Type": "application/json"},
            )
        if path == "/rpc":
            return web.json_response({"jsonrpc": "2.0", "id": 1, "result": {"ok": True}})
        if path == "/sse-secret":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(
                b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"content":[],'
                b'"structuredContent":{"access_token":"SECRET-SSE-11","note":"fine"}}}\r\n\r\n'
            )
            await resp.write_eof()
            return resp
        if path == "/token":
            return web.json_response(
                {
                    "access_token": "AT-SECRET-123456",
                    "refresh_token": "RT-SECRET-654321",
                    "token_type": "Bearer",
                    "expires_in": 3600,
                }
            )
        if path == "/gzip":
            raw = gzip.compress(b'{"jsonrpc":"2.0","id":1,"result":{"gz":true}}')
            return web.Response(
                body=raw, headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
            )
        if path == "/sse-timed":
            # Events carry the monotonic time they were written (latency measurement).
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            n = int(request.query.get("n", "5"))
            gap = float(request.query.get("gap", "0.05"))
            for i in range(n):
                data = json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/message",
                        "params": {"level": "info", "data": {"i": i, "t": time.monotonic_ns()}},
                    }
                )
                await resp.write(f"event: message\r\nid: {i}\r\ndata: {data}\r\n\r\n".encode())
                await asyncio.sleep(gap)
            await resp.write(b": ping - keepalive\r\n\r\n")
            await resp.write(
                b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\r\n\r\n'
            )
            await resp.write_eof()
            return resp
        if path == "/sse-quiet":
            # The head at once, the only event a while later: the host must see the head alone.
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(float(request.query.get("after", "1.5")))
            await resp.write(
                b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{}}\r\n\r\n'
            )
            await resp.write_eof()
            return resp
        if path == "/sse-reset":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(
                b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress",'
                b'"params":{"progressToken":1,"progress":1}}\r\n\r\n'
            )
            await asyncio.sleep(0.1)
            await resp.write(b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,')
            await asyncio.sleep(0.1)
            assert request.transport is not None
            request.transport.abort()
            return resp
        if path == "/sse-invalid":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(b"this is not sse\n\nevent: message\ndata: {broken json\n\n")
            await resp.write(b"data: line1\ndata: line2\n\nretry: abc\n\n")
            await resp.write_eof()
            return resp
        if path == "/legacy/sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(
                f"event: endpoint\r\ndata: {self.origin}/legacy/messages?session_id=abc123\r\n\r\n".encode()
            )
            try:
                await asyncio.Event().wait()  # held open until the client or relay leaves
            except asyncio.CancelledError:
                self.closed_early.append(path)
                raise
            return resp
        if path == "/legacy/messages":
            return web.Response(status=202, text="Accepted")
        if path == "/big":
            size = int(request.query.get("mib", "30")) << 20
            resp = web.StreamResponse(headers={"Content-Type": "application/octet-stream"})
            resp.content_length = size
            await resp.prepare(request)
            chunk = b"x" * (1 << 20)
            for _ in range(size >> 20):
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        if path == "/slow-headers":
            try:
                await asyncio.Event().wait()  # held open until the client or relay leaves
            except asyncio.CancelledError:
                self.closed_early.append(path)
                raise
            return web.Response(text="late")
        return web.Response(status=404, text="not found")


@pytest.fixture(scope="session")
def fake_upstream() -> Iterator[FakeUpstream]:
    fu = FakeUpstream().start()
    yield fu
    fu.stop()


@pytest.fixture
def env_no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(os.environ, "NO_PROXY", "127.0.0.1,localhost")
