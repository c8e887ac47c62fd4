"""The order repair of pairing: a message that refers to a later message of the other side.

The relay stamps a frame just after forwarding it, one thread per direction, so across
directions the recorded order can invert by a scheduling slice: a host's retry can be stamped a
few hundred microseconds before the server result it answers. A message that refers to a message
of the other direction recorded within :data:`REORDER_WINDOW_NS` *after* it is handled as if it
came right after that message (its seq is kept). Nothing else is reordered.

The common references (an answer to a request id, a progress notification for a token) are
found through an index of the requests ahead, built once per message; a scan of the window per
message made a session whose server reports progress on tokens nobody offered cost ~100 frame
looks per notification (half of ``check``'s time on such a session).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp_proxy.analysis.model import Msg
from mcp_proxy.frames import id_key
from mcp_proxy.limits import REORDER_LOOKAHEAD, REORDER_WINDOW_NS

__all__ = [
    "REORDER_LOOKAHEAD",
    "REORDER_WINDOW_NS",
    "TRIM",
    "Window",
    "fast_key",
    "take_pending",
]


def fast_key(value: Any) -> str | None:
    """:func:`id_key` without ``json.dumps`` for the common integer id/token."""
    if type(value) is int:
        return str(value)
    return id_key(value)


def _other(direction: str) -> str:
    return "s2c" if direction == "c2s" else "c2s"


#: Handled messages dropped from the front of the buffer at once (amortised trimming).
TRIM = 1024


class Window:
    """The messages around the one being handled, its position, and what waits for a later one.

    Fed one message at a time (:meth:`push`): the buffer holds the messages from ``base`` on,
    that is at most the look-ahead (:data:`REORDER_LOOKAHEAD` messages, fewer once one is past
    :data:`REORDER_WINDOW_NS`) and up to :data:`TRIM` already handled. Positions (``i``,
    ``deferred``'s keys) count from the session's first message. The pairing moves ``i`` on
    (``Pairing._drain``) once everything a look-ahead from there may reach is in: a message
    stamped after all of them (``top``: the latest clock handled), or a full look-ahead.
    """

    __slots__ = ("_hi", "base", "buf", "deferrals", "deferred", "i", "ids", "tokens", "top")

    def __init__(self) -> None:
        #: messages (:class:`Msg`)
        self.buf: list[Any] = []
        #: the position of ``buf[0]``
        self.base = 0
        #: the position of the message being handled (-1: none yet)
        self.i = -1
        #: message position → messages to handle right after it
        self.deferred: dict[int, list[Msg]] = {}
        #: messages deferred so far (a message handled now was not deferred if this did not grow)
        self.deferrals = 0
        self._hi = 0
        #: the latest clock of the messages handled so far (a deferred one looks ahead from it)
        self.top = 0
        #: the requests ahead, by (direction, id) and by (direction, progress token)
        self.ids: dict[tuple[str, str], list[int]] = {}
        self.tokens: dict[tuple[str, str], list[int]] = {}

    @property
    def end(self) -> int:
        """The position after the last message fed."""
        return self.base + len(self.buf)

    def push(self, m: Msg) -> None:
        self.buf.append(m)

    def at(self, k: int) -> Msg:
        return self.buf[k - self.base]

    def defer_until(self, m: Msg, match: Callable[[Msg], bool]) -> bool:
        """If a later message of the other side (within the window) satisfies ``match``,
        handle ``m`` right after it."""
        buf, base = self.buf, self.base
        limit = m.mono_ns + REORDER_WINDOW_NS
        end = min(self.end, self.i + 1 + REORDER_LOOKAHEAD)
        for k in range(self.i + 1, end):
            x = buf[k - base]
            if x.mono_ns > limit:
                return False
            if x.direction != m.direction and match(x):
                self.deferred.setdefault(k, []).append(m)
                self.deferrals += 1
                return True
        return False

    def defer_to_request(self, m: Msg, table: dict[tuple[str, str], list[int]], key: str) -> bool:
        """:meth:`defer_until` "the other side's request with this id (``ids``) or progress
        token (``tokens``)": the same answer from one lookup."""
        self._index()
        other = (_other(m.direction), key)
        ks = table.get(other)
        if not ks:
            return False
        i = self.i
        while ks and ks[0] <= i:
            ks.pop(0)
        if not ks:
            del table[other]
            return False
        k = ks[0]
        if k > i + REORDER_LOOKAHEAD:
            return False
        buf, base = self.buf, self.base
        limit = m.mono_ns + REORDER_WINDOW_NS
        for j in range(i + 1, k + 1):  # the scan stops at the first message past the window
            if buf[j - base].mono_ns > limit:
                return False
        self.deferred.setdefault(k, []).append(m)
        self.deferrals += 1
        return True

    def _index(self) -> None:
        """Index the requests of the lookahead not indexed yet (each message once)."""
        buf, base = self.buf, self.base
        i = self.i
        end = min(self.end, i + 1 + REORDER_LOOKAHEAD)
        ids, tokens = self.ids, self.tokens
        if len(ids) + len(tokens) > 4 * REORDER_LOOKAHEAD:  # forget the requests left behind
            for table in (ids, tokens):
                for key in [key for key, ks in table.items() if ks[-1] <= i]:
                    del table[key]
        for k in range(max(self._hi, i + 1), end):
            x = buf[k - base]
            if x.kind != "request":
                continue
            if x.msg_id is not None:
                ids.setdefault((x.direction, x.msg_id), []).append(k)
            tok = fast_key(x.meta.get("progressToken"))
            if tok is not None:
                tokens.setdefault((x.direction, tok), []).append(k)
        self._hi = max(self._hi, end)


def take_pending(pending: dict[Any, list[Any]], key: Any, http: int | None) -> Any | None:
    """Pop the request an answer pairs with, or None when none waits under ``key``.

    The one on the answer's own HTTP exchange when there is one (a reused id on another POST
    is another request), else the oldest.
    """
    plist = pending.get(key)
    if not plist:
        return None
    ex = None
    if http is not None:
        for i, cand in enumerate(plist):
            if cand.http == http:
                ex = plist.pop(i)
                break
    if ex is None:
        ex = plist.pop(0)
    if not plist:
        del pending[key]
    return ex
