"""Hooks: what may change an exchange at its message boundaries, and the verdicts they return.

The relay's one path (:mod:`~mcp_proxy.relay.http.server` for the request,
:mod:`~mcp_proxy.relay.http.response` for the answer) calls a :class:`Hooks` object, when one
is installed, at each boundary: the request body before it goes upstream, the response head,
a small JSON response body before the host gets it, each SSE event before the host gets it, and
the end of the exchange. Each call returns a :class:`Verdict` the relay carries out; with no
hooks installed the relay pays one ``if`` per boundary and nothing else.

Fault injection (:mod:`~mcp_proxy.relay.http.faults`) is one implementation: it asks the pure
engine in :mod:`mcp_proxy.faults` and turns its decisions into verdicts. The intercept feature
builds on the same protocol.

Both engines call the same hooks: the reverse relay with its
:class:`~mcp_proxy.relay.http.exchange.Exchange`, the lean forward proxy
(:mod:`mcp_proxy.forward.handler`) with its :class:`~mcp_proxy.forward.exchange.TapeExchange`;
hooks read and write an exchange only through :class:`HookExchange`, which both satisfy.
:func:`carried` is what both do with a verdict on the bytes it concerns.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp_proxy.framing import SSEEvent

if TYPE_CHECKING:
    from mcp_proxy.frames import Frame
    from mcp_proxy.redact import Redactor
    from mcp_proxy.relay.http.sessions import SessionEntry

__all__ = ["ENDS", "PASS", "Act", "HookExchange", "Hooks", "Send", "Verdict", "carried"]


class Act(enum.Enum):
    PASS = "pass"  # forward as it is
    REPLACE = "replace"  # forward ``data`` instead (an event's bytes, a body)
    DELAY = "delay"  # forward as it is (or ``data`` when given) after ``seconds``
    DROP = "drop"  # never forward: a request or response withheld for ever, an event skipped
    ANSWER = "answer"  # answer the host with ``status``/``headers``/``data`` in the peer's place
    RESET = "reset"  # reset the host's connection here
    END = "end"  # end the event stream cleanly here (this event not sent)


@dataclass(frozen=True, slots=True)
class Verdict:
    act: Act
    data: bytes | None = None
    seconds: float = 0.0
    status: int = 0
    headers: tuple[tuple[str, str], ...] = ()
    #: Why (a reset's place, for the exchange's error text).
    why: str = ""


PASS = Verdict(Act.PASS)

#: Verdicts that end the exchange (or the stream) where they fall; each engine carries them
#: out on its own host connection (an answer in the peer's place, a reset, a clean end).
ENDS = frozenset({Act.ANSWER, Act.RESET, Act.END})


async def carried(v: Verdict, data: bytes, *, withhold: bool) -> bytes | None:
    """What goes on after verdict ``v`` on ``data`` (one of :data:`ENDS` is the caller's):
    the bytes to send, or None when nothing is (a dropped event). ``withhold``: a drop leaves
    the peer waiting — a request or a response body — until the host gives up (cancelled)."""
    act = v.act
    if act is Act.DELAY:
        await asyncio.sleep(v.seconds)
    elif act is Act.DROP:
        if withhold:
            await asyncio.Future()
        return None
    return data if v.data is None else v.data


#: Writes bytes to the host on an open event stream (what a hook may send on its own: an
#: event held back and sent later, an answer riding a legacy GET stream).
Send = Callable[[bytes], Awaitable[None]]


class HookExchange(Protocol):
    """What hooks read and write of an exchange, whichever engine relays it."""

    #: Its session, once placed (findings wait until then).
    entry: SessionEntry | None
    meta: dict[str, Any]
    #: The host has had the JSON-RPC response of this exchange.
    responded: bool

    @property
    def redactor(self) -> Redactor: ...

    def frame(self, frame: Frame) -> None:
        """Record a frame of this exchange (an ``inject`` one: what mcptape sent)."""
        ...

    def attach_fallback(self) -> None:
        """Place the exchange in a session now (by client, else keyless)."""
        ...

    def register(self) -> None:
        """Hand the exchange and its frames so far to the recorder now (once it is placed):
        where a frame of another exchange must follow this one's in the recording."""
        ...

    def add_finding(self, session_id: str, **finding: Any) -> None:
        """Record a finding of the exchange's session."""
        ...


class Hooks(Protocol):
    """Called by the relay at an exchange's message boundaries (see the module docstring)."""

    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        """The request (its head as it goes upstream, and its body when read whole — empty
        for a streamed one, which is not decided), before it goes upstream."""
        ...

    def response_head(self, ex: HookExchange, status: int) -> None:
        """The upstream's response head came back (the upstream has taken the request)."""
        ...

    async def message(self, ex: HookExchange, body: bytes) -> Verdict:
        """A small JSON response body of an MCP exchange, before the host gets it."""
        ...

    async def event(self, ex: HookExchange, ev: SSEEvent, send: Send) -> Verdict:
        """One SSE event (comments included), before the host gets it."""
        ...

    async def stream_end(self, ex: HookExchange) -> None:
        """The upstream ended the event stream (what a hook holds back may still go out)."""
        ...

    def done(self, ex: HookExchange) -> None:
        """The exchange ended, whichever way (its findings may now be handed over)."""
        ...
