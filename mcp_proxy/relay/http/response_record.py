"""What a response leaves in the recording: its body as a frame (or in ``meta``), each SSE
event as a frame, the session a legacy ``endpoint`` event names, and that event pointed at
the relay. Functions of the exchange and the relay's shared state, called by
:class:`~mcp_proxy.relay.http.response.ResponsePath` (and the fault hooks) after forwarding."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.framing import SSEEvent
from mcp_proxy.relay.http.common import jsonrpc_error_body, response_body_frame
from mcp_proxy.relay.http.exchange import Exchange
from mcp_proxy.relay.http.front import RelayResponse, plain_response
from mcp_proxy.relay.http.sessions import RULE_LEGACY_SSE, RULE_MCP_SESSION, body_facts

if TYPE_CHECKING:
    from mcp_proxy.relay.http.response import RelayState

__all__ = [
    "after",
    "finish_body",
    "has_response",
    "record_body",
    "rewrite_endpoint",
    "sse_events",
    "synthetic",
]


def finish_body(ex: Exchange) -> None:
    """Record a streamed request body now if it was not yet (given up, or cut short)."""
    if ex.body is not None:
        ex.body.finish()


def synthetic(
    ex: Exchange | None, status: int, kind: str, message: str, **data: Any
) -> RelayResponse:
    """The relay answers in the upstream's place: a JSON-RPC error with ``id: null`` and an
    ``X-Mcptape-Error`` header; the exchange records that it was synthesized."""
    body = jsonrpc_error_body(f"mcptape: {message}", {"mcptape": kind, **data})
    headers = {"Content-Type": "application/json", "X-Mcptape-Error": kind}
    if ex is not None:
        ex.late.clear()  # what the upstream said (if anything) is not what the host got
        ex.raw_resp = None
        ex.meta["synthesized"] = {"by": "mcptape", "status": status, "kind": kind}
        ex.response_size = len(body)
        ex.update(
            status=status,
            first_byte_at=time.time(),
            response_headers=[[k, v] for k, v in headers.items()]
            + [["Content-Length", str(len(body))]],
        )
    return plain_response(status, body, headers)


def after(ex: Exchange, method: str, status: int) -> None:
    """Session bookkeeping once an exchange completed (DELETE ends a session)."""
    if method == "DELETE" and 200 <= status < 300 and ex.entry is not None:
        if ex.entry.rule == RULE_MCP_SESSION:
            ex.ctx.router.end(ex.entry.key, reason="DELETE")


def record_body(
    ex: Exchange, body: bytes, ctype: str, encoding: str, is_mcp: bool, complete: bool
) -> None:
    """A whole response body: a frame when it is a JSON-RPC message, else kept in ``meta``."""
    if not body:
        return
    frame = response_body_frame(
        body,
        ctype,
        encoding,
        complete,
        ex.meta,
        ex.ctx.redactor,
        lambda data: is_mcp or body_facts(data).is_jsonrpc,
    )
    if frame is not None:
        ex.frame(frame)


def sse_events(
    state: RelayState, ex: Exchange, events: list[SSEEvent] | None, complete: bool = True
) -> None:
    """Events the upstream sent, as frames (comments only counted)."""
    if not events:
        return
    mono = time.monotonic_ns()
    wall = time.time()
    for ev in events:
        if ev.comment_only:
            ex.sse_comments += 1
            continue
        if not ex.attached and ev.event == "endpoint":
            attach_legacy(state, ex, ev)
        ex.frame(
            Frame(
                Direction.S2C,
                Channel.SSE,
                ev.data,
                mono,
                wall,
                complete,
                sse_id=ev.id,
                sse_event=ev.event,
            )
        )
    if not ex.attached:
        ex.attach_fallback()
    if not ex.streaming:
        ex.hold_stream()


def has_response(events: list[SSEEvent]) -> bool:
    """Whether a JSON-RPC response is among these events (a cheap look at each head)."""
    for ev in events:
        head = ev.data[:160]
        if b'"method"' not in head and (b'"result"' in head or b'"error"' in head):
            return True
    return False


def attach_legacy(state: RelayState, ex: Exchange, ev: SSEEvent) -> None:
    """A legacy ``endpoint`` event names the session (and a message path) of its stream."""
    data = ev.data.decode("utf-8", "replace").strip()
    parts = urlsplit(data)
    sid = None
    for key in ("session_id", "sessionId"):
        values = parse_qs(parts.query).get(key)
        if values:
            sid = values[0]
            break
    if parts.path:
        state.mcp_paths.add(parts.path)
    if sid:
        ex.attach_key(
            ex.ctx.router.sse_key(sid),
            RULE_LEGACY_SSE,
            transport="sse",
            grouping={"sse_session_id": sid},
        )


def rewrite_endpoint(ex: Exchange, ev: SSEEvent, out: bytes) -> bytes:
    """Point a legacy ``endpoint`` event at the relay when it names the upstream origin."""
    if ev.event != "endpoint":
        return out
    data = ev.data.decode("utf-8", "replace").strip()
    note: dict[str, Any] = {"upstream_sent": data, "host_got": data, "rewritten": False}
    parts = urlsplit(data)
    if parts.scheme and parts.netloc:
        up = urlsplit(ex.ctx.origin)
        if parts.scheme == up.scheme and parts.netloc.lower() == up.netloc.lower():
            new = ex.ctx.local_origin + (parts.path or "/")
            if parts.query:
                new += "?" + parts.query
            if parts.fragment:
                new += "#" + parts.fragment
            replaced = out.replace(ev.data, new.encode(), 1)
            if replaced != out:
                note.update(host_got=new, rewritten=True)
                out = replaced
        else:
            note["warning"] = (
                "the endpoint names another origin; the host will post there directly and "
                "those messages are not recorded"
            )
    ex.meta["endpoint"] = note
    return out
