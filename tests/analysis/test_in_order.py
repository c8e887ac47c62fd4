"""``InOrder`` (``show -x``'s reorder buffer) on any order of resolution: every exchange and
injected frame handed out once; in request order, injected frames between them by frame number,
unless a request stayed pending while more than the bound of later ones were answered (then
``overflow`` was called once)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.analysis.facts import Injected
from mcp_proxy.analysis.in_order import InOrder
from mcp_proxy.analysis.model import Exchange


def _ex(index: int) -> Exchange:
    ex = Exchange.__new__(Exchange)
    ex.index, ex.request_seq = index, 10 * index + 5
    return ex


def _injected(seq: int) -> Injected:
    return Injected(seq, 0.0, "s2c", "error", None, None)


@settings(max_examples=200, deadline=None)
@given(
    order=st.integers(0, 40).flatmap(lambda n: st.permutations(range(n))),
    held=st.integers(1, 8),
    injected_at=st.lists(st.integers(0, 420), unique=True).map(sorted),
)
def test_every_item_once_in_request_order_within_the_bound(
    order: list[int], held: int, injected_at: list[int]
) -> None:
    out: list[Any] = []
    notes: list[int] = []
    injected = [_injected(s) for s in injected_at]
    buf = InOrder(injected, out.append, notes.append, held=held)
    for i in order:
        buf.exchange(_ex(i))
    buf.finish()
    exchanges = [x.index for x in out if isinstance(x, Exchange)]
    assert sorted(exchanges) == sorted(order)
    assert [x.seq for x in out if isinstance(x, Injected)] == injected_at
    # Within the bound: was any request still pending while more than `held` later ones
    # had been answered?
    answered: set[int] = set()
    past = False
    for i in order:
        answered.add(i)
        first_pending = next((k for k in range(len(order)) if k not in answered), len(order))
        if sum(1 for k in answered if k > first_pending) > held:
            past = True
            break
    assert notes == ([held] if past else [])
    if not past:
        assert exchanges == list(range(len(order)))
        seqs = [x.request_seq if isinstance(x, Exchange) else x.seq for x in out]
        assert seqs == sorted(seqs)  # injected frames between the exchanges, by frame number
