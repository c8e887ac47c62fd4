"""The dashboard's adapter over :mod:`mcp_proxy.analysis.service`: caching and scheduling only.

A session's stored findings (and per-method numbers) come from the one bounded pass of
:mod:`mcp_proxy.analysis.service` — what ``mcptape check``, ``show`` and ``stats`` run — in a worker
thread; this module only decides *when* (a page never costs more than a page) and keeps results
for reuse:

- **whole session** (up to :data:`INLINE_LIMIT` frames, cached per session state): exchanges
  and MRTR chains (:func:`~mcp_proxy.analysis.service.session_analysis`), stored nowhere;
- **findings**: the stored ones, recomputed first by the bounded pass when stale (a session up
  to :data:`INLINE_LIMIT` frames, or any session with ``Analyse now``), so the sessions list
  can count them;
- **window** (one timeline page plus the answers to its requests, or one exchange's span): for
  larger sessions and for live streams. Outcomes, latency and notification grouping of the
  requests on the page are exact; findings come from the stored analysis (``Analyse now``, or
  ``mcptape check``), never from a partial view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

from mcp_proxy.analysis import service
from mcp_proxy.analysis.catalogue import CATALOGUE, SUMMARY_CODE
from mcp_proxy.analysis.core import Analysis, analyze
from mcp_proxy.analysis.model import Exchange, Outcome, finding_record
from mcp_proxy.analysis.stats import MethodStats
from mcp_proxy.analysis.taxonomy import NAMES, classify_error
from mcp_proxy.errors import StoreError
from mcp_proxy.limits import ANALYSES_AT_ONCE, INLINE_LIMIT
from mcp_proxy.limits import ANALYSIS_CACHE as CACHE_SIZE
from mcp_proxy.limits import ANALYSIS_LOCKS as LOCKS
from mcp_proxy.store.queries import Store
from mcp_proxy.store.rows import SessionRow, ViewFrame

log = logging.getLogger(__name__)


def _tone(outcome: Outcome) -> str:
    """How a badge shows an outcome: ``ok``, ``pending`` (not over yet) or ``err``."""
    if outcome == Outcome.OK:
        return "ok"
    if outcome in (Outcome.INPUT_REQUIRED, Outcome.PENDING, Outcome.CLOSED):
        return "pending"
    return "err"


#: Every :class:`~mcp_proxy.analysis.model.Outcome` and its badge style.
OUTCOME_STYLE = {o.value: _tone(o) for o in Outcome}
OUTCOMES = tuple(OUTCOME_STYLE)

session_view = service.session_view


def _key(session: SessionRow) -> tuple[Any, ...]:
    """Cache key: the session and everything its analysis depends on (the service's rule)."""
    return (session["id"], *service.fingerprint(session).values())


class Analyst:
    """Analyses for one app: a small LRU of whole-session results, and the window helper."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: OrderedDict[tuple[Any, ...], Analysis] = OrderedDict()
        # One lock per session being analysed whole, so that two pages do not analyse it twice;
        # at most LOCKS of them (least recently used dropped: a dropped lock still serves
        # whoever holds it, and a later page at worst analyses that session once more).
        self._locks: OrderedDict[str, asyncio.Lock] = OrderedDict()
        #: bounded passes running at once (:data:`ANALYSES_AT_ONCE`): the rest wait
        self._passes = asyncio.Semaphore(ANALYSES_AT_ONCE)
        self._queue: deque[SessionRow] = deque()
        self._queued: set[str] = set()
        self._worker: asyncio.Task[None] | None = None

    def small(self, session: SessionRow) -> bool:
        return int(session.get("frame_count") or 0) <= INLINE_LIMIT

    def locks(self) -> int:
        """How many per-session locks are kept (at most :data:`LOCKS`)."""
        return len(self._locks)

    def _lock(self, sid: str) -> asyncio.Lock:
        lock = self._locks.get(sid)
        if lock is None:
            lock = self._locks[sid] = asyncio.Lock()
            while len(self._locks) > LOCKS:
                self._locks.popitem(last=False)
        else:
            self._locks.move_to_end(sid)
        return lock

    async def whole(self, session: SessionRow) -> Analysis | None:
        """The whole-session analysis, or None when the session is too big (more than
        :data:`INLINE_LIMIT` frames: its pages analyse windows). Runs in a worker thread (it is
        CPU work) and stores nothing: the stored findings come from the one bounded pass
        (:meth:`findings`)."""
        if not self.small(session):
            return None
        key = _key(session)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        async with self._lock(session["id"]):
            hit = self._cache.get(key)
            if hit is not None:
                return hit
            result = await service.session_analysis(self.store, session)
            self._cache[key] = result
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return result

    async def window(self, session: SessionRow, rows: Sequence[ViewFrame]) -> Analysis:
        """Analyse just these frame rows (a page and its partners), in seq order."""
        by_seq = {r["seq"]: r for r in rows}
        ordered = [by_seq[s] for s in sorted(by_seq)]
        if len(ordered) > 2000:
            return await asyncio.to_thread(analyze, ordered, session=session_view(session))
        return analyze(ordered, session=session_view(session))

    async def findings(self, session: SessionRow) -> tuple[list[dict[str, Any]], bool]:
        """The session's stored findings (recorder and analyzer), and whether they are current;
        stale ones of a small session are recomputed and stored first (the one bounded pass:
        one page at a time per session, :data:`ANALYSES_AT_ONCE` sessions at a time)."""
        got = await service.findings_view(self.store, session, analyse_if_stale=False)
        if got[1] or not self.small(session):
            return got
        async with self._lock(session["id"]), self._passes:
            return await service.findings_view(self.store, session)

    def schedule(self, sessions: list[SessionRow]) -> None:
        """Analyse these sessions in the background, one at a time, so that a list page shows
        finding counts without waiting for them (its live stream then updates the counts)."""
        for s in sessions:
            if s["id"] not in self._queued and self.small(s):
                self._queued.add(s["id"])
                self._queue.append(s)
        if self._queue and (self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._queue:
            s = self._queue.popleft()
            try:
                await self.findings(s)
            except StoreError as exc:
                log.warning("background analysis of %s failed: %s", s["id"], exc)
            finally:
                self._queued.discard(s["id"])

    async def close(self) -> None:
        """Stop the background worker (app shutdown)."""
        self._queue.clear()
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker

    async def refresh(self, session: SessionRow) -> tuple[list[dict[str, Any]], bool]:
        """Analyse a session of any size now and store its findings and numbers (the "Analyse
        now" button): the one bounded pass, whatever the stored state; returns the findings.
        Clicks on the same session wait for the pass under way (its lock) and then run theirs;
        passes of other sessions wait their turn (:data:`ANALYSES_AT_ONCE`)."""
        async with self._lock(session["id"]), self._passes:
            return await service.findings_view(self.store, session, force=True)


def exchange_index(analysis: Analysis) -> dict[str, dict[int, Exchange]]:
    """Exchanges by request seq, and which exchange each of their other frames belongs to."""
    by_request: dict[int, Exchange] = {}
    owner: dict[int, Exchange] = {}
    for ex in analysis.exchanges:
        by_request.setdefault(ex.request_seq, ex)
        if ex.response_seq is not None:
            owner.setdefault(ex.response_seq, ex)
        for seq in (*ex.progress_seqs, *ex.log_seqs, *ex.other_seqs):
            owner.setdefault(seq, ex)
        if ex.cancel_seq is not None:
            owner.setdefault(ex.cancel_seq, ex)
    return {"request": by_request, "owner": owner}


def outcome_label(ex: Exchange) -> str:
    """``ok``, ``tool error``, or the taxonomy's name for the error (``Invalid params`` …)."""
    if ex.outcome == "error":
        if ex.error_class and ex.error_class in CATALOGUE:
            return CATALOGUE[ex.error_class].title
        return error_name(ex.error_code)
    return ex.outcome.replace("_", " ")


def error_name(code: int | None) -> str:
    """The taxonomy's short name for a JSON-RPC error code."""
    if code is None:
        return "error"
    return NAMES.get(code) or classify_error(code).name


def finding_dict(f: Any) -> dict[str, Any]:
    """The one finding shape (:func:`~mcp_proxy.analysis.model.finding_record`)."""
    return finding_record(f)


class CodeCount(TypedDict):
    code: str
    title: str
    severity: str
    count: int


class AreaCount(TypedDict):
    area: str
    count: int
    codes: list[CodeCount]


def method_rows(stats: list[MethodStats]) -> list[dict[str, Any]]:
    """The stats page's method rows: :meth:`MethodStats.as_dict` plus the fastest latency."""
    rows = []
    for st in stats:
        d = st.as_dict()
        d["latency_ms"]["min"] = min(st.latencies) if st.latencies else None
        rows.append(d)
    return rows


def findings_by_area(records: Iterable[dict[str, Any]]) -> list[AreaCount]:
    """Analyzer findings (records of :func:`~mcp_proxy.analysis.model.finding_record`)
    counted by taxonomy area and code, the busiest first."""
    areas: dict[str, AreaCount] = {}
    codes: dict[tuple[str, str], CodeCount] = {}
    for f in records:
        code = str(f.get("code") or "")
        if code == SUMMARY_CODE or f.get("source") != "analyzer":
            continue
        entry = CATALOGUE.get(code)
        area = entry.area if entry else code.split(".", 1)[0]
        bucket = areas.get(area)
        if bucket is None:
            bucket = areas[area] = AreaCount(area=area, count=0, codes=[])
        bucket["count"] += 1
        c = codes.get((area, code))
        if c is None:
            c = codes[(area, code)] = CodeCount(
                code=code,
                title=entry.title if entry else code,
                severity=str(f.get("severity") or "info"),
                count=0,
            )
            bucket["codes"].append(c)
        c["count"] += 1
    out = sorted(areas.values(), key=lambda b: -b["count"])
    for b in out:
        b["codes"].sort(key=lambda c: -c["count"])
    return out
