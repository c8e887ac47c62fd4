"""Per-method numbers from exchanges: counts, error rates, latency percentiles.

Percentiles use the nearest-rank method on the exact latencies (no coarse buckets): each
method keeps its latencies as an exact histogram (every distinct value and how many times it
happened: latencies are whole microseconds, so a busy method repeats its values), which pools
across sessions without losing a value and stores compactly (``session_stats``, written when a
session ends: :mod:`mcp_proxy.analysis.service`). Nearest-rank returns a latency that really
happened, which is what a person comparing two runs expects to see.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, NotRequired, TypedDict

from mcp_proxy.analysis.model import Exchange, Msg, Outcome
from mcp_proxy.limits import STATS_METHODS_KEPT, STATS_VALUES_KEPT

#: The method under which a session's numbers count the exchanges of methods past
#: :data:`~mcp_proxy.limits.STATS_METHODS_KEPT` (one row per direction).
OTHER_METHODS = "(other methods: past the limit)"

#: An exact histogram: each distinct value (ms) and how many times it happened.
Histogram = dict[float, int]


def _tally(hist: Histogram, v: float, c: int) -> int:
    """Count ``c`` times the value ``v`` in ``hist``; how many of them did not fit (a value not
    yet in a histogram of :data:`~mcp_proxy.limits.STATS_VALUES_KEPT` distinct values)."""
    n = hist.get(v)
    if n is not None:
        hist[v] = n + c
        return 0
    if len(hist) >= STATS_VALUES_KEPT:
        return c
    hist[v] = c
    return 0


def summary(hist: Histogram) -> dict[str, Any]:
    """p50/p95/p99 (nearest rank), mean, max and n of a histogram's values: exactly what the
    sorted list of every value gives (the mean sums that list, in that order)."""
    n = sum(hist.values())
    if not n:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "max": None, "n": 0}
    items = sorted(hist.items())
    out: dict[str, Any] = {}
    ranks = [(f"p{p}", max(1, math.ceil(p / 100 * n))) for p in (50, 95, 99)]
    seen = 0
    for v, c in items:
        seen += c
        while ranks and ranks[0][1] <= seen:
            out[ranks.pop(0)[0]] = v
    total = sum(chain.from_iterable(repeat(v, c) for v, c in items))
    return {**out, "mean": round(total / n, 3), "max": items[-1][0], "n": n}


class Counts(TypedDict):
    """What one method's numbers are besides its histograms: its key and its ten counters."""

    direction: str
    method: str
    name: str | None
    count: int
    ok: int
    errors: int
    tool_errors: int
    unanswered: int
    cancelled: int
    pending: int


class StoredMethod(Counts):
    """One method's numbers as ``session_stats.methods`` stores them (a JSON list of these):
    the counts, each histogram as ``[value, count]`` pairs in value order, and ``dropped`` when
    some values did not fit (:data:`~mcp_proxy.limits.STATS_VALUES_KEPT`)."""

    latencies: list[list[float]]
    task_durations: list[list[float]]
    dropped: NotRequired[int]


@dataclass(slots=True)
class MethodStats:
    """Numbers for one method in one direction (and optionally one tool/prompt/resource)."""

    direction: str
    method: str
    name: str | None = None
    count: int = 0
    ok: int = 0
    errors: int = 0  # JSON-RPC error responses
    tool_errors: int = 0  # tools/call results with isError
    unanswered: int = 0  # no_response, lost, aborted
    cancelled: int = 0
    pending: int = 0
    #: every latency (ms) and how many exchanges had it
    latencies: Histogram = field(default_factory=dict)
    #: tasks this method created that reached a terminal status: creation → end, in ms, and how
    #: many (``latencies`` is the time to the task's handle)
    task_durations: Histogram = field(default_factory=dict)
    #: latencies and task durations left out of the histograms: a new distinct value once one
    #: holds :data:`~mcp_proxy.limits.STATS_VALUES_KEPT` (their exchanges are still counted)
    dropped: int = 0

    def add(self, ex: Exchange) -> None:
        self.count += 1
        o = ex.outcome
        if o is Outcome.OK:  # (most exchanges: one test, not six)
            self.ok += 1
        elif o in (Outcome.ERROR, Outcome.HTTP_ERROR):
            self.errors += 1
        elif o == Outcome.TOOL_ERROR:
            self.tool_errors += 1
        elif o in (Outcome.NO_RESPONSE, Outcome.LOST, Outcome.ABORTED):
            self.unanswered += 1
        elif o == Outcome.CANCELLED:
            self.cancelled += 1
        elif o in (Outcome.PENDING, Outcome.CLOSED):
            self.pending += 1
        else:
            self.ok += 1
        v = ex.latency_ms
        if v is not None:
            lat = self.latencies
            n = lat.get(v)
            if n is not None:  # (most latencies repeat one already seen: one look-up)
                lat[v] = n + 1
            else:
                self.dropped += _tally(lat, v, 1)

    def add_task(self, duration_ms: float) -> None:
        """A task this method created ended after ``duration_ms``."""
        self.dropped += _tally(self.task_durations, duration_ms, 1)

    def merge(self, other: MethodStats) -> None:
        self.count += other.count
        self.ok += other.ok
        self.errors += other.errors
        self.tool_errors += other.tool_errors
        self.unanswered += other.unanswered
        self.cancelled += other.cancelled
        self.pending += other.pending
        dropped = other.dropped
        for mine, theirs in (
            (self.latencies, other.latencies),
            (self.task_durations, other.task_durations),
        ):
            for v, c in theirs.items():
                dropped += _tally(mine, v, c)
        self.dropped += dropped

    @property
    def answered(self) -> int:
        """Requests that got an answer: a result, an error, a tool error or an MRTR round."""
        return self.ok + self.errors + self.tool_errors

    @property
    def error_rate(self) -> float:
        """Share of *answered* requests that failed at the protocol level.

        Requests nobody answered have their own column (``unanswered``): counting them here too
        made a session's unanswered pings read as "100 % errors" although nothing failed.
        """
        return self.errors / self.answered if self.answered else 0.0

    def counts(self) -> Counts:
        """The key and the counters (what :meth:`as_dict` and :meth:`stored` both start with)."""
        return {
            "direction": self.direction,
            "method": self.method,
            "name": self.name,
            "count": self.count,
            "ok": self.ok,
            "errors": self.errors,
            "tool_errors": self.tool_errors,
            "unanswered": self.unanswered,
            "cancelled": self.cancelled,
            "pending": self.pending,
        }

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self.counts(),
            "error_rate": round(self.error_rate, 4),
            "latency_ms": summary(self.latencies),
        }
        if self.task_durations:
            out["task_ms"] = summary(self.task_durations)
        if self.dropped:
            out["dropped"] = self.dropped
        return out

    def stored(self) -> StoredMethod:
        """These numbers as ``session_stats`` stores them (:meth:`from_stored` reads them)."""
        row: StoredMethod = {
            **self.counts(),
            "latencies": [[v, c] for v, c in sorted(self.latencies.items())],
            "task_durations": [[v, c] for v, c in sorted(self.task_durations.items())],
        }
        if self.dropped:
            row["dropped"] = self.dropped
        return row

    @classmethod
    def from_stored(cls, row: StoredMethod, *, by_name: bool = True) -> MethodStats:
        """A stored method's numbers (``by_name=False``: counted under the method alone)."""
        return cls(
            row["direction"],
            row["method"],
            row["name"] if by_name else None,
            row["count"],
            row["ok"],
            row["errors"],
            row["tool_errors"],
            row["unanswered"],
            row["cancelled"],
            row["pending"],
            {float(v): int(c) for v, c in row["latencies"]},
            {float(v): int(c) for v, c in row["task_durations"]},
            row.get("dropped", 0),
        )


StatsKey = tuple[str, str, str | None]


class MethodTable:
    """Per-method numbers grown one exchange at a time: a
    :class:`~mcp_proxy.analysis.consumer.Consumer` of the session's one pass (each exchange once
    its outcome is known, :meth:`exchange`; each task that ended, :meth:`add_task`, the
    pairing's ``on_task``), so no list of exchanges is ever held."""

    __slots__ = ("by_name", "stats")

    def __init__(self, *, by_name: bool = False) -> None:
        self.by_name = by_name
        self.stats: dict[StatsKey, MethodStats] = {}

    def _of(self, ex: Exchange) -> MethodStats:
        name = ex.name if self.by_name else None
        key = (ex.direction, ex.method, name)
        st = self.stats.get(key)
        if st is None:
            if len(self.stats) >= STATS_METHODS_KEPT:  # a peer's strings: bounded
                key = (ex.direction, OTHER_METHODS, None)
                st = self.stats.get(key)
                if st is not None:
                    return st
            st = self.stats[key] = MethodStats(*key)
        return st

    def exchange(self, ex: Exchange) -> None:
        self._of(ex).add(ex)

    def add_task(self, ex: Exchange) -> None:
        """A task ``ex`` created reached its end: its duration (the pairing's ``on_task``)."""
        if ex.task is not None and ex.task.duration_ms is not None:
            self._of(ex).add_task(ex.task.duration_ms)

    def reads_messages(self) -> bool:
        return False  # exchanges only

    def reads_exchanges(self) -> bool:
        return True

    def message(self, m: Msg) -> None:
        pass

    def finish(self) -> None:
        pass


def merge_stats(
    parts: Iterable[dict[StatsKey, MethodStats]],
) -> dict[StatsKey, MethodStats]:
    """Combine per-session stats (latencies are pooled, not averaged)."""
    out: dict[StatsKey, MethodStats] = {}
    for part in parts:
        for key, st in part.items():
            mine = out.get(key)
            if mine is None:
                mine = out[key] = MethodStats(st.direction, st.method, st.name)
            mine.merge(st)
    return out


def sorted_stats(stats: dict[StatsKey, MethodStats]) -> list[MethodStats]:
    """Host requests first, then by call count (busiest first), then by name."""
    return sorted(
        stats.values(), key=lambda s: (s.direction != "c2s", -s.count, s.method, s.name or "")
    )
