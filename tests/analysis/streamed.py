"""Per-method numbers of an in-memory session the way the settle computes them: one pass
without ``keep`` (:class:`~mcp_proxy.analysis.core.SessionPass`), a
:class:`~mcp_proxy.analysis.stats.MethodTable` its consumer and its ``on_task``
(:func:`mcp_proxy.analysis.service.stream_analysis` with ``stats``, the store left out)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp_proxy.analysis.core import SessionPass, http_rows
from mcp_proxy.analysis.facts import Decoder, session_facts
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.analysis.stats import MethodStats, MethodTable, StatsKey


def pass_stats(w: Any, *, by_name: bool = False) -> dict[StatsKey, MethodStats]:
    decoder = Decoder()
    decoder.feed_frames(w.frames)
    http = http_rows(w.http_exchanges)
    table = MethodTable(by_name=by_name)
    facts = session_facts(decoder.msgs, w.session, http)
    one = SessionPass(
        facts, http, decoder.injected, keep=False, also=[table], on_task=table.add_task
    )
    one.feed_many(decoder.msgs)
    one.finish(w.session, decoder.frames)
    return table.stats


def method_stats(
    exchanges: Iterable[Exchange], *, by_name: bool = False
) -> dict[StatsKey, MethodStats]:
    """The same table fed the exchanges of an analysis that kept them (``analyze``): what the
    tests hold the streaming pass's numbers to (the one pairing, with and without ``keep``)."""
    table = MethodTable(by_name=by_name)
    for ex in exchanges:
        table.exchange(ex)
        if ex.task is not None:
            table.add_task(ex)
    return table.stats
