"""The lean engine's connection-level pieces: where a tunnel goes, raw pipes, handing bytes on.

Pure or nearly so (no engine state): the ``CONNECT`` target and its parsing, the two halves of a
raw TCP tunnel, and feeding a TLS protocol the ClientHello that was read to tell TLS from the
rest.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["Pipe", "Target", "feed", "parse_authority"]


class Target(NamedTuple):
    """The origin a tunnel (or an absolute-form request) goes to."""

    scheme: str
    host: str
    port: int
    #: The name the host gave in its TLS SNI when it differs from ``host`` (a CONNECT to an
    #: address): the upstream is then asked for, and verified as, that name — as mitmproxy does.
    sni: str | None = None

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


#: A host name as RFC 3986 allows it (``reg-name``, IPv4 addresses included).
_REG_NAME = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=%-]+")


def parse_authority(raw: bytes, default_port: int) -> tuple[str, int] | None:
    """``host:port`` (or ``[v6]:port``) of a CONNECT line; None when it is not one.

    The host is a name made of RFC 3986 ``reg-name`` characters or a bracketed IPv6 address:
    anything else (brackets in a name, spaces, ``@``) is refused here, before it reaches a
    resolver, a certificate or a URL.
    """
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    if text.startswith("["):
        host, closed, rest = text[1:].partition("]")
        if not closed or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return None
    else:
        host, _, port_text = text.rpartition(":") if ":" in text else (text, "", "")
        if ":" in host:
            # An IPv6 address without its brackets, then a port: what httpx writes in an
            # absolute-form target (``http://::1:8080/``); taken as it means it.
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                return None
        elif not _REG_NAME.fullmatch(host):
            return None
    if not port_text:
        return (host, default_port) if ":" not in text[text.rfind("]") + 1 :] else None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)


class Pipe(asyncio.Protocol):
    """One half of a raw TCP tunnel: what arrives is written to the other side.

    An end of input is passed on as a half-close (``write_eof``); once both sides have ended
    theirs, both connections are closed — nothing else would close them.
    """

    def __init__(self, peer: asyncio.Transport, done: Callable[[], None]) -> None:
        self.peer = peer
        self.done = done
        self.transport: asyncio.Transport | None = None
        self.other: Pipe | None = None
        self.ended = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.peer.write(data)

    def eof_received(self) -> bool:
        self.ended = True
        other = self.other
        if (other is not None and other.ended) or not self.peer.can_write_eof():
            self.peer.close()
            return False  # this side closes too
        self.peer.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.peer.close()
        self.done()

    def pause_writing(self) -> None:
        self.peer.pause_reading()

    def resume_writing(self) -> None:
        self.peer.resume_reading()


def feed(proto: Any, data: bytes) -> None:
    """Give a (buffered) protocol bytes already read from its transport."""
    view = memoryview(data)
    while view:
        buf = proto.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        proto.buffer_updated(n)
        view = view[n:]
