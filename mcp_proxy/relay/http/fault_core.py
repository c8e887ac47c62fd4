"""Shared pieces of the HTTP relay's fault layer (see :mod:`mcp_proxy.relay.http.faults`):
what a decision is, what an exchange's faults owe the recording, and the answers, resets and
events mcptape writes in a peer's place."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp

from mcp_proxy.faults.engine import Decision, FaultEngine
from mcp_proxy.frames import Channel, Direction
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.common import meta_body
from mcp_proxy.relay.http.front import FrontRequest, RelayResponse, plain_response
from mcp_proxy.relay.http.wire import WireFrame

if TYPE_CHECKING:
    from mcp_proxy.relay.http.exchange import Exchange
    from mcp_proxy.relay.http.server import HTTPRelay

__all__ = ["Decision", "FaultEngine", "injected_status"]

_ANSWERS = ("error", "tool-error", "http")


def _throttle_s(settings: Any, size: int) -> float:
    bps = int(settings.get("bps", 0) or 0)
    return size / bps if bps > 0 else 0.0


def injected_status(settings: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and body of an ``http`` rule, as the host is to get them.

    ``header=Name:value`` settings are sent as given, in order. A body that looks like JSON
    is labelled ``application/json`` unless a header says otherwise; no body is an empty one.
    """
    status = int(settings["status"])
    headers: list[tuple[str, str]] = []
    for h in settings.get("header") or []:
        name, _, value = str(h).partition(":")
        headers.append((name.strip(), value.strip()))
    body_setting = settings.get("body")
    if body_setting is None:
        body = b""
    elif isinstance(body_setting, bytes):
        body = body_setting
    elif isinstance(body_setting, str):
        body = body_setting.encode()
    else:
        body = json.dumps(body_setting, separators=(",", ":")).encode()
    named = {n.lower() for n, _ in headers}
    if body and "content-type" not in named:
        ctype = "application/json" if body.lstrip()[:1] in (b"{", b"[") else "text/plain"
        headers.append(("Content-Type", ctype))
    return status, headers, body


def _answer_body(decision: Decision) -> bytes | None:
    """The JSON-RPC message an ``error``/``tool-error`` rule answers with (no line end), or
    None when there is nothing to answer (a notification)."""
    answer = decision.replacement(b"")
    return answer.rstrip(b"\r\n") if answer is not None else None


@dataclass
class _Faults:
    """What one exchange's faults owe the recording (findings wait until it has a session)."""

    relay: HTTPRelay
    ex: Exchange
    engine: FaultEngine
    pending: list[tuple[Decision, dict[str, Any]]] = field(default_factory=list)

    def fired(self, decision: Decision, **note: Any) -> None:
        """A rule fired: noted in the exchange's meta, its finding handed over when placed."""
        self.ex.meta.setdefault("injected", []).append(
            {"rule": decision.rule.describe(), "direction": decision.direction, **note}
        )
        self.pending.append((decision, note))
        self.flush()

    def flush(self) -> None:
        ex = self.ex
        if not self.pending or ex.entry is None:
            return
        rec = self.relay.recorder
        add = getattr(rec, "add_finding", None)
        for decision, note in self.pending:
            finding = decision.finding()
            detail = dict(finding.get("detail") or {})
            detail.update(note)
            finding["detail"] = json.dumps(detail, default=str, ensure_ascii=False)
            if add is not None:
                add(ex.entry.session_id, **finding)
        self.pending = []

    def place(self) -> None:
        """Place the exchange (its session decides where the findings go) and flush them."""
        if self.ex.entry is None:
            self.ex.attach_fallback()
        self.flush()

    def inject(self, direction: Direction, raw: bytes, *, sse: SSEEvent | None = None) -> None:
        """Bytes mcptape put on the wire in a peer's place: an ``inject`` frame.

        Like an ``sse`` frame, an injected event is recorded as its data, its type and id in
        their own columns (``sse``: the event it stands in for).
        """
        self.ex.frame(
            WireFrame(
                direction,
                Channel.INJECT,
                raw,
                time.monotonic_ns(),
                time.time(),
                True,
                sse_id=sse.id if sse is not None else None,
                sse_event=sse.event if sse is not None else None,
            )
        )


def _accepted(relay: HTTPRelay, ex: Exchange, legacy: bool) -> RelayResponse:
    """``202`` as the server says it: empty (Streamable HTTP) or ``Accepted`` (legacy SSE).

    Not a JSON-RPC message, so (as for the server's own ``Accepted``) it is kept in the
    exchange's meta rather than as a frame.
    """
    body = b"Accepted" if legacy else b""
    headers = {"Content-Type": "text/plain; charset=utf-8"} if legacy else {}
    ex.update(
        status=202,
        first_byte_at=time.time(),
        response_headers=[[k, v] for k, v in headers.items()]
        + [["Content-Length", str(len(body))]],
    )
    ex.response_size = len(body)
    if body:
        ex.meta["response_body"] = meta_body(relay.redactor, body, headers["Content-Type"])
    ex.finish("complete")
    return plain_response(202, body, headers)


def _reset(
    relay: HTTPRelay, request: FrontRequest, ex: Exchange, f: _Faults, where: str
) -> RelayResponse:
    """Reset the host's connection: it sees the server go away (no response, or half of one)."""
    f.place()
    transport = request.transport
    if transport is not None:
        transport.abort()
    ex.finish("injected_reset", f"mcptape reset the host's connection ({where})")
    # Nothing more reaches the host: the front finds the transport closed and writes nothing.
    return plain_response(500)


def _spawn(relay: HTTPRelay, coro: Any) -> None:
    """Run ``coro`` as a task the relay waits for at shutdown; a write that fails (the host
    left) ends it quietly."""

    async def guarded() -> None:
        try:
            await coro
        except (ConnectionError, aiohttp.ClientConnectionResetError, RuntimeError):
            pass

    task = asyncio.ensure_future(guarded())
    relay.state.spawn(task)


def _event_bytes(ev: SSEEvent, data: bytes) -> bytes:
    """An event like ``ev`` (same type and id) carrying ``data`` (one ``data:`` line per line)."""
    lines = []
    if ev.id is not None:
        lines.append(b"id: " + ev.id.encode())
    if ev.event is not None:
        lines.append(b"event: " + ev.event.encode())
    for line in data.split(b"\n"):
        lines.append(b"data: " + line)
    return b"\r\n".join(lines) + b"\r\n\r\n"
