"""mcptape's mitmproxy addon: mitmproxy's flows handed to the forward proxy's recording.

Loaded in-process by ``mcptape record --forward --engine mitmproxy``
(:mod:`mcp_proxy.forward.runner`) or by a user's own mitmproxy (``mitmdump -s addons/mcptape.py
--set mcptape_db=…``). The recording itself — recognition, sessions, SSE framing, redaction,
bounded bodies — is :class:`~mcp_proxy.forward.tape.ForwardTape`, the same one the lean engine
calls directly; this adapter only translates mitmproxy's hooks and flow objects into its calls.

What it does to flows:

- Flows that are neither MCP nor OAuth (see :mod:`mcp_proxy.forward.recognize`) are not
  touched at all and not recorded (``--set mcptape_record_all=true`` records them as plain
  exchanges, still untouched).
- A response the tape copies chunk by chunk (an event stream of an MCP request, or a large or
  unsized body of an MCP/OAuth exchange) is *streamed*: a callable ``flow.response.stream`` set
  in ``responseheaders`` passes every chunk on unchanged as it arrives — mitmproxy would
  otherwise hold the stream until it ends — and hands a copy to the tape. A ``stream`` another
  addon set is kept and wrapped: what is recorded is what that addon let through to the host.
  Small bodies stay buffered, so a mitmweb user still sees them.
- Nothing is rewritten; the host and the server see the same bytes as without the addon.

Recording is a copy: each chunk, the end and an error reach the tape with ``call_soon``, after
mitmproxy has written the chunk on (in order: the end after the last chunk).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from mcp_proxy.forward.exchange import RequestHead, ResponseHead, TapeExchange
from mcp_proxy.forward.tape import ForwardTape
from mcp_proxy.redact import ENV_REDACT, Redactor

__all__ = ["McpTape"]

log = logging.getLogger("mcptape.forward")

#: ``flow.metadata`` key of a flow's recorded exchange.
META_KEY = "mcptape"


class McpTape:
    """The addon. Give it a tape with a recorder to share one (``mcptape record --forward``);
    without one it starts its own recorder process from its options when mitmproxy runs."""

    def __init__(self, tape: ForwardTape | None = None) -> None:
        self.tape = tape if tape is not None else ForwardTape()
        self.db: str | None = None
        self._owns_recorder = False
        self._configured_by_options = tape is None

    @property
    def stats_exchanges(self) -> int:
        return self.tape.stats_exchanges

    # ------------------------------------------------------------------ mitmproxy options
    def load(self, loader: Any) -> None:
        loader.add_option(
            "mcptape_db",
            str,
            "",
            "mcptape: database path or URL to record MCP traffic into "
            "(default: MCPTAPE_DB or the user data dir).",
        )
        loader.add_option("mcptape_name", str, "", "mcptape: a name for the recorded sessions.")
        loader.add_option(
            "mcptape_redact",
            bool,
            True,
            "mcptape: redact credentials before they reach the disk (turn off for local "
            "debugging only).",
        )
        loader.add_option(
            "mcptape_record_all",
            bool,
            False,
            "mcptape: also record flows that are not MCP or OAuth, as plain HTTP exchanges.",
        )
        loader.add_option(
            "mcptape_idle_cut",
            float,
            300.0,
            "mcptape: seconds of idleness that end a sessionless (2026-07-28) group.",
        )

    def configure(self, updated: set[str]) -> None:
        if not self._configured_by_options:
            return
        from mitmproxy import ctx

        opts = ctx.options
        tape = self.tape
        if "mcptape_db" in updated:
            self.db = opts.mcptape_db or None
        if "mcptape_name" in updated:
            tape.name = opts.mcptape_name or None
        if "mcptape_redact" in updated:
            tape.redactor = Redactor(enabled=bool(opts.mcptape_redact))
        if "mcptape_record_all" in updated:
            tape.record_all = bool(opts.mcptape_record_all)
        if "mcptape_idle_cut" in updated:
            tape.set_idle_cut(float(opts.mcptape_idle_cut))

    def running(self) -> None:
        if self.tape.recorder is not None:
            return
        from mcp_proxy.recorder.client import RecorderClient

        # The worker redacts frame bodies with the policy it is given (never in clear).
        recorder = RecorderClient.for_db(self.db, env={ENV_REDACT: self.tape.redactor.to_env()})
        recorder.start()
        self.tape.recorder = recorder
        self._owns_recorder = True
        log.info("mcptape: recording MCP traffic into %s", recorder.url)

    def done(self) -> None:
        self.close()

    def close(self) -> None:
        """End every session; close the recorder if this addon started it."""
        self.tape.close()
        if self._owns_recorder and self.tape.recorder is not None:
            self.tape.recorder.close()
            self.tape.recorder = None
            self._owns_recorder = False

    # ------------------------------------------------------------------ hooks
    def request(self, flow: Any) -> None:
        if META_KEY in flow.metadata:
            return
        req = flow.request
        peer = getattr(flow.client_conn, "peername", None)
        head = RequestHead(
            req.method,
            req.url,
            req.headers.fields,
            req.http_version,
            req.timestamp_start or time.time(),
            f"{peer[0]}:{peer[1]}" if peer else None,
        )
        ex = self.tape.request(head, req.raw_content or b"")
        if ex is not None:
            flow.metadata[META_KEY] = ex

    def responseheaders(self, flow: Any) -> None:
        ex: TapeExchange | None = flow.metadata.get(META_KEY)
        if ex is None or ex.finished:
            return
        resp = flow.response
        head = ResponseHead(
            resp.status_code,
            resp.reason or "",
            resp.headers.fields,
            resp.timestamp_start or time.time(),
        )
        if ex.response_head(head):
            resp.stream = _tee(ex, resp.stream)

    def response(self, flow: Any) -> None:
        ex: TapeExchange | None = flow.metadata.get(META_KEY)
        if ex is None or ex.finished:
            return
        resp = flow.response
        ended = resp.timestamp_end or time.time()
        if ex.streamed:
            # The copies of the last chunks may still be queued (call_soon): end after them.
            asyncio.get_running_loop().call_soon(ex.done, None, None, ended)
            return
        ex.done(resp.raw_content or b"", None, ended)

    def error(self, flow: Any) -> None:
        ex: TapeExchange | None = flow.metadata.get(META_KEY)
        if ex is None or ex.finished:
            return
        msg = flow.error.msg if flow.error is not None else "error"
        by = "mitmproxy" if flow.response is None else None
        asyncio.get_running_loop().call_soon(ex.error, msg, by)


def _tee(ex: TapeExchange, inner: Any) -> Callable[[bytes], Iterable[bytes] | bytes]:
    """The stream callable: pass each chunk on, hand the tape a copy after it went."""
    loop = asyncio.get_running_loop()

    def record(data: bytes) -> None:
        if data:
            loop.call_soon(ex.chunk, data)

    if callable(inner):

        def wrapped(data: bytes) -> Iterable[bytes] | bytes:
            out = inner(data)
            chunks = [bytes(out)] if isinstance(out, bytes | bytearray) else list(out)
            for c in chunks:
                record(bytes(c))
            return chunks

        return wrapped

    def tee(data: bytes) -> bytes:
        record(data)
        return data

    return tee
