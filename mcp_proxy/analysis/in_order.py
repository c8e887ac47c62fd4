"""A session's exchanges in request order, handed out as the streaming pass resolves them
(``show -x``), with the frames mcptape injected between them, by frame number.

The pairing resolves exchanges out of request order (a slow request is answered after later
ones). :class:`InOrder` is a :class:`~mcp_proxy.analysis.consumer.Consumer` that holds the ones
resolved early until every earlier-started exchange is resolved; and an exchange handed out can
no longer change, so it also holds the last :data:`~mcp_proxy.limits.SHOW_EXCHANGES_HELD`
resolved ones (the pairing may still attach a late progress, a cancel that crossed the response
or a log on its stream to an answered request it remembers). Past that bound (one request
pending while that many later ones were answered) the rest are handed out in the order they
were resolved, and ``overflow`` is called once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from mcp_proxy.analysis.facts import Injected
from mcp_proxy.analysis.model import Exchange, Msg
from mcp_proxy.limits import SHOW_EXCHANGES_HELD


class InOrder:
    """Exchanges (and injected frames) to ``emit``, in request order within a bounded buffer."""

    def __init__(
        self,
        injected: Sequence[Injected],
        emit: Callable[[Exchange | Injected], None],
        overflow: Callable[[int], None],
        *,
        held: int | None = None,
    ) -> None:
        self.injected = injected  # (a list the decoder still appends to, in seq order)
        self.emit = emit
        self.overflow = overflow
        self.held = SHOW_EXCHANGES_HELD if held is None else held
        #: resolved, not yet handed out, by exchange index (the order requests were handled)
        self.resolved: dict[int, Exchange] = {}
        #: past the bound: resolved, not yet handed out, in the order they were resolved
        self.fifo: deque[Exchange] | None = None
        self.next_index = 0
        self.k = 0  # injected frames handed out

    def reads_messages(self) -> bool:
        return False

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Msg) -> None:
        pass

    def exchange(self, ex: Exchange) -> None:
        if self.fifo is not None:
            self.fifo.append(ex)
            if len(self.fifo) > self.held:
                self._out(self.fifo.popleft())
            return
        self.resolved[ex.index] = ex
        self._drain(final=False)

    def finish(self) -> None:
        self._drain(final=True)
        while self.fifo:
            self._out(self.fifo.popleft())
        for inj in self.injected[self.k :]:
            self.emit(inj)
        self.k = len(self.injected)

    def _drain(self, *, final: bool) -> None:
        resolved = self.resolved
        while resolved and (final or len(resolved) > self.held):
            ex = resolved.pop(self.next_index, None)
            if ex is None:  # an earlier request still pending: resolution order from here
                self.fifo = deque(resolved.values())  # (a dict keeps insertion order)
                resolved.clear()
                self.overflow(self.held)
                return
            self.next_index += 1
            self._out(ex)

    def _out(self, ex: Exchange) -> None:
        injected, k, seq = self.injected, self.k, ex.request_seq
        while k < len(injected) and injected[k].seq < seq:
            self.emit(injected[k])
            k += 1
        self.k = k
        self.emit(ex)
