"""A check family that reads exchanges only is not called per message.

Issue 24: ``check --recompute`` called every family's ``message`` for every message of the
session, although most families return at once (they read exchanges only, or only HTTP frames,
or only the initialize era's handshake). Each family now declares once, before the first
message, whether it reads messages in this session (``Consumer.reads_messages``); the pass
calls only those — and still hands every family every exchange.
"""

from __future__ import annotations

from typing import Any

from mcp_proxy.analysis.core import SessionPass
from mcp_proxy.analysis.facts import Decoder, session_facts
from mcp_proxy.testing.factories import Wire


class _Counting:
    def __init__(self, reads: bool, reads_exchanges: bool = True) -> None:
        self.reads = reads
        self.reads_ex = reads_exchanges
        self.messages = 0
        self.exchanges = 0

    def reads_messages(self) -> bool:
        return self.reads

    def reads_exchanges(self) -> bool:
        return self.reads_ex

    def message(self, m: Any) -> None:
        self.messages += 1

    def exchange(self, ex: Any) -> None:
        self.exchanges += 1

    def finish(self) -> None:
        pass


def _pass(w: Wire, *also: _Counting) -> SessionPass:
    d = Decoder()
    d.feed_frames(w.frames)
    one = SessionPass(
        session_facts(d.msgs, w.session, {}), {}, d.injected, keep=False, also=list(also)
    )
    one.feed_many(d.msgs)
    one.finish(w.session, d.frames)
    return one


def test_only_the_families_that_read_messages_are_called_per_message() -> None:
    w = Wire.initialized()
    for i in range(2, 6):
        w.request("tools/call", i, {"name": "t", "arguments": {}})
        w.notify("notifications/progress", {"progressToken": i, "progress": 1}, direction="s2c")
        w.result(i, {"content": []})
    w.end()
    reader, exchanges_only = _Counting(True), _Counting(False)
    one = _pass(w, reader, exchanges_only)
    assert reader.messages > 0 and exchanges_only.messages == 0
    assert reader.exchanges == exchanges_only.exchanges == 5  # initialize and four calls
    names = {type(c).__name__ for c in one.readers}
    # a stdio session of the initialize era: no HTTP families (the taxonomy reads messages
    # for their HTTP exchanges' statuses: there are no HTTP rows), no exchange-only ones
    assert names == {"Lifecycle", "Capabilities", "Transport", "_Counting"}


def test_only_the_families_that_read_exchanges_are_called_per_exchange() -> None:
    w = Wire.initialized()
    w.request("tools/call", 2, {"name": "t", "arguments": {}})
    w.result(2, {"content": []})
    w.end()
    messages_only = _Counting(True, reads_exchanges=False)
    both = _Counting(True)
    _pass(w, messages_only, both)
    assert messages_only.messages == both.messages > 0
    assert messages_only.exchanges == 0 and both.exchanges == 2  # initialize and the call


def test_the_taxonomy_reads_messages_where_there_are_http_rows() -> None:
    from mcp_proxy.analysis.model import FindingSink, SessionFacts
    from mcp_proxy.analysis.taxonomy import Taxonomy

    facts, sink = SessionFacts(), FindingSink()
    assert not Taxonomy(facts, {}, sink).reads_messages()
    assert Taxonomy(facts, {1: {"id": 1, "status": 500}}, sink).reads_messages()
