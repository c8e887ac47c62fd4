"""The request side of a forward exchange's recording, once the request went upstream: its row
(headers and URL redacted), its metadata, its body (a frame for MCP, ``meta.request_body``
otherwise, through the reverse relay's one request-body path,
:func:`~mcp_proxy.relay.http.request_side.record_request_body`) and its session when it says
so — the forward proxy's twin of the relay's
:func:`~mcp_proxy.relay.http.request_side.describe_request`, for both engines.
"""

from __future__ import annotations

import time

from mcp_proxy.forward.exchange import (
    KIND_MCP,
    KIND_OAUTH,
    RequestHead,
    RequestRow,
    TapeExchange,
)
from mcp_proxy.forward.recognize import RequestView
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.headers import mcp_headers
from mcp_proxy.relay.http.request_side import record_request_body

__all__ = ["record_request"]


def record_request(
    ex: TapeExchange,
    head: RequestHead,
    view: RequestView,
    body: bytes,
    size: int | None,
    taken: bool = True,
) -> None:
    """The request went upstream: its row, its body frame, its session when it says so.

    ``body``: what the engine kept of it (all, or its first ``MAX_RECORDED_BODY`` bytes of
    ``size`` when it streamed); ``taken``: False when the upstream answered before taking all
    of a streamed body (``body`` is what went), as the reverse relay records it.
    """
    tape = ex.tape
    kind = ex.kind
    ex.authorization = view.header("authorization")
    cut = size is not None and size > len(body)
    ex.request_size = size if size is not None and cut else len(body)
    red = tape.redactor
    rec_headers = red.headers(view.headers)
    ex.row = RequestRow(head.method, head.started_at, red.url(head.url), rec_headers)
    meta = ex.meta
    meta["forward"] = True
    meta["http_version"] = head.http_version
    if head.peer:
        meta["peer"] = head.peer
    if view.has_mcp_header:
        meta["mcp_headers"] = mcp_headers(rec_headers)
    if ex.oauth_role is not None:
        meta["oauth"] = {"role": ex.oauth_role}
    ex.facts = view.body_facts() if kind == KIND_MCP else None
    ctype = view.header("content-type")
    if not taken and body:
        meta["request_body_not_taken"] = True
    kept = record_request_body(
        body,
        ex.request_size,
        streamed=cut,
        coding=view.header("content-encoding"),
        ctype=ctype,
        meta=meta,
        redactor=red,
        is_message=lambda _data: kind == KIND_MCP,
    )
    if kept is not None:
        frame = Frame(
            Direction.C2S,
            Channel.HTTP,
            kept[0],
            time.monotonic_ns(),
            head.started_at,
            kept[1] and taken,
            extra={"content_type": ctype},
        )
        tape.frame(ex, frame)
    tape.join(ex, view)
    if kind == KIND_OAUTH:
        tape.oauth.on_request(ex)
    if ex.entry is not None and ex.entry.streams:
        # A stream of this session is open and may answer this request: record it first.
        tape.register(ex)
