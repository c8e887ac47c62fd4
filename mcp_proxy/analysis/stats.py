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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from typing import Any, TypedDict

from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.facts import Decoder, FactsBuilder, Injected
from mcp_proxy.analysis.model import Exchange, Msg, Outcome
from mcp_proxy.analysis.reorder import Mark
from mcp_proxy.analysis.tasks import TASK_NOTIFICATIONS

#: An exact histogram: each distinct value (ms) and how many times it happened.
Histogram = dict[float, int]


def _add_all(into: Histogram, other: Histogram) -> None:
    for v, c in other.items():
        into[v] = into.get(v, 0) + c


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


class StoredMethod(TypedDict):
    """One method's numbers as ``session_stats.methods`` stores them (a JSON list of these):
    the counts, and each histogram as ``[value, count]`` pairs in value order."""

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
    latencies: list[list[float]]
    task_durations: list[list[float]]


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
            lat[v] = lat.get(v, 0) + 1

    def merge(self, other: MethodStats) -> None:
        self.count += other.count
        self.ok += other.ok
        self.errors += other.errors
        self.tool_errors += other.tool_errors
        self.unanswered += other.unanswered
        self.cancelled += other.cancelled
        self.pending += other.pending
        _add_all(self.latencies, other.latencies)
        _add_all(self.task_durations, other.task_durations)

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

    def as_dict(self) -> dict[str, Any]:
        out = {
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
            "error_rate": round(self.error_rate, 4),
            "latency_ms": summary(self.latencies),
        }
        if self.task_durations:
            out["task_ms"] = summary(self.task_durations)
        return out

    def stored(self) -> StoredMethod:
        """These numbers as ``session_stats`` stores them (:meth:`from_stored` reads them)."""
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
            "latencies": [[v, c] for v, c in sorted(self.latencies.items())],
            "task_durations": [[v, c] for v, c in sorted(self.task_durations.items())],
        }

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
        )


StatsKey = tuple[str, str, str | None]


class MethodTable:
    """Per-method numbers grown one exchange at a time: the consumer ``stats`` hands to the
    pairing (:class:`~mcp_proxy.analysis.exchanges.Pairing` ``on_final``), so no list of
    exchanges is ever held."""

    __slots__ = ("by_name", "stats")

    def __init__(self, *, by_name: bool = False) -> None:
        self.by_name = by_name
        self.stats: dict[StatsKey, MethodStats] = {}

    def add(self, ex: Exchange) -> None:
        name = ex.name if self.by_name else None
        key = (ex.direction, ex.method, name)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = MethodStats(ex.direction, ex.method, name)
        st.add(ex)

    def add_task(self, ex: Exchange) -> None:
        """A task ``ex`` created reached its end: its duration (the pairing's ``on_task``)."""
        if ex.task is None or ex.task.duration_ms is None:
            return
        name = ex.name if self.by_name else None
        key = (ex.direction, ex.method, name)
        st = self.stats.get(key)
        if st is None:
            st = self.stats[key] = MethodStats(ex.direction, ex.method, name)
        durations = st.task_durations
        durations[ex.task.duration_ms] = durations.get(ex.task.duration_ms, 0) + 1


_OUTCOME_KINDS = frozenset({"request", "response", "error", "batch"})


def _outcome_kinds(_channel: str, kind: str, method: str | None) -> bool:
    """The messages an outcome depends on (the rest only hold their place in the pairing)."""
    return (
        kind in _OUTCOME_KINDS
        or method == "notifications/cancelled"
        or (method in TASK_NOTIFICATIONS)
    )


class StatsPass:
    """One session's per-method numbers in one streaming pass: :meth:`feed` (or
    :meth:`feed_shaped`) the session's frame rows in ``seq`` order, batch by batch, then
    :meth:`finish`.

    Each message an outcome depends on is decoded, read for the handshake
    (:class:`FactsBuilder`) and paired (:class:`Pairing` without ``keep``) as it comes, then
    dropped (the others only hold their place: a :class:`~mcp_proxy.analysis.reorder.Mark`);
    each exchange is counted once its outcome is known. Memory: the pending requests and the
    reorder look-ahead.
    """

    def __init__(
        self,
        session: Mapping[str, Any] | None = None,
        http_rows: Sequence[Mapping[str, Any]] = (),
        *,
        by_name: bool = False,
    ) -> None:
        http = {int(r["id"]): r for r in http_rows if r.get("id") is not None}
        self.table = MethodTable(by_name=by_name)
        self.facts = FactsBuilder(session, http)
        injected: list[Injected] = []
        self.pairing = Pairing(
            self.facts.facts,
            http,
            injected=injected,
            keep=False,
            on_final=self.table.add,
            names=by_name,
            on_task=self.table.add_task,
        )
        #: messages decoded from the current batch of rows, on their way to the pairing
        self.held: list[Msg | Mark] = []
        feed_facts, hold = self.facts.feed, self.held.append

        def emit(m: Msg) -> None:
            feed_facts(m)
            hold(m)

        # A mark goes straight onto the list (no Python frame of its own: half the frames of a
        # busy session are marks).
        self.decoder = Decoder(emit, reads=_outcome_kinds, mark=hold)
        self.decoder.injected = injected

    def flush(self) -> None:
        """Hand the messages decoded so far to the pairing (after each batch of rows)."""
        self.pairing.feed_many(self.held)
        self.held.clear()

    def feed(self, rows: Iterable[Any]) -> None:
        """The session's next frame rows (any shape :meth:`Decoder.feed` takes)."""
        self.decoder.feed(rows)
        self.flush()

    def feed_shaped(self, rows: Iterable[Sequence[Any]], shapes: Callable[[int], Any]) -> None:
        """The next rows as ``frame_rows`` stores them (:meth:`Decoder.feed_shaped`)."""
        self.decoder.feed_shaped(rows, shapes)
        self.flush()

    def finish(self) -> dict[StatsKey, MethodStats]:
        self.flush()
        self.facts.finish()
        self.pairing.finish()
        return self.table.stats


def method_stats(
    exchanges: Iterable[Exchange], *, by_name: bool = False
) -> dict[StatsKey, MethodStats]:
    """Group exchanges by (direction, method[, name]) and count them."""
    table = MethodTable(by_name=by_name)
    for ex in exchanges:
        table.add(ex)
        if ex.task is not None:
            table.add_task(ex)
    return table.stats


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
