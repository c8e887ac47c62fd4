"""Build recorded-shape sessions by hand: frame rows, HTTP exchanges, a session row.

Analysis tests need exact wire situations that no well-behaved SDK produces (a response to an
unknown id, a header that disagrees with the body, a crash with three requests in flight). A
:class:`Wire` writes them as the store would return them — the same keys, the same
classification (through :func:`mcp_proxy.frames.classify`, the one classifier) — so the pure
analysis can be fed directly, and :meth:`Wire.record` pushes the same frames through the real
:class:`~mcp_proxy.recorder.Recorder` into a database for tests of the store and the CLI.

Example::

    w = Wire.initialized()                      # initialize + result + initialized
    w.request("tools/call", 2, {"name": "echo", "arguments": {}})
    w.end()                                      # no response: exchange.no_response
    codes = {f.code for f in w.analyze().findings}
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from mcp_proxy.frames import Channel, Direction, Frame, classify

META = "io.modelcontextprotocol/"
MODERN = "2026-07-28"
CLIENT_CAPS: dict[str, Any] = {
    "sampling": {},
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
}
SERVER_CAPS: dict[str, Any] = {
    "tools": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
    "prompts": {"listChanged": True},
    "logging": {},
    "completions": {},
}


def envelope(
    version: str = MODERN,
    *,
    caps: Mapping[str, Any] | None = None,
    log_level: str | None = None,
    client: str = "factory-client",
) -> dict[str, Any]:
    """A 2026-07-28 request ``_meta`` envelope."""
    meta: dict[str, Any] = {
        META + "protocolVersion": version,
        META + "clientInfo": {"name": client, "version": "1.0"},
        META + "clientCapabilities": dict(CLIENT_CAPS if caps is None else caps),
    }
    if log_level is not None:
        meta[META + "logLevel"] = log_level
    return meta


def _bytes(raw: bytes | str | Mapping[str, Any] | list[Any], channel: str) -> bytes:
    if isinstance(raw, bytes):
        return raw
    if isinstance(raw, str):
        data = raw.encode("utf-8")
    else:
        data = json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if channel in ("stdio", "stderr") and not data.endswith(b"\n"):
        data += b"\n"
    return data


class Wire:
    """A session under construction: frames in order, with clocks that advance per frame."""

    def __init__(
        self,
        *,
        transport: str = "stdio",
        start: float = 1_750_000_000.0,
        step_ms: float = 1.0,
        session_id: str = "f" * 32,
        name: str = "factory",
    ) -> None:
        self.transport = transport
        self.step_ms = step_ms
        self._wall = start
        self._mono = 1_000_000_000
        self.frames: list[dict[str, Any]] = []
        self.http_exchanges: list[dict[str, Any]] = []
        self.session: dict[str, Any] = {
            "id": session_id,
            "name": name,
            "transport": transport,
            "status": "live",
            "started_at": start,
            "ended_at": None,
            "exit_code": None,
            "exit_signal": None,
            "frame_count": 0,
        }

    # ------------------------------------------------------------------ clocks
    def wait(self, ms: float) -> Wire:
        """Let ``ms`` milliseconds pass before the next frame."""
        self._wall += ms / 1000
        self._mono += int(ms * 1_000_000)
        return self

    # ------------------------------------------------------------------ raw frames
    def frame(
        self,
        direction: str,
        raw: bytes | str | Mapping[str, Any] | list[Any],
        *,
        channel: str | None = None,
        http: int | None = None,
        complete: bool = True,
        sse_event: str | None = None,
    ) -> dict[str, Any]:
        """Append one frame (bytes, text or a JSON value) and return its row."""
        ch = channel or ("http" if http is not None else "stdio")
        data = _bytes(raw, ch)
        c = classify(data, ch)
        self.wait(self.step_ms)
        row = {
            "seq": len(self.frames) + 1,
            "ts": self._wall,
            "mono_ns": self._mono,
            "direction": direction,
            "channel": ch,
            "kind": c.kind.value,
            "method": c.method,
            "msg_id": c.msg_id,
            "error_code": c.error_code,
            "size": len(data),
            "complete": complete,
            "partial_parse": c.partial,
            "raw": data,
            "http_exchange_id": http,
            "sse_id": None,
            "sse_event": sse_event if ch == "sse" else None,
        }
        self.frames.append(row)
        self.session["frame_count"] = len(self.frames)
        return row

    # ------------------------------------------------------------------ JSON-RPC
    def request(
        self,
        method: str,
        id: int | str,
        params: Mapping[str, Any] | None = None,
        *,
        direction: str = "c2s",
        **kw: Any,
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            msg["params"] = dict(params)
        return self.frame(direction, msg, **kw)

    def notify(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        direction: str = "c2s",
        **kw: Any,
    ) -> dict[str, Any]:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = dict(params)
        return self.frame(direction, msg, **kw)

    def result(
        self,
        id: int | str | None,
        result: Mapping[str, Any] | None = None,
        *,
        direction: str = "s2c",
        **kw: Any,
    ) -> dict[str, Any]:
        return self.frame(
            direction, {"jsonrpc": "2.0", "id": id, "result": dict(result or {})}, **kw
        )

    def error(
        self,
        id: int | str | None,
        code: int,
        message: str = "error",
        data: Any = None,
        *,
        direction: str = "s2c",
        **kw: Any,
    ) -> dict[str, Any]:
        err: dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        return self.frame(direction, {"jsonrpc": "2.0", "id": id, "error": err}, **kw)

    def progress(
        self, token: int | str, progress: float, total: float | None = None, **kw: Any
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"progressToken": token, "progress": progress}
        if total is not None:
            params["total"] = total
        return self.notify(
            "notifications/progress", params, direction=kw.pop("direction", "s2c"), **kw
        )

    def log(self, data: Any = "log line", level: str = "info", **kw: Any) -> dict[str, Any]:
        return self.notify(
            "notifications/message",
            {"level": level, "logger": "factory", "data": data},
            direction=kw.pop("direction", "s2c"),
            **kw,
        )

    def cancel(self, request_id: int | str, *, direction: str = "c2s", **kw: Any) -> dict[str, Any]:
        return self.notify(
            "notifications/cancelled",
            {"requestId": request_id, "reason": "test"},
            direction=direction,
            **kw,
        )

    def noise(
        self, text: bytes | str = "not json", *, direction: str = "s2c", **kw: Any
    ) -> dict[str, Any]:
        data = text if isinstance(text, bytes) else text.encode()
        if kw.get("channel", "stdio") == "stdio" and not data.endswith(b"\n"):
            data += b"\n"
        return self.frame(direction, data, **kw)

    def stderr(self, text: str) -> dict[str, Any]:
        return self.frame("s2c", text, channel="stderr")

    # ------------------------------------------------------------------ handshakes
    @classmethod
    def initialized(
        cls,
        version: str = "2025-11-25",
        *,
        client_caps: Mapping[str, Any] | None = None,
        server_caps: Mapping[str, Any] | None = None,
        initialized: bool = True,
        **kw: Any,
    ) -> Wire:
        """A stdio session that has completed the initialize handshake (ids from 1)."""
        w = cls(**kw)
        w.handshake(
            version, client_caps=client_caps, server_caps=server_caps, initialized=initialized
        )
        return w

    def handshake(
        self,
        version: str = "2025-11-25",
        *,
        client_caps: Mapping[str, Any] | None = None,
        server_caps: Mapping[str, Any] | None = None,
        initialized: bool = True,
        id: int | str = 1,
        http: tuple[int, int | None] | None = None,
    ) -> None:
        """initialize → result → notifications/initialized (HTTP: the exchanges to use)."""
        h0, h1 = http if http else (None, None)
        self.request(
            "initialize",
            id,
            {
                "protocolVersion": version,
                "capabilities": dict(CLIENT_CAPS if client_caps is None else client_caps),
                "clientInfo": {"name": "factory-client", "version": "1.0"},
            },
            http=h0,
        )
        self.result(
            id,
            {
                "protocolVersion": version,
                "capabilities": dict(SERVER_CAPS if server_caps is None else server_caps),
                "serverInfo": {"name": "factory-server", "version": "1.0"},
            },
            http=h0,
        )
        if initialized:
            self.notify("notifications/initialized", http=h1)

    @classmethod
    def modern(cls, *, server_caps: Mapping[str, Any] | None = None, **kw: Any) -> Wire:
        """A 2026-07-28 stdio session that has done server/discover (id 1)."""
        w = cls(**kw)
        w.request("server/discover", 1, {"_meta": envelope()})
        w.result(
            1,
            {
                "supportedVersions": [MODERN],
                "capabilities": dict(SERVER_CAPS if server_caps is None else server_caps),
                "ttlMs": 0,
                "cacheScope": "private",
                "resultType": "complete",
                "_meta": {META + "serverInfo": {"name": "factory-server", "version": "1.0"}},
            },
        )
        return w

    def call(
        self,
        id: int | str,
        tool: str = "echo",
        arguments: Mapping[str, Any] | None = None,
        *,
        modern: bool = False,
        result: Mapping[str, Any] | None = None,
        log_level: str | None = None,
        **kw: Any,
    ) -> None:
        """A tools/call and its (successful) result."""
        params: dict[str, Any] = {"name": tool, "arguments": dict(arguments or {})}
        if modern:
            params["_meta"] = envelope(log_level=log_level)
        self.request("tools/call", id, params, **kw)
        res = dict(result or {"content": [{"type": "text", "text": "ok"}], "isError": False})
        if modern:
            res.setdefault("resultType", "complete")
        self.result(id, res, **kw)

    # ------------------------------------------------------------------ HTTP
    def exchange(
        self,
        method: str = "POST",
        *,
        url: str = "http://127.0.0.1:9/mcp",
        status: int | None = 200,
        request_headers: list[list[str]] | None = None,
        response_headers: list[list[str]] | None = None,
        outcome: str | None = "complete",
        error: str | None = None,
    ) -> int:
        """Add an HTTP exchange row; returns its id for frames to point at."""
        hid = len(self.http_exchanges) + 1
        self.wait(self.step_ms)
        self.http_exchanges.append(
            {
                "id": hid,
                "session_id": self.session["id"],
                "method": method,
                "url": url,
                "status": status,
                "request_headers": request_headers
                if request_headers is not None
                else [
                    ["content-type", "application/json"],
                    ["accept", "application/json, text/event-stream"],
                ],
                "response_headers": response_headers
                if response_headers is not None
                else [["content-type", "application/json"]],
                "started_at": self._wall,
                "first_byte_at": None,
                "ended_at": None,
                "outcome": outcome,
                "error": error,
                "request_size": None,
                "response_size": None,
                "meta": None,
            }
        )
        if self.transport == "stdio":
            self.transport = self.session["transport"] = "http"
        return hid

    # ------------------------------------------------------------------ the end
    def end(
        self,
        status: str = "ended",
        *,
        exit_code: int | None = 0,
        exit_signal: int | None = None,
    ) -> Wire:
        self.session.update(
            status=status, exit_code=exit_code, exit_signal=exit_signal, ended_at=self._wall
        )
        return self

    def analyze(self) -> Any:
        """Run the analysis on what was built (ends the session first if still live)."""
        from mcp_proxy.analysis import analyze

        return analyze(self.frames, session=self.session, http_exchanges=self.http_exchanges)

    def codes(self) -> set[str]:
        return {f.code for f in self.analyze().findings}

    # ------------------------------------------------------------------ through the recorder
    def record(self, db_url: str, *, name: str | None = None, end: bool = True) -> str:
        """Write this session through the real Recorder into ``db_url``; returns its id."""
        from mcp_proxy.recorder import Recorder

        rec = Recorder(db_url, flush_interval=0.01)
        rec.start()
        try:
            sid = rec.new_session(transport=self.transport, name=name or self.session["name"])
            locals_: dict[int, int] = {}
            by_first_frame: dict[int, list[dict[str, Any]]] = {}
            for row in self.http_exchanges:
                by_first_frame.setdefault(row["id"], []).append(row)
            made: set[int] = set()
            for f in self.frames:
                hid = f["http_exchange_id"]
                if hid is not None and hid not in made:
                    self._new_exchange(rec, sid, hid, locals_)
                    made.add(hid)
                rec.put(
                    sid,
                    Frame(
                        Direction(f["direction"]),
                        Channel(f["channel"]),
                        f["raw"],
                        f["mono_ns"],
                        f["ts"],
                        complete=f["complete"],
                        http_exchange=locals_.get(hid) if hid is not None else None,
                        sse_event=f["sse_event"],
                    ),
                )
            for row in self.http_exchanges:
                if row["id"] not in made:
                    self._new_exchange(rec, sid, row["id"], locals_)
            if end and self.session["status"] != "live":
                rec.end_session(
                    sid,
                    status=self.session["status"],
                    exit_code=self.session["exit_code"],
                    exit_signal=self.session["exit_signal"],
                )
        finally:
            rec.close()
        return sid

    def _new_exchange(self, rec: Any, sid: str, hid: int, locals_: dict[int, int]) -> None:
        row = self.http_exchanges[hid - 1]
        fields = {k: row[k] for k in row if k not in ("id", "session_id")}
        locals_[hid] = rec.new_exchange(sid, **fields)


def now() -> float:
    return time.time()
