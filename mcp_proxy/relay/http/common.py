"""Shared pieces of the HTTP relay: limits, the configuration, the upstream target, Host rules.

Pure and cheap: no I/O here, so every other module of the relay (and its unit tests) can use
them without starting anything.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from yarl import URL

from mcp_proxy.bounded import InflateError, inflate
from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.limits import MAX_INFLATED_BODY, META_BODY_LIMIT
from mcp_proxy.netutil import is_loopback
from mcp_proxy.redact import Redactor

if TYPE_CHECKING:
    from mcp_proxy.relay.http.upstream import UpstreamReply


MCP_SESSION_ID = "Mcp-Session-Id"


TCP_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def quickack_socket(resp: UpstreamReply) -> socket.socket | None:
    """The upstream socket, if acknowledging at once can be asked for (Linux)."""
    return resp.sock if TCP_QUICKACK is not None else None


def quickack(sock: socket.socket | None) -> None:
    """Acknowledge what the upstream sent now, not after the 40 ms delayed-ACK timer.

    An upstream with Nagle's algorithm on holds each small write (an SSE event) until its
    previous segment is acknowledged. On a fresh connection Linux acknowledges at once; on a
    reused keep-alive connection it delays, so a pooled relay would add 40 ms per event that the
    host, talking directly, would not see. The flag is one-shot, hence set after every read.
    """
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, TCP_QUICKACK, 1)  # type: ignore[arg-type]


def jsonrpc_error_body(message: str, data: dict[str, Any]) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": message, "data": data}},
        separators=(",", ":"),
    ).encode()


def decode_header(value: bytes) -> str:
    """Header bytes as text for the recording (never fails; non-UTF-8 bytes escaped)."""
    if value.isascii():
        return value.decode("ascii")
    return value.decode("utf-8", "backslashreplace")


@dataclass
class RelayConfig:
    upstream: str
    host: str = "127.0.0.1"
    port: int = 8765
    name: str | None = None
    idle_cut: float = 300.0
    connect_timeout: float = 10.0
    #: Seconds to wait for the upstream's response headers; None waits for ever (the host's own
    #: timeout then decides). Long tool calls in JSON-response mode hold the headers back.
    response_timeout: float | None = None
    redactor: Redactor = field(default_factory=Redactor)
    #: Extra ``Host`` names (``--allow-host``) accepted besides the relay's own address;
    #: ``*`` accepts any (DNS-rebinding protection off).
    allow_hosts: tuple[str, ...] = ()
    #: Fault rules (a ``mcp_proxy.faults.FaultEngine``) carried out by relay/http/faults.py;
    #: None (no rules) keeps the relay's own path untouched.
    faults: Any = None
    #: Intercept (docs/intercept.md): the desk where a message an ``intercept`` rule of
    #: ``faults`` matched waits for a person (``relay/http/intercept.py``'s ``AsyncHolder``).
    intercepts: Any = None


class HostCheck:
    """Which ``Host`` values the relay answers: DNS-rebinding protection, as MCP servers have.

    A web page on ``evil.example`` whose name the attacker re-points at 127.0.0.1 can make a
    browser talk to the relay; the browser then sends ``Host: evil.example``. The upstream's own
    protection would refuse that, but the relay rewrites ``Host`` to the upstream's, so the
    relay has to refuse it itself (421, as the SDK servers do). Accepted: the listen address
    itself; for a loopback listener any loopback name (``localhost``, ``127.x.x.x``, ``[::1]``);
    for a wildcard listener (``0.0.0.0``, ``::``) any IP literal, ``localhost`` and this
    machine's name (an IP literal cannot be rebound); plus every ``--allow-host`` name (with a
    port, ``name:port`` must match exactly). Ports are not compared otherwise — the SDK's
    defaults (``127.0.0.1:*``) do the same. A request without ``Host`` (HTTP/1.0) is answered:
    browsers always send one.
    """

    __slots__ = ("_any", "_hosts", "_ip_literals", "_known", "_loopback", "_netlocs")

    def __init__(self, listen_host: str, allow: tuple[str, ...] = ()) -> None:
        listen = listen_host.strip("[]").lower()
        self._any = "*" in allow
        self._hosts: set[str] = {listen}
        self._netlocs: set[str] = set()
        #: Answers for the values seen (a host sends the same ``Host`` on every request).
        self._known: dict[str, bool] = {}
        self._loopback = is_loopback(listen)
        self._ip_literals = listen in ("", "0.0.0.0", "::")
        if self._loopback:
            self._hosts.update({"localhost", "127.0.0.1", "::1"})
        if self._ip_literals:
            self._hosts.update({"localhost", socket.gethostname().lower()})
        for name in allow:
            name = name.strip().lower()
            if not name or name == "*":
                continue
            host, port = split_host(name)
            if port is None:
                self._hosts.add(host)
            else:
                self._netlocs.add(f"{host}:{port}")

    def allows(self, value: str | None) -> bool:
        if value is None or self._any:
            return True
        known = self._known.get(value)
        if known is None:
            known = self._allows(value)
            if len(self._known) < 256:
                self._known[value] = known
        return known

    def _allows(self, value: str) -> bool:
        host, port = split_host(value.strip().lower())
        if host in self._hosts or (port is not None and f"{host}:{port}" in self._netlocs):
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        return self._ip_literals or (self._loopback and ip.is_loopback)


def split_host(value: str) -> tuple[str, str | None]:
    """``host[:port]`` (IPv6 in brackets) → (host without brackets, port or None)."""
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") and rest[1:] else None
    if value.count(":") == 1:
        host, _, port = value.partition(":")
        return host, port or None
    return value, None


class Target:
    """The upstream origin, parsed once."""

    def __init__(self, upstream: str) -> None:
        try:
            url = URL(upstream)
        except (ValueError, TypeError) as exc:
            raise UserError(f"not a URL: {upstream}") from exc
        if url.scheme not in ("http", "https") or not url.host:
            raise UserError(f"--upstream must be an http:// or https:// URL, got {upstream!r}")
        self.url = url
        self.scheme = url.scheme
        host = url.raw_host or ""
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        self.host_header = host if url.is_default_port() else f"{host}:{url.port}"
        self.host_header_b = self.host_header.encode("idna" if not host.isascii() else "ascii")
        self.origin = f"{url.scheme}://{self.host_header}"
        self.path = url.raw_path or "/"
        self.path_qs = url.raw_path_qs or "/"


def meta_body(redactor: Redactor, raw: bytes, ctype: str | None) -> dict[str, Any]:
    """A non-MCP body for an exchange's metadata: redacted, capped, text when it is text.

    Shared by the reverse relay and the forward proxy, so both record OAuth and other plain
    HTTP bodies the same way."""
    head = raw[:META_BODY_LIMIT]
    red, changed = redactor.body(head, ctype)
    out: dict[str, Any] = {"size": len(raw), "content_type": ctype}
    try:
        out["text"] = red.decode("utf-8")
    except UnicodeDecodeError:
        out["text"] = None
        out["binary"] = True
    if len(raw) > META_BODY_LIMIT:
        out["truncated"] = True
    if changed:
        out["redacted"] = True
    return out


_REASONS: dict[int, str] = {}


def default_reason(status: int) -> str:
    reason = _REASONS.get(status)
    if reason is None:
        from http import HTTPStatus

        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        _REASONS[status] = reason
    return reason


#: The finding a body cut for the recording gets (analysis/catalogue.py).
BODY_CUT = "recorder.body_cut"
BODY_CUT_TITLE = "A body was recorded in part"


@dataclass(frozen=True, slots=True)
class RecordedBody:
    """A ``Content-Encoding``'d body as the recording keeps it (:func:`decode_for_record`)."""

    #: The decoded bytes to record, or None when the body is not decoded (``note`` says why).
    data: bytes | None
    #: False when ``data`` is not the whole decoded body (cut at the limit, or the coded stream
    #: broke off).
    complete: bool
    #: What to add to the exchange's meta (a cut, a body left undecoded), or None; a cut one
    #: (``<side>_body_inflate_cut``) calls for a finding (:func:`cut_findings`).
    note: dict[str, Any] | None = None


def decode_for_record(body: bytes, coding: str, side: str, ctype: str | None) -> RecordedBody:
    """Decode a compressed ``side`` ("request" or "response") body for the recording, bounded.

    The body was forwarded unchanged before this runs; what is recorded is at most
    ``MAX_INFLATED_BODY`` decoded bytes (a decompression bomb costs that much, not what it
    inflates to), marked incomplete, with a note and a finding. Shared by the reverse relay and
    the forward proxy."""
    try:
        got = inflate(body, coding, MAX_INFLATED_BODY)
    except InflateError as exc:
        note = {
            "size": len(body),
            "content_type": ctype,
            "note": f"{coding}-encoded body not decoded for the recording ({exc})",
        }
        return RecordedBody(None, False, {f"{side}_body": note})
    if got.cut:
        cut = {"coding": coding, "wire_size": len(body), "recorded": len(got.data)}
        return RecordedBody(got.data, False, {f"{side}_body_inflate_cut": cut})
    if not got.ended:
        broken = {"coding": coding, "wire_size": len(body), "recorded": len(got.data)}
        return RecordedBody(got.data, False, {f"{side}_body_inflate_broken": broken})
    return RecordedBody(got.data, True)


def response_body_frame(
    body: bytes,
    ctype: str,
    encoding: str | None,
    complete: bool,
    meta: dict[str, Any],
    redactor: Redactor,
    is_message: Callable[[bytes], bool],
) -> Frame | None:
    """A whole response body as the recording keeps it — the reverse relay's and the forward
    proxy's one rule: decoded (bounded) when it has a ``Content-Encoding``, then a frame when it
    is JSON that ``is_message`` accepts (a JSON body of an MCP exchange is a frame even when it
    is not valid JSON-RPC: the analysis classifies it), else kept in ``meta`` (plain text such
    as "Accepted" or error pages is not a message). ``meta`` gets the decoding's notes."""
    if encoding and encoding != "identity":
        # After forwarding, bounded: a decompression bomb costs MAX_INFLATED_BODY bytes.
        decoded = decode_for_record(body, encoding, "response", ctype)
        if decoded.note:
            meta.update(decoded.note)
        if decoded.data is None:
            return None
        body, complete = decoded.data, complete and decoded.complete
    jsonish = ctype.lower().startswith("application/json") or body.lstrip()[:1] in (b"{", b"[")
    if jsonish and is_message(body):
        now_ns, now = time.monotonic_ns(), time.time()
        return Frame(
            Direction.S2C, Channel.HTTP, body, now_ns, now, complete, extra={"content_type": ctype}
        )
    meta["response_body"] = meta_body(redactor, body, ctype)
    return None


def cut_findings(meta: dict[str, Any]) -> list[dict[str, str]]:
    """The ``recorder.body_cut`` findings an exchange's meta calls for (one per cut body)."""
    out = []
    for side in ("request", "response"):
        cut = meta.get(f"{side}_body_inflate_cut")
        if cut is None:
            continue
        detail = (
            f"The {side} body ({cut['coding']}, {cut['wire_size']} bytes on the wire) inflates "
            f"past {cut['recorded']} bytes, the most decoded for the recording (a decompression "
            "bomb, or a huge message). It was forwarded unchanged; the recording keeps its first "
            f"{cut['recorded']} decoded bytes, marked incomplete."
        )
        out.append(
            {"code": BODY_CUT, "severity": "warning", "title": BODY_CUT_TITLE, "detail": detail}
        )
    return out


class RecorderLike(Protocol):
    """What the relay needs of a recorder (``RecorderClient``, or a fake in unit tests).

    A sink may also offer ``record_http`` (``RecorderClient`` does): a quick exchange is then
    handed over raw and described by the recorder process (``recorder/httpraw.py``); without
    it the relay describes the exchange itself and calls ``record_exchange``."""

    def new_session(self, *, transport: str, **fields: Any) -> str: ...
    def put(self, session_id: str, frame: Frame) -> None: ...
    def new_exchange(self, session_id: str, **fields: Any) -> int: ...
    def update_exchange(self, local_id: int, **fields: Any) -> None: ...
    def record_exchange(self, session_id: str, *, frames: list[Frame], **fields: Any) -> int: ...
    def update_session(self, session_id: str, **fields: Any) -> None: ...
    def end_session(self, session_id: str, **fields: Any) -> None: ...
