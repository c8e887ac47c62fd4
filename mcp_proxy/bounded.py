"""Bounded helpers: the means by which the limits of :mod:`mcp_proxy.limits` are kept.

A peer's bytes are never trusted to be small. Each helper here holds at most a stated number of
bytes or entries, whatever the peer sends, and says when it had to stop (so the caller can
record what fits and add a finding). Core: imports nothing of the project but ``limits``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

# --- Bounded decoding of bodies (inflate) ---


# --- Bounded maps and pools (LRU, idle sweep) ---


class IdleLru[K: Hashable, V]:
    """A map of at most ``max_entries``, whose entries also go once unused for ``idle`` seconds.

    Kept in order of last use (an ``OrderedDict``): :meth:`get` and :meth:`put` move an entry to
    the end, so the least recently used is first. Past ``max_entries`` the least recently used
    entry goes at once; :meth:`sweep` removes the entries unused for ``idle`` seconds, looking at
    the stale ones only (it stops at the first fresh entry). Each entry removed is handed to
    ``on_evict`` (to close a pool, a socket…). ``clock`` is injectable for tests.

    :meth:`arm` runs :meth:`sweep` on an event loop's timer every ``interval`` seconds while the
    map holds anything — a timer, not a scan per use — so an entry idle for ``idle`` seconds is
    gone at most ``interval`` seconds later, even when nothing else happens.
    """

    def __init__(
        self,
        max_entries: int,
        idle: float,
        on_evict: Callable[[K, V], None],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.idle = idle
        self.on_evict = on_evict
        self.clock = clock
        self._entries: OrderedDict[K, tuple[V, float]] = OrderedDict()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interval = 0.0
        self._each: Callable[[V], object] | None = None
        #: Entries removed so far because the map was full (the rest went idle or were popped).
        self.evicted_full = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def get(self, key: K) -> V | None:
        """The value (now the most recently used), or None."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries[key] = (found[0], self.clock())
        self._entries.move_to_end(key)
        return found[0]

    def touch(self, key: K) -> None:
        """Mark ``key`` used now (an entry still busy must not look idle)."""
        self.get(key)

    def put(self, key: K, value: V) -> None:
        """Add (or replace) ``key``; the least recently used entry goes when the map is full."""
        self._entries[key] = (value, self.clock())
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            old_key, (old, _) = self._entries.popitem(last=False)
            self.evicted_full += 1
            self.on_evict(old_key, old)
        self._schedule()

    def pop(self, key: K) -> V | None:
        """Remove ``key`` without calling ``on_evict``."""
        found = self._entries.pop(key, None)
        return None if found is None else found[0]

    def values(self) -> list[V]:
        return [v for v, _ in self._entries.values()]

    def sweep(self) -> int:
        """Remove the entries unused for ``idle`` seconds or more; how many went."""
        limit = self.clock() - self.idle
        gone = 0
        entries = self._entries
        while entries:
            key, (value, used) = next(iter(entries.items()))
            if used > limit:
                break
            del entries[key]
            gone += 1
            self.on_evict(key, value)
        return gone

    def clear(self) -> list[V]:
        """Remove everything (no ``on_evict``) and stop the timer; the values removed."""
        self.disarm()
        out = self.values()
        self._entries.clear()
        return out

    # ------------------------------------------------------------------ the timer
    def arm(
        self,
        loop: asyncio.AbstractEventLoop,
        interval: float,
        each: Callable[[V], object] | None = None,
    ) -> None:
        """Sweep on ``loop`` every ``interval`` s while the map is not empty; ``each`` is then
        called with every value left (a pool closing its own idle connections)."""
        self._loop = loop
        self._interval = interval
        self._each = each
        self._schedule()

    @property
    def armed(self) -> bool:
        """A sweep is scheduled (only while the map holds anything)."""
        return self._timer is not None

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    def _schedule(self) -> None:
        if self._loop is None or self._timer is not None or not self._entries:
            return
        self._timer = self._loop.call_later(self._interval, self._tick)

    def _tick(self) -> None:
        self._timer = None
        self.sweep()
        each = self._each
        if each is not None:
            for value in self.values():
                each(value)
        self._schedule()
