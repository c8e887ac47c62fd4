"""The read ahead of the bulk frame readers (``store.stream.ahead``): batches in order, the
driver's errors raised in the consumer, a consumer that stops early stops the thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_proxy.limits import ROWS_AHEAD
from mcp_proxy.store.stream import ahead


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rows-ahead"]


def test_batches_come_in_order_and_all() -> None:
    batches = [[(i, j) for j in range(3)] for i in range(50)]
    assert list(ahead(iter(batches))) == batches
    assert _readers() == []


def test_an_error_of_the_driver_is_raised_in_the_consumer() -> None:
    def source() -> Iterator[list[tuple[Any, ...]]]:
        yield [(1,)]
        raise ValueError("disk I/O error")

    got = ahead(source())
    assert next(got) == [(1,)]
    with pytest.raises(ValueError, match="disk I/O error"):
        next(got)
    assert _readers() == []


def test_a_consumer_that_stops_early_stops_the_reader_and_closes_its_source() -> None:
    closed = threading.Event()
    made = 0

    def source() -> Iterator[list[tuple[Any, ...]]]:
        nonlocal made
        try:
            while True:
                made += 1
                yield [(made,)]
        finally:
            closed.set()

    got = ahead(source())
    assert next(got) == [(1,)]
    got.close()
    assert closed.is_set()
    assert _readers() == []
    # Bounded: the reader never ran further ahead than ROWS_AHEAD batches (+ the one taken,
    # + the one it held when told to stop).
    assert made <= ROWS_AHEAD + 2
