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
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mcp_proxy.framing import SSEEvent

if TYPE_CHECKING:
    from mcp_proxy.relay.http.exchange import Exchange

__all__ = ["PASS", "Act", "Hooks", "Send", "Verdict"]


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

#: Writes bytes to the host on an open event stream (what a hook may send on its own: an
#: event held back and sent later, an answer riding a legacy GET stream).
Send = Callable[[bytes], Awaitable[None]]


class Hooks(Protocol):
    """Called by the relay at an exchange's message boundaries (see the module docstring)."""

    async def request_body(self, ex: Exchange, head: bytes, body: bytes) -> Verdict:
        """The request (its head as it goes upstream, and its body when read whole — empty
        for a streamed one, which is not decided), before it goes upstream."""
        ...

    def response_head(self, ex: Exchange, status: int) -> None:
        """The upstream's response head came back (the upstream has taken the request)."""
        ...

    async def message(self, ex: Exchange, body: bytes) -> Verdict:
        """A small JSON response body of an MCP exchange, before the host gets it."""
        ...

    async def event(self, ex: Exchange, ev: SSEEvent, send: Send) -> Verdict:
        """One SSE event (comments included), before the host gets it."""
        ...

    async def stream_end(self, ex: Exchange) -> None:
        """The upstream ended the event stream (what a hook holds back may still go out)."""
        ...

    def done(self, ex: Exchange) -> None:
        """The exchange ended, whichever way (its findings may now be handed over)."""
        ...
