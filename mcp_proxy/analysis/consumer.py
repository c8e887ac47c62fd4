"""What the checks are: consumers of one session's messages and exchanges, each with bounded state.

Every check family (:mod:`~mcp_proxy.analysis.checks`, :mod:`~mcp_proxy.analysis.taxonomy`) is a
:class:`Consumer`: it is handed each message once (:meth:`Consumer.message`, in ``seq`` order),
each exchange once its outcome is known (:meth:`Consumer.exchange`), and writes its findings to the
session's :class:`~mcp_proxy.analysis.model.FindingSink` at :meth:`Consumer.finish`. What a
consumer keeps between calls is counts and the first frames that prove a finding
(:class:`Seqs`), never the messages: a session's size does not show in its memory.
"""

from __future__ import annotations

from typing import Protocol

from mcp_proxy.analysis.model import Exchange, Msg
from mcp_proxy.limits import MAX_SEQS


class Consumer(Protocol):
    """One check family fed one session (see the module doc)."""

    def reads_messages(self) -> bool:
        """Whether :meth:`message` may do anything in this session: asked once, before the
        first message (the session's facts are complete by then); a consumer that answers
        False is not called per message (it declares that it reads exchanges only)."""
        ...

    def reads_exchanges(self) -> bool:
        """Whether :meth:`exchange` may do anything in this session, asked as
        :meth:`reads_messages` is: a consumer that answers False is not called per exchange."""
        ...

    def message(self, m: Msg) -> None: ...

    def exchange(self, ex: Exchange) -> None: ...

    def finish(self) -> None: ...


class Seqs:
    """How many times something happened, and the first frames of it (what a finding lists:
    :class:`~mcp_proxy.analysis.model.FindingSink` keeps :data:`MAX_SEQS` of the smallest
    seqs, and these come in ``seq`` order, so keeping the first ones loses nothing)."""

    __slots__ = ("n", "seqs")

    def __init__(self) -> None:
        self.n = 0
        self.seqs: list[int] = []

    def add(self, seq: int) -> None:
        self.n += 1
        if len(self.seqs) < MAX_SEQS:
            self.seqs.append(seq)

    def __bool__(self) -> bool:
        return self.n > 0
