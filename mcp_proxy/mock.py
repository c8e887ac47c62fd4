"""Mock: stand in for a server, answering from a recording.

``mcptape mock SOURCE`` speaks MCP over stdio (or Streamable HTTP with ``--port``) and answers
each request with what the recording holds for it:

- **Matching** is on method + canonical params: key order ignored, the id never part of the key,
  ``_meta`` and progress tokens ignored, MRTR ``requestState`` compared as "present" (it is
  sealed per server process), more ignores by ``--ignore JSONPATH``. ``initialize`` and
  ``server/discover`` match on the method alone: every client describes itself differently.
- **Repeats**: identical recorded requests are served in recorded order, and the last one keeps
  answering (``--no-repeat`` makes a used-up match a miss instead).
- **Replay**: the recorded notifications and nested server requests of the exchange are sent
  first, in wire order (progress re-addressed to the live progress token; a nested request waits
  for the live client's answer), then the recorded response with the live request's id.
- **A miss** is a JSON-RPC error (-32601 when the method was never recorded, :data:`MISS_CODE`
  otherwise) whose ``data`` lists the nearest recorded requests and how each differs.
- **Record modes** as VCR has them: ``none`` (serve only; the CI default), ``once`` (record
  everything when the file does not exist yet, else serve only), ``new_episodes`` (serve what
  matches, forward misses to the real server and add them to the file), ``all`` (forward
  everything and rewrite the file). Forwarding goes to ``-- COMMAND`` or ``--upstream URL``.

:class:`MockIndex` (matching) is pure; :class:`MockSession` runs exchanges over any transport
given a ``send`` coroutine; :func:`serve_stdio` and :func:`serve_http` are the transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_proxy.diff import (
    Normalizer,
    Step,
    _similarity,
    canonical,
    conversation,
    json_changes,
)
from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction, classify, id_key
from mcp_proxy.recording.model import Recording, SessionRecording

#: JSON-RPC error code of a miss on a method that *was* recorded (server-defined range).
MISS_CODE = -32050
METHOD_NOT_FOUND = -32601
#: Requests matched on the method alone.
HANDSHAKE_METHODS = frozenset({"initialize", "server/discover"})
RECORD_MODES = ("none", "once", "new_episodes", "all")
#: How long a replayed nested request (sampling, elicitation, roots) waits for the client.
ASK_TIMEOUT = 30.0


# ============================================================================ matching (pure)


@dataclass
class Entry:
    """One recorded exchange the mock can serve."""

    step: Step
    key: str
    norm_params: Any
    origin: str  # "session#seq" for messages
    uses: int = 0


@dataclass
class Miss:
    """Why nothing matched, shaped as the error ``data`` the client receives."""

    method: str
    params: Any
    method_known: bool
    nearest: list[dict[str, Any]] = field(default_factory=list)
    exhausted: bool = False

    def error(self) -> dict[str, Any]:
        if not self.method_known:
            message = f"mcptape mock: {self.method!r} was never recorded"
            code = METHOD_NOT_FOUND
        elif self.exhausted:
            message = f"mcptape mock: every recorded answer to this {self.method} was already used"
            code = MISS_CODE
        else:
            message = f"mcptape mock: no recorded {self.method} request matches these params"
            code = MISS_CODE
        return {
            "code": code,
            "message": message,
            "data": {
                "mcptape": "mock-miss",
                "method": self.method,
                "params": self.params,
                "exhausted": self.exhausted,
                "nearest": self.nearest,
            },
        }


class MockIndex:
    """Recorded host requests by (method, canonical params), served in order."""

    def __init__(
        self,
        sessions: Sequence[SessionRecording],
        *,
        ignores: Sequence[str] = (),
        repeat_last: bool = True,
    ) -> None:
        self.norm = Normalizer.build(ignores)
        self.repeat_last = repeat_last
        self.entries: dict[tuple[str, str], list[Entry]] = {}
        self.by_method: dict[str, list[Entry]] = {}
        for s in sessions:
            self.add_session(s)

    def key_of(self, method: str, params: Any) -> tuple[str, Any]:
        if method in HANDSHAKE_METHODS:
            return "", None
        norm = self.norm(params if params is not None else {})
        return canonical(norm), norm

    def add_session(self, s: SessionRecording) -> None:
        for step in conversation(s):
            if step.direction != "c2s" or step.outcome == "notification" or step.response is None:
                continue
            key, norm = self.key_of(step.method, step.params)
            entry = Entry(step, key, norm, f"{s.id[:8]}#{step.seqs[0]}")
            self.entries.setdefault((step.method, key), []).append(entry)
            self.by_method.setdefault(step.method, []).append(entry)

    def lookup(self, method: str, params: Any) -> Entry | Miss:
        key, norm = self.key_of(method, params)
        found = self.entries.get((method, key))
        if found:
            for entry in found:
                if entry.uses == 0:
                    entry.uses += 1
                    return entry
            if self.repeat_last:
                found[-1].uses += 1
                return found[-1]
            return Miss(method, norm, True, self._nearest(method, norm), exhausted=True)
        shown = norm if method not in HANDSHAKE_METHODS else self.norm(params)
        return Miss(method, shown, method in self.by_method, self._nearest(method, norm))

    def _nearest(self, method: str, norm: Any, limit: int = 3) -> list[dict[str, Any]]:
        candidates = self.by_method.get(method) or [
            e for entries in self.by_method.values() for e in entries
        ]
        seen: set[str] = set()
        scored: list[tuple[float, Entry]] = []
        for e in candidates:
            ident = f"{e.step.method}:{e.key}"
            if ident in seen:
                continue
            seen.add(ident)
            same_method = 1.0 if e.step.method == method else 0.0
            scored.append((same_method + _similarity(norm, e.norm_params), e))
        scored.sort(key=lambda t: -t[0])
        out = []
        for _, e in scored[:limit]:
            diffs = [c.to_json() for c in json_changes(e.norm_params, norm, "$.params")][:10]
            if e.step.method != method:
                diffs.insert(
                    0, {"path": "$.method", "kind": "changed", "a": e.step.method, "b": method}
                )
            out.append(
                {
                    "method": e.step.method,
                    "params": e.norm_params,
                    "recorded_at": e.origin,
                    "used": e.uses,
                    "differences": diffs,
                }
            )
        return out


# ============================================================================ serving exchanges


def _progress_token(params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _compact(msg: Any) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class Captured:
    """Frames of forwarded traffic, kept to write the new episodes into the recording."""

    transport: str
    command: list[str] | None = None
    upstream: str | None = None
    frames: list[dict[str, Any]] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)

    def add(self, direction: Direction, raw: bytes, channel: Channel = Channel.STDIO) -> None:
        c = classify(raw, channel)
        self.frames.append(
            {
                "seq": len(self.frames) + 1,
                "ts": time.time(),
                "mono_ns": time.monotonic_ns(),
                "direction": direction.value,
                "channel": channel.value,
                "kind": c.kind.value,
                "method": c.method,
                "msg_id": c.msg_id,
                "error_code": c.error_code,
                "size": len(raw),
                "complete": True,
                "partial_parse": c.partial,
                "raw": raw,
                "http_exchange_id": None,
                "sse_id": None,
                "sse_event": None,
            }
        )

    def session(self, name: str | None) -> SessionRecording:
        """The forwarded traffic as a session (era and peers read off its handshake)."""
        import uuid

        from mcp_proxy.handshake import HandshakeTracker

        tracker = HandshakeTracker()
        facts: dict[str, Any] = {}
        for f in self.frames:
            c = classify(f["raw"], f["channel"])
            changes = tracker.observe(Direction(f["direction"]), c)
            if changes:
                facts.update(changes)
        from mcp_proxy import __version__

        row = {
            "id": uuid.uuid4().hex,
            "name": name,
            "transport": self.transport,
            "status": "ended",
            "started_at": self.started_at,
            "ended_at": time.time(),
            "updated_at": self.frames[-1]["ts"] if self.frames else None,
            "command": self.command,
            "upstream": self.upstream,
            "frame_count": len(self.frames),
            "gap_count": 0,
            "recorder_version": __version__,
            **facts,
        }
        row["meta"] = {**(facts.get("meta") or {}), "recorded_by": "mcptape mock"}
        return SessionRecording(row, frames=list(self.frames))


class Upstream:
    """A real server that misses are forwarded to (recording modes)."""

    captured: Captured

    async def start(self) -> None: ...

    async def request(
        self, msg: dict[str, Any], on_event: Callable[[str, dict[str, Any]], Awaitable[Any]]
    ) -> dict[str, Any]:
        raise NotImplementedError

    async def notify(self, msg: dict[str, Any]) -> None: ...

    async def close(self) -> None: ...


class StdioUpstream(Upstream):
    """A server subprocess spoken to over stdio; its traffic is captured frame by frame."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        self.argv = argv
        self.timeout = timeout
        self.captured = Captured("stdio", command=list(argv))
        self.proc: asyncio.subprocess.Process | None = None
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.handlers: dict[str, Callable[[str, dict[str, Any]], Awaitable[Any]]] = {}
        self.reader: asyncio.Task[None] | None = None
        self.lock = asyncio.Lock()

    async def start(self) -> None:
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=1 << 30,
            )
        except OSError as exc:
            raise UserError(f"cannot start the upstream server {self.argv[0]}: {exc}") from exc
        self.reader = asyncio.create_task(self._read())

    async def _write(self, msg: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        raw = _compact(msg) + b"\n"
        self.captured.add(Direction.C2S, raw)
        self.proc.stdin.write(raw)
        await self.proc.stdin.drain()

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                break
            self.captured.add(Direction.S2C, line)
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if "method" in msg:
                # Events belong to the one forwarded request in flight (stdio has no routing).
                handler = next(iter(self.handlers.values()), None)
                if handler is None:
                    continue
                if msg.get("id") is not None:
                    answer = await handler("ask", msg)
                    if answer is not None:
                        await self._write({**answer, "id": msg["id"]})
                else:
                    await handler("notify", msg)
            elif msg.get("id") is not None:
                fut = self.waiting.pop(id_key(msg["id"]) or "", None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(UserError("the upstream server closed its output"))

    async def request(
        self, msg: dict[str, Any], on_event: Callable[[str, dict[str, Any]], Awaitable[Any]]
    ) -> dict[str, Any]:
        key = id_key(msg.get("id")) or ""
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[key] = fut
        self.handlers[key] = on_event
        try:
            await self._write(msg)
            return await asyncio.wait_for(fut, self.timeout)
        finally:
            self.handlers.pop(key, None)
            self.waiting.pop(key, None)

    async def notify(self, msg: dict[str, Any]) -> None:
        await self._write(msg)

    async def close(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            await self.proc.wait()
        if self.reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.reader, 2)


class HttpUpstream(Upstream):
    """A Streamable HTTP server; the session id and protocol version are carried over."""

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        self.captured = Captured("http", upstream=url)
        self.session_id: str | None = None
        self.version: str | None = None
        self.client: Any = None

    async def start(self) -> None:
        import aiohttp

        self.client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))

    def _headers(self, msg: dict[str, Any]) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = self.version
        if isinstance(meta, dict) and isinstance(
            meta.get("io.modelcontextprotocol/protocolVersion"), str
        ):
            version = meta["io.modelcontextprotocol/protocolVersion"]
        if version:
            h["MCP-Protocol-Version"] = version
        if version and version >= "2026" and "method" in msg:
            h["Mcp-Method"] = str(msg["method"])
            name = params.get("name") or params.get("uri") if isinstance(params, dict) else None
            if isinstance(name, str) and name.isascii() and name.isprintable():
                h["Mcp-Name"] = name
        return h

    async def _post(
        self,
        msg: dict[str, Any],
        on_event: Callable[[str, dict[str, Any]], Awaitable[Any]] | None,
    ) -> dict[str, Any] | None:
        import aiohttp

        from mcp_proxy.framing import SSEParser

        raw = _compact(msg)
        self.captured.add(Direction.C2S, raw, Channel.HTTP)
        try:
            async with self.client.post(self.url, data=raw, headers=self._headers(msg)) as resp:
                sid = resp.headers.get("Mcp-Session-Id")
                if sid:
                    self.session_id = sid
                ctype = resp.headers.get("Content-Type", "")
                if "text/event-stream" in ctype:
                    parser = SSEParser()
                    async for chunk in resp.content.iter_any():
                        for ev in parser.feed(chunk):
                            out = await self._event(ev.data, on_event)
                            if out is not None:
                                return out
                    return None
                body = await resp.read()
                if body.strip():
                    self.captured.add(Direction.S2C, body, Channel.HTTP)
                    reply = json.loads(body)
                    return reply if isinstance(reply, dict) else None
                return None
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise UserError(f"upstream {self.url}: {exc or type(exc).__name__}") from exc

    async def _event(
        self, data: bytes, on_event: Callable[[str, dict[str, Any]], Awaitable[Any]] | None
    ) -> dict[str, Any] | None:
        if not data.strip():
            return None
        self.captured.add(Direction.S2C, data, Channel.SSE)
        try:
            msg = json.loads(data)
        except ValueError:
            return None
        if not isinstance(msg, dict):
            return None
        if "method" not in msg:
            return msg
        if on_event is not None:
            if msg.get("id") is not None:
                answer = await on_event("ask", msg)
                if answer is not None:
                    await self._post({**answer, "id": msg["id"]}, None)
            else:
                await on_event("notify", msg)
        return None

    async def request(
        self, msg: dict[str, Any], on_event: Callable[[str, dict[str, Any]], Awaitable[Any]]
    ) -> dict[str, Any]:
        reply = await self._post(msg, on_event)
        if reply is None:
            raise UserError(f"upstream {self.url} gave no response to {msg.get('method')}")
        if msg.get("method") == "initialize" and isinstance(reply.get("result"), dict):
            self.version = reply["result"].get("protocolVersion")
        return reply

    async def notify(self, msg: dict[str, Any]) -> None:
        await self._post(msg, None)

    async def close(self) -> None:
        if self.client is not None:
            if self.session_id:
                with contextlib.suppress(Exception):
                    await self.client.delete(self.url, headers={"Mcp-Session-Id": self.session_id})
            await self.client.close()


Send = Callable[[dict[str, Any]], Awaitable[None]]


class MockSession:
    """One client connection: matches, replays, forwards, and answers misses.

    ``send`` writes one message to the client (stdio line or SSE event, the transport decides).
    """

    def __init__(
        self,
        index: MockIndex,
        *,
        mode: str = "none",
        upstream: Upstream | None = None,
        ask_timeout: float = ASK_TIMEOUT,
    ) -> None:
        self.index = index
        self.mode = mode
        self.upstream = upstream
        self.ask_timeout = ask_timeout
        self.asks: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.handshake: list[dict[str, Any]] = []  # the live client's handshake, for upstream
        self._upstream_ready = False
        self._upstream_lock = asyncio.Lock()
        self.misses = 0
        self.forwarded = 0

    # ---------------------------------------------------------------- client → mock
    async def on_client_message(self, msg: Any, send: Send) -> None:
        """Handle one parsed message from the client; requests are answered through ``send``."""
        if not isinstance(msg, dict):
            return
        method = msg.get("method")
        if not isinstance(method, str):
            if msg.get("id") is not None:  # the client answering one of our asks
                fut = self.asks.pop(id_key(msg["id"]) or "", None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
            return
        if method in ("initialize", "notifications/initialized"):
            self.handshake.append(msg)
        if msg.get("id") is None:
            if self.mode == "all" and self.upstream is not None and self._upstream_ready:
                await self.upstream.notify(msg)
            return
        await self._serve_request(msg, send)

    async def _serve_request(self, msg: dict[str, Any], send: Send) -> None:
        method, params, live_id = msg["method"], msg.get("params"), msg["id"]
        if self.mode == "all" and self.upstream is not None:
            await self._forward(msg, send)
            return
        found = self.index.lookup(method, params)
        if isinstance(found, Entry):
            await self._replay(found.step, msg, send)
            return
        if self.mode in ("new_episodes", "once") and self.upstream is not None:
            await self._forward(msg, send)
            return
        if method == "ping":
            await send({"jsonrpc": "2.0", "id": live_id, "result": {}})
            return
        self.misses += 1
        await send({"jsonrpc": "2.0", "id": live_id, "error": found.error()})

    async def _replay(self, step: Step, live: dict[str, Any], send: Send) -> None:
        token = _progress_token(live.get("params"))
        for kind, event in step.events:
            if kind == "notify":
                if event.get("method") == "notifications/progress":
                    if token is None:
                        continue
                    event = {
                        **event,
                        "params": {**(event.get("params") or {}), "progressToken": token},
                    }
                await send(event)
            else:
                await self._ask(event, send)
        response = step.response or {}
        await send({**response, "id": live["id"]})

    async def _ask(self, request: dict[str, Any], send: Send) -> dict[str, Any] | None:
        """Send a nested server request to the client and wait (bounded) for its answer."""
        ask_id = f"mcptape-mock-{next(self._ids)}"
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asks[id_key(ask_id) or ""] = fut
        await send({**request, "id": ask_id})
        try:
            return await asyncio.wait_for(fut, self.ask_timeout)
        except TimeoutError:
            self.asks.pop(id_key(ask_id) or "", None)
            return None

    async def _forward(self, msg: dict[str, Any], send: Send) -> None:
        assert self.upstream is not None
        async with self._upstream_lock:
            if not self._upstream_ready:
                await self.upstream.start()
                self._upstream_ready = True
                # A fresh upstream must see the client's handshake before anything else.
                for hs in self.handshake:
                    if hs is msg:
                        continue
                    if hs.get("id") is not None:
                        await self.upstream.request(hs, self._no_events)
                    else:
                        await self.upstream.notify(hs)
        self.forwarded += 1

        async def on_event(kind: str, event: dict[str, Any]) -> dict[str, Any] | None:
            if kind == "notify":
                await send(event)
                return None
            answer = await self._ask(event, send)
            if answer is None:
                return {
                    "jsonrpc": "2.0",
                    "error": {"code": -32603, "message": "no answer from the client"},
                }
            return {k: v for k, v in answer.items() if k != "id"}

        try:
            reply = await self.upstream.request(msg, on_event)
        except (UserError, TimeoutError) as exc:
            await send(
                {
                    "jsonrpc": "2.0",
                    "id": msg["id"],
                    "error": {"code": -32603, "message": f"mcptape mock: forwarding failed: {exc}"},
                }
            )
            return
        await send({**reply, "id": msg["id"]})

    @staticmethod
    async def _no_events(kind: str, event: dict[str, Any]) -> None:
        return None


# ============================================================================ transports


def _make_upstream(
    command: list[str] | None, upstream: str | None, timeout: float
) -> Upstream | None:
    if command:
        return StdioUpstream(command, timeout)
    if upstream:
        return HttpUpstream(upstream, timeout)
    return None


async def serve_stdio(
    session: MockSession,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
) -> None:
    """Serve one client over stdio until it closes its end (EOF)."""
    from mcp_proxy.framing import LineFramer

    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    tasks: set[asyncio.Task[None]] = set()

    async def send(msg: dict[str, Any]) -> None:
        data = _compact(msg) + b"\n"
        async with lock:
            await loop.run_in_executor(None, _write_all, stdout_fd, data)

    framer = LineFramer()
    while True:
        chunk = await loop.run_in_executor(None, _read, stdin_fd)
        if not chunk:
            break
        for line in framer.feed(chunk):
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            task = asyncio.create_task(session.on_client_message(msg, send))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=session.ask_timeout + 5)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BrokenPipeError:
            return
        view = view[n:]


async def serve_http(
    index_factory: Callable[[], MockSession],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> list[MockSession]:
    """Serve Streamable HTTP on ``host:port`` until ``stop`` is set (or the task is cancelled).

    One :class:`MockSession` per MCP session: created on ``initialize`` (which hands out an
    ``Mcp-Session-Id``), or one shared session for sessionless (2026-07-28) clients. Replies are
    SSE when the exchange has notifications or nested requests, plain JSON otherwise.
    """
    import uuid

    from aiohttp import web

    sessions: dict[str, MockSession] = {}
    shared: list[MockSession] = []
    every: list[MockSession] = []  # for the summary: DELETE forgets a session, not its misses

    def session_for(request: web.Request, msg: Any) -> tuple[MockSession, str | None]:
        sid = request.headers.get("Mcp-Session-Id")
        if sid and sid in sessions:
            return sessions[sid], None
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            new = uuid.uuid4().hex
            sessions[new] = index_factory()
            every.append(sessions[new])
            return sessions[new], new
        if not shared:
            shared.append(index_factory())
            every.append(shared[0])
        return shared[0], None

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.method == "DELETE":
            sessions.pop(request.headers.get("Mcp-Session-Id", ""), None)
            return web.Response(status=200)
        if request.method != "POST":
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        body = await request.read()
        try:
            msg = json.loads(body)
        except ValueError:
            err = {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32700, "message": "Parse error"},
            }
            return web.json_response(err, status=400)
        mock, new_sid = session_for(request, msg)
        headers = {"Mcp-Session-Id": new_sid} if new_sid else {}
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("method"), str)
            or msg.get("id") is None
        ):
            await mock.on_client_message(msg, _discard)
            return web.Response(status=202, headers=headers)
        out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def send(m: dict[str, Any]) -> None:
            await out.put(m)

        async def run() -> None:
            try:
                await mock.on_client_message(msg, send)
            finally:
                await out.put(None)

        task = asyncio.create_task(run())
        first = await out.get()
        if first is None:
            await task
            return web.Response(status=202, headers=headers)
        if "method" not in first and first.get("id") == msg.get("id"):
            await task
            return web.json_response(first, headers=headers, dumps=lambda o: _compact(o).decode())
        resp = web.StreamResponse(
            status=200,
            headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )
        await resp.prepare(request)
        item: dict[str, Any] | None = first
        while item is not None:
            await resp.write(b"event: message\r\ndata: " + _compact(item) + b"\r\n\r\n")
            item = await out.get()
        await task
        await resp.write_eof()
        return resp

    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    server = site._server
    bound = port
    sockets = getattr(server, "sockets", None) if server is not None else None
    if sockets:
        bound = sockets[0].getsockname()[1]
    url = f"http://{host}:{bound}/mcp"
    if ready is not None:
        ready(url)
    try:
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()
    return every


async def _discard(msg: dict[str, Any]) -> None:
    return None


# ============================================================================ the command


@dataclass
class MockOptions:
    """What ``mcptape mock`` was asked for."""

    source: str
    port: int | None = None
    host: str = "127.0.0.1"
    mode: str = "none"
    command: list[str] | None = None
    upstream: str | None = None
    ignores: Sequence[str] = ()
    repeat_last: bool = True
    timeout: float = 30.0
    db: str | None = None


def _load_for_mock(
    opts: MockOptions,
) -> tuple[Recording | None, list[SessionRecording], Path | None]:
    """The sessions to serve, and the file to write new episodes to (recording modes)."""
    from mcp_proxy.recording.database import load_source, split_source
    from mcp_proxy.recording.registry import read_recording

    file_ref = split_source(opts.source)
    path = Path(file_ref[0]) if file_ref else None
    if opts.mode != "none" and path is None:
        raise UserError(f"record mode {opts.mode!r} needs a recording FILE to write, not a session")
    if opts.mode != "none" and not (opts.command or opts.upstream):
        raise UserError(
            f"record mode {opts.mode!r} forwards to a real server: give -- COMMAND… or --upstream URL"
        )
    if path is not None and opts.mode in ("once", "all") and not path.exists():
        return None, [], path
    if opts.mode == "all":
        return read_recording(path) if path and path.exists() else None, [], path  # type: ignore[arg-type]
    if path is not None and file_ref is not None and file_ref[1] is None:
        rec = read_recording(path)
        return rec, rec.sessions, path
    rec, one = asyncio.run(load_source(opts.source, opts.db))
    return rec, [one], path


def run_mock(opts: MockOptions, *, ready: Callable[[str], None] | None = None) -> int:
    """``mcptape mock``: serve until the client leaves (stdio) or a signal arrives (HTTP)."""
    if opts.mode not in RECORD_MODES:
        raise UserError(f"unknown record mode {opts.mode!r} (one of {', '.join(RECORD_MODES)})")
    recording, sessions, path = _load_for_mock(opts)
    mode = opts.mode
    if mode == "once" and sessions:
        mode = "none"  # the cassette exists: serve it, never touch it
    forwarding = mode in ("once", "new_episodes", "all")
    upstreams: list[Upstream] = []

    def new_session() -> MockSession:
        up = _make_upstream(opts.command, opts.upstream, opts.timeout) if forwarding else None
        if up is not None:
            upstreams.append(up)
        index = MockIndex(sessions, ignores=opts.ignores, repeat_last=opts.repeat_last)
        return MockSession(index, mode=mode, upstream=up, ask_timeout=opts.timeout)

    async def main() -> list[MockSession]:
        try:
            if opts.port is None:
                s = new_session()
                await serve_stdio(s)
                return [s]
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            import signal

            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, stop.set)
            return await serve_http(
                new_session, host=opts.host, port=opts.port, ready=ready, stop=stop
            )
        finally:
            for up in upstreams:
                with contextlib.suppress(Exception):
                    await up.close()

    served = asyncio.run(main())
    if forwarding and path is not None:
        new = [
            up.captured.session(f"{path.stem} (recorded by mock)")
            for up in upstreams
            if up.captured.frames
        ]
        if new:
            keep = sessions if mode == "new_episodes" else []
            from mcp_proxy.recording.jsonl import dumps_jsonl
            from mcp_proxy.recording.model import write_file

            write_file(path, [dumps_jsonl(Recording([*keep, *new], origin=str(path)))])
            print(f"mcptape mock: wrote {len(new)} new session(s) to {path}", file=sys.stderr)
    misses = sum(s.misses for s in served)
    if misses:
        print(f"mcptape mock: {misses} request(s) had no recorded answer", file=sys.stderr)
    del recording
    return 0


__all__ = [
    "MISS_CODE",
    "RECORD_MODES",
    "Entry",
    "Miss",
    "MockIndex",
    "MockOptions",
    "MockSession",
    "run_mock",
    "serve_http",
    "serve_stdio",
]


if __name__ == "__main__":
    # ``python -m mcp_proxy.mock SOURCE …`` = ``mcptape mock SOURCE …`` (for hosts without the
    # console script on PATH, e.g. the pytest plugin's stdio command).
    from mcp_proxy.cli import main

    sys.argv = ["mcptape", "mock", *sys.argv[1:]]
    main()
