"""``mcp_proxy.bounded.IdleLru``: a map bounded in entries and in idle time (fake clock)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.bounded import IdleLru


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(max_entries: int = 3, idle: float = 4.0) -> tuple[IdleLru[str, int], Clock, list]:
    clock = Clock()
    gone: list[tuple[str, int]] = []
    lru: IdleLru[str, int] = IdleLru(
        max_entries, idle, lambda k, v: gone.append((k, v)), clock=clock
    )
    return lru, clock, gone


def test_full_map_evicts_the_least_recently_used() -> None:
    lru, _, gone = make(max_entries=2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "b" is now the least recently used
    lru.put("c", 3)
    assert gone == [("b", 2)]
    assert "b" not in lru and len(lru) == 2
    assert lru.evicted_full == 1


def test_sweep_removes_only_entries_idle_for_the_limit() -> None:
    lru, clock, gone = make(idle=4.0)
    lru.put("a", 1)
    clock.now += 2
    lru.put("b", 2)
    clock.now += 1
    lru.touch("a")  # used again: fresh
    clock.now += 3.5  # b: idle 4.5 s, a: 3.5 s
    assert lru.sweep() == 1
    assert gone == [("b", 2)]
    clock.now += 0.5
    assert lru.sweep() == 1
    assert gone[-1] == ("a", 1) and len(lru) == 0
    assert lru.sweep() == 0


def test_pop_and_clear_do_not_call_on_evict() -> None:
    lru, _, gone = make()
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.pop("a") == 1 and lru.pop("zz") is None
    assert lru.clear() == [2]
    assert gone == [] and len(lru) == 0


def test_bad_size_is_refused() -> None:
    with pytest.raises(ValueError):
        IdleLru(0, 1.0, lambda k, v: None)


@given(st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0, 3)), max_size=60))
def test_never_more_than_max_entries_and_every_value_accounted_for(
    ops: list[tuple[str, float]],
) -> None:
    lru, clock, gone = make(max_entries=3, idle=4.0)
    put: list[int] = []
    for i, (key, step) in enumerate(ops):
        clock.now += step
        if lru.get(key) is None:
            lru.put(key, i)
            put.append(i)
        if i % 5 == 0:
            lru.sweep()
        assert len(lru) <= 3
    # Every value put is either still in the map or was handed to on_evict, once.
    assert sorted([v for _, v in gone] + lru.values()) == put
    clock.now += 4.5
    lru.sweep()
    assert len(lru) == 0 and sorted(v for _, v in gone) == put


async def test_the_timer_sweeps_without_any_use_and_stops_when_empty() -> None:
    lru, clock, gone = make(idle=4.0)
    swept: list[int] = []
    lru.arm(asyncio.get_running_loop(), 0.01, swept.append)
    lru.put("a", 1)
    lru.put("b", 2)
    for _ in range(200):  # wait for the condition: the timer called "each" for the live values
        if swept:
            break
        await asyncio.sleep(0.01)
    assert set(swept) >= {1, 2} and gone == []
    clock.now += 5  # both idle past the limit: the next tick drops them
    for _ in range(200):
        if len(gone) == 2:
            break
        await asyncio.sleep(0.01)
    assert sorted(gone) == [("a", 1), ("b", 2)]
    assert not lru.armed  # empty: no timer left running
    lru.put("c", 3)
    assert lru.armed  # re-armed by the next entry
    lru.disarm()
    assert not lru.armed
