"""The recorder process's queue of ended sessions (:class:`mcp_proxy.recorder.settle.Settler`):
in order, each once, bounded, a failure costing one session, and a bounded wait at the end."""

from __future__ import annotations

import threading

from mcp_proxy.limits import SETTLE_QUEUE
from mcp_proxy.recorder.settle import Settler


def test_sessions_are_settled_in_order_once_and_a_failure_costs_one() -> None:
    seen: list[tuple[str, str]] = []

    def work(url: str, sid: str) -> None:
        if sid == "bad":
            raise RuntimeError("boom")
        seen.append((url, sid))

    s = Settler("db", work)
    s.hand(["a", "bad", "b", "a"])
    s.hand(["c"])
    assert s.finish(patience=10) == 0
    assert [sid for _, sid in seen] == ["a", "b", "c"] and {u for u, _ in seen} == {"db"}
    assert (s.done, s.failed) == (3, 1)


def test_the_queue_is_bounded_and_the_end_waits_only_so_long() -> None:
    gate = threading.Event()
    started = threading.Event()

    def work(url: str, sid: str) -> None:
        started.set()
        gate.wait(10)

    s = Settler("db", work)
    s.hand(f"s{i}" for i in range(SETTLE_QUEUE + 5))
    assert started.wait(10)
    # One is being settled, SETTLE_QUEUE were queued (one of them now taken), 5 left out.
    assert s.dropped == 5
    assert s.finish(patience=0.05) == SETTLE_QUEUE + 5  # none done yet: all said late
    gate.set()


def test_sessions_ended_past_the_queue_are_counted_not_lost_silently() -> None:
    """While the database owes rows the worker keeps the ended sessions for the settler, at
    most SETTLE_QUEUE of them: the rest are counted (the process's last line says how many
    were not analysed) instead of vanishing."""
    import pickle
    from types import SimpleNamespace

    from mcp_proxy.recorder.contract import SessionUpdate
    from mcp_proxy.recorder.wire import HEADER, T_ITEM
    from mcp_proxy.recorder.worker import RecordStream

    fed: list[object] = []
    runner = SimpleNamespace(feed=fed.append, builder=SimpleNamespace(internal_errors=0))
    stream = RecordStream(runner)  # type: ignore[arg-type]
    for i in range(SETTLE_QUEUE + 3):
        body = pickle.dumps(SessionUpdate(f"s{i}", {"status": "ended"}))
        stream.buf += HEADER.pack(T_ITEM, len(body)) + body
    stream.consume()
    assert len(fed) == SETTLE_QUEUE + 3  # every update still reaches the store
    assert len(stream.ended) == SETTLE_QUEUE and stream.unqueued == 3
