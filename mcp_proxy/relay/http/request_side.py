"""The request side of an exchange's recording: its description, and the host's body.

:func:`describe_request` describes a request once it went upstream (metadata, the raw pieces
the recorder describes its head from, the session it belongs to, its body frame) — called by
:meth:`Exchange.describe <mcp_proxy.relay.http.exchange.Exchange.describe>`. A body is read
whole when small (:func:`read_small_body`) or streamed upstream by a :class:`RequestBody`, which
keeps a bounded copy for the recording and hands the frame over once the body has gone out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import aiohttp

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.relay.http.common import decode_for_record, meta_body
from mcp_proxy.relay.http.front import HTTP_11, FrontRequest
from mcp_proxy.relay.http.kept import Kept, drain, streamed
from mcp_proxy.relay.http.sessions import RULE_CLIENT, BodyFacts, body_facts

if TYPE_CHECKING:
    from mcp_proxy.redact import Redactor
    from mcp_proxy.relay.http.exchange import Exchange

__all__ = [
    "BodyAborted",
    "RequestBody",
    "decoded_request",
    "describe_request",
    "read_small_body",
    "record_request_body",
    "request_frame",
]


class BodyAborted(Exception):
    """The host went away while sending a small body (already recorded)."""


def request_frame(ex: Exchange, body: bytes, complete: bool) -> Frame:
    return Frame(
        Direction.C2S,
        Channel.HTTP,
        body,
        ex.mono0,
        ex.wall0,
        complete,
        extra={"content_type": ex.req_ctype},
    )


def describe_request(ex: Exchange) -> None:
    """Describe a request for the recording, once, just after it was sent upstream.

    Metadata, the raw pieces its headers and URLs are described from (by the recorder
    process, see ``recorder/httpraw.py``), the session it belongs to (client identity from
    the body when nothing else names it) and its body frame.
    """
    pre = ex.pre
    if pre is None:
        return
    ex.pre = None
    request, rec_headers, has_mcp, raw_path, body = pre
    meta = ex.meta
    ctx = ex.ctx
    # The headers and URLs are described (decoded, redacted, MCP headers picked out) from
    # these raw pieces by the recorder process, or by Exchange.materialize when the
    # exchange goes to the recorder while it runs (recorder/httpraw.py).
    ex.raw_req = (ctx.origin, ctx.local_origin, raw_path, rec_headers, has_mcp)
    version = request.version
    meta["http_version"] = "1.1" if version is HTTP_11 else f"{version.major}.{version.minor}"
    peer = request.conn.peer
    if peer:
        meta["peer"] = peer
    complete = True
    if body and ex.req_coding:
        body, complete = decoded_request(body, ex.req_coding, ex.req_ctype, meta)
    if body:
        if not (ex.attached and ex.is_mcp):
            # Parsed only when it can change something: whether the body is JSON-RPC (off
            # the MCP path) and who sent it (the session is not known yet). A request that
            # names its session on the MCP path — every initialize-era call — is not.
            learn_facts(ex, body_facts(body), ex.authorization)
        if ex.is_mcp:
            ex.frame(request_frame(ex, body, complete))
        else:
            meta["request_body"] = meta_body(ctx.redactor, body, ex.req_ctype)
    if ex.attached:
        return
    # Wait only where the response names the session: ``initialize`` (its Mcp-Session-Id),
    # a GET that may open a legacy SSE stream (its endpoint event), and a streamed body (its
    # head is read once it has gone out).
    if ex.facts is not None and ex.facts.is_initialize:
        return
    if ex.fields["method"] == "GET" and "text/event-stream" in request.headers.get("Accept", ""):
        return
    if ex.body is not None:
        return
    if ex.fallback is not None:
        key, rule, grouping = ex.fallback
        ex.attach_key(key, rule, grouping=grouping)
    else:
        ex.attach_fallback()


def learn_facts(ex: Exchange, facts: BodyFacts, authorization: str | None) -> None:
    """What the body says: whether it is JSON-RPC, and which client sent it (grouping)."""
    ex.facts = facts
    if facts.is_jsonrpc:
        ex.is_mcp = True
    if facts.client_name is not None:
        router = ex.ctx.router
        key = router.client_key(facts.client_name, facts.client_version, authorization)
        client = {"name": facts.client_name, "version": facts.client_version}
        ex.fallback = (key, RULE_CLIENT, {"client": client})


def decoded_request(
    raw: bytes, coding: str | None, ctype: str | None, meta: dict[str, Any]
) -> tuple[bytes | None, bool]:
    """A compressed request body decoded (bounded) for the recording, its notes in ``meta``:
    (bytes or None when it is not decoded, whether they are the whole body). Runs after it
    was forwarded."""
    coding = (coding or "").strip().lower()
    if not coding or coding == "identity":
        return raw, True
    decoded = decode_for_record(raw, coding, "request", ctype)
    if decoded.note:
        meta.update(decoded.note)
    return decoded.data, decoded.complete


def record_request_body(
    body: bytes,
    size: int,
    *,
    streamed: bool,
    coding: str | None,
    ctype: str | None,
    meta: dict[str, Any],
    redactor: Redactor,
    is_message: Callable[[bytes], bool],
) -> tuple[bytes, bool] | None:
    """What a request body that streamed (or was cut) leaves in the recording — one path for
    the reverse relay and the forward proxy: ``(bytes, whole)`` for its frame, or None when it
    went into ``meta`` (``request_body``: no message, per ``is_message``) or nothing is left.

    ``body``: what was kept of it; ``size``: the whole body's size (more when it was cut:
    ``meta.request_body_recorded`` says how much was kept); ``streamed``: noted in ``meta``.
    """
    if not body:
        return None
    cut = size > len(body)
    if cut:
        meta["request_body_recorded"] = len(body)
    if streamed:
        meta["request_body_streamed"] = True
    data, whole = decoded_request(body, coding, ctype, meta)
    if not data:
        return None
    if is_message(data):
        return data, whole and not cut
    meta["request_body"] = meta_body(redactor, data, ctype)
    return None


async def read_small_body(request: FrontRequest, ex: Exchange, length: int) -> bytes:
    """A body with a length up to ``SMALL_BODY``: read whole (one write upstream)."""
    got: list[bytes] = []
    try:
        content = request.content
        chunk = await content.readany()
        while chunk:
            got.append(chunk)
            chunk = await content.readany()
        body = got[0] if len(got) == 1 else b"".join(got)
        if len(body) < length:
            raise ConnectionResetError("body shorter than its Content-Length")
    except (
        asyncio.CancelledError,
        aiohttp.ClientError,
        ConnectionError,
        asyncio.IncompleteReadError,
    ) as exc:
        # The host went away mid-body: nothing is forwarded (the upstream would only wait
        # for bytes that never come); what arrived is recorded.
        ex.describe()
        partial = b"".join(got)
        ex.request_size = len(partial)
        if partial:
            ex.frame(request_frame(ex, partial, False))
        ex.finish("host_aborted", f"host closed while sending the body: {exc!r}")
        if isinstance(exc, asyncio.CancelledError):
            raise
        raise BodyAborted() from exc
    ex.request_size = len(body)
    return body


class RequestBody:
    """A request body streamed upstream, and the copy (up to the cap) kept for the recording.

    Its life: streaming → recorded once (``recorded``), either when its last chunk went out,
    or when the exchange ends without it (given up, or not taken by an upstream that answered
    early). The copy and the stream are the one path both front ends use
    (:mod:`~mcp_proxy.relay.http.kept`).
    """

    __slots__ = ("copy", "ex", "recorded", "request")

    def __init__(self, request: FrontRequest, ex: Exchange) -> None:
        self.request = request
        self.ex = ex
        self.copy = Kept()
        self.recorded = False

    @property
    def done(self) -> bool:
        return self.recorded

    @property
    def size(self) -> int:
        """Bytes of the body that arrived so far."""
        return self.copy.size

    def stream(self) -> AsyncIterator[bytes]:
        """The host's body, chunk by chunk, for the upstream; recorded once it all went out."""
        return streamed(self.request.content, self.copy, self._went)

    def _went(self) -> None:
        self.finish(complete=True)

    async def drain(self) -> None:
        """Read what the host still sends (up to the cap, briefly) so its frame is recorded."""
        if not self.recorded:
            await drain(self.request.content, self.copy)

    def settle(self) -> None:
        """The upstream answered before taking the whole body (a 413): record what it took.

        The frame holds the bytes that were forwarded, marked incomplete; the rest of the
        host's body never reached the upstream and is left to the HTTP server to discard.
        """
        if not self.recorded:
            self.ex.meta["request_body_not_taken"] = True
            self.finish(complete=False)

    def learn(self) -> None:
        """Client identity from the head of the body (bounded look, body may be partial)."""
        ex = self.ex
        if ex.facts is not None or self.recorded or not self.copy.kept:
            return
        learn_facts(ex, body_facts(self.copy.head(64 * 1024), partial=True), None)

    def finish(self, complete: bool | None = None) -> None:
        """Record the body (once): after it went out, or when it was given up."""
        if self.recorded:
            return
        self.learn()
        self.recorded = True
        ex = self.ex
        ex.request_size = self.copy.size
        kept = record_request_body(
            self.copy.take(),
            ex.request_size,
            streamed=True,
            coding=ex.req_coding,
            ctype=ex.req_ctype,
            meta=ex.meta,
            redactor=ex.ctx.redactor,
            is_message=lambda raw: ex.is_mcp or raw[:1] in (b"{", b"["),
        )
        if kept is not None:
            ex.frame(request_frame(ex, kept[0], bool(complete) and kept[1]))
