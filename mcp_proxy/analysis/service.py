"""The analysis service: load a session, analyse it, keep its findings — for every caller.

The CLI (``check``, ``stats``, ``show``), the dashboard and scripts all call this module, so a
session is analysed one way whoever asks. Findings are derived data, stored so that reading them
is one indexed query even for a huge session. Next to a session's analyzer findings sits one
``analysis.summary`` row whose ``detail`` records what they were computed from (analyzer version,
the session's frame count and how it ended). They are recomputed — transparently, on the next
read — when any of those changed: a new analyzer version, new frames, or the session ending.

Entry points:

- :func:`stored_findings` — a session's findings (recorder + analyzer) in the one finding shape
  (:func:`~mcp_proxy.analysis.model.finding_record`) and whether they are current, recomputed
  first when stale by the one streaming pass over the session, which stores its findings and
  its per-method numbers (what ``mcptape check`` and ``show`` print; ``show -x`` hands the same
  pass a consumer of each exchange); :func:`current_findings` is its list;
  :func:`findings_view` is it for an event loop (the dashboard, in a worker thread);
- :func:`stats_of_sessions` — per-method numbers over one or many sessions: what ``mcptape
  stats`` prints, read from ``session_stats`` (stored when a session ends) and recomputed first
  only when stale, by the same pass; :func:`sessions_stats` is it for an event loop;
- :func:`settle` — store an ended session's numbers and findings if they are not current (the
  recorder process, when a session ends), by the same pass;
- :func:`session_analysis` — the full :class:`~mcp_proxy.analysis.Analysis` (exchanges, chains,
  findings, facts) of a session, computed now and stored nowhere (the dashboard's pages of a
  session small enough to analyse whole).

Only the one pass (``_session_pass``, bounded memory) analyses a stored session and stores what
it found; async callers run it in a worker thread so that an event loop keeps answering.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, cast

from mcp_proxy.analysis.catalogue import SUMMARY_CODE
from mcp_proxy.analysis.consumer import Consumer
from mcp_proxy.analysis.core import Analysis, SessionPass, analyze, http_rows
from mcp_proxy.analysis.facts import DECODER_COLUMNS, Decoder, FactsBuilder, Injected
from mcp_proxy.analysis.model import Msg, finding_order, finding_record
from mcp_proxy.analysis.stats import (
    MethodStats,
    MethodTable,
    StatsKey,
    StoredMethod,
    merge_stats,
    sorted_stats,
)
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.errors import StoreError
from mcp_proxy.osutil import gc_paused
from mcp_proxy.store.direct import DirectStore
from mcp_proxy.store.liveness import session_status
from mcp_proxy.store.rows import (
    FindingRow,
    HttpExchangeRow,
    SessionRow,
    SessionStatsRow,
    StoredFinding,
)
from mcp_proxy.store.stream import (
    FACTS_COLUMNS,
    FACTS_ROWS,
    REQUEST_ROWS,
    shaped_pages,
)

if TYPE_CHECKING:  # the async store: imported by its callers, never by the recorder's settle
    from mcp_proxy.store.queries import Store

log = logging.getLogger(__name__)

__all__ = [
    "current_findings",
    "fault_end",
    "finding_rows",
    "findings_view",
    "fingerprint",
    "is_fresh",
    "load_sync",
    "session_analysis",
    "session_stats",
    "session_view",
    "sessions_stats",
    "settle",
    "sort_rows",
    "stats_fresh",
    "stats_of_sessions",
    "stats_row",
    "stored_findings",
    "stream_analysis",
]


class SessionView(SessionRow, total=False):
    """A session row as the analysis reads it (:func:`session_view`), with how it was cut."""

    fault_end: str | None  # :func:`fault_end`


class Fingerprint(TypedDict):
    """What stored findings and numbers depend on besides the analyzer (:func:`fingerprint`)."""

    analyzer_version: str
    frames: int
    status: str
    exit_code: int | None
    exit_signal: int | None


def session_view(session: SessionRow) -> SessionView:
    """The session row as the analysis reads it: ``status`` resolved (``abandoned`` when the
    recorder of a ``live`` row is gone)."""
    view = cast(SessionView, dict(session))
    view["status"] = session_status(session)
    return view


def fault_end(recorded: Iterable[Mapping[str, Any]]) -> str | None:
    """The fault rule that cut a session's connection, from the relay's ``inject.disconnect``
    finding (``disconnect mode=kill …``, with its signal), or None: what tells the analysis that
    the session's end was mcptape's doing, not the host's or the server's."""
    for f in recorded:
        if f.get("code") != "inject.disconnect":
            continue
        try:
            detail = json.loads(f.get("detail") or "{}")
        except (TypeError, ValueError):
            detail = {}
        if not isinstance(detail, dict):
            detail = {}
        rule = str(detail.get("rule") or "disconnect")
        return rule + (f", {detail['signal']}" if detail.get("signal") else "")
    return None


def fingerprint(session: SessionRow) -> Fingerprint:
    """What stored findings depend on besides the analyzer itself."""
    return {
        "analyzer_version": ANALYZER_VERSION,
        "frames": int(session.get("frame_count") or 0),
        "status": session_status(session),
        "exit_code": session.get("exit_code"),
        "exit_signal": session.get("exit_signal"),
    }


def summary_fingerprint(summary: StoredFinding | None) -> dict[str, Any] | None:
    """The fingerprint a summary row's ``detail`` records (parsed JSON), or None."""
    if summary is None or summary.get("analyzer_version") != ANALYZER_VERSION:
        return None
    try:
        detail = json.loads(summary.get("detail") or "")
    except ValueError:
        return None
    fp = detail.get("fingerprint") if isinstance(detail, dict) else None
    return fp if isinstance(fp, dict) else None


def is_fresh(session: SessionRow, summary: StoredFinding | None) -> bool:
    """True when the stored findings were computed from this session as it is now."""
    return summary_fingerprint(summary) == fingerprint(session)


def finding_rows(
    analysis: Analysis, session: SessionRow, *, now: float | None = None
) -> list[FindingRow]:
    """The rows to store: every finding plus the summary row that makes them checkable."""
    now = time.time() if now is None else now
    sid = session["id"]
    rows: list[FindingRow] = [
        {
            "session_id": sid,
            "code": f.code,
            "severity": f.severity,
            "title": f.title[:2000],
            "detail": f.detail,
            "frame_seqs": f.frame_seqs,
            "source": "analyzer",
            "analyzer_version": ANALYZER_VERSION,
            "created_at": now,
        }
        for f in analysis.findings
    ]
    counts = analysis.counts()
    rows.append(
        {
            "session_id": sid,
            "code": SUMMARY_CODE,
            "severity": "info",
            "title": (
                f"analysed {analysis.frame_count} frames, {analysis.exchange_count} exchanges:"
                f" {counts['error']} errors, {counts['warning']} warnings, {counts['info']} info"
            ),
            # Only what readers use: the fingerprint that says whether these rows are current.
            "detail": json.dumps({"fingerprint": fingerprint(session)}, sort_keys=True),
            "frame_seqs": [],
            "source": "analyzer",
            "analyzer_version": ANALYZER_VERSION,
            "created_at": now,
        }
    )
    return rows


#: Frames read from the store per query while streaming a session into the analysis.
LOAD_BATCH = 20_000


def load_sync(url: str, session_id: str) -> Decoder:
    """A session's frames read in the calling thread into a :class:`Decoder`, in batches.

    Rows are turned into messages as they arrive and then dropped, so a session is never held
    twice in memory (rows and messages); the cyclic GC is paused meanwhile (the messages make
    no cycles, and a collector walking a growing list of a million of them is most of the time).
    """
    decoder = Decoder()
    with gc_paused():
        _read(url, session_id, decoder, lambda: None)
    return decoder


def _read(url: str, session_id: str, decoder: Decoder, after: Callable[[], None]) -> None:
    """Stream a session's rows (``frame_rows`` as stored, :data:`DECODER_COLUMNS`) from the
    store into ``decoder``, calling ``after`` after each batch."""
    shapes, batches = shaped_pages(url, session_id, DECODER_COLUMNS, batch=LOAD_BATCH)
    for rows in batches:
        decoder.feed(rows, shapes)
        after()


def stream_analysis(
    url: str,
    session: SessionView,
    http_list: Sequence[HttpExchangeRow],
    *,
    also: Callable[[Sequence[Injected]], Consumer] | None = None,
    stats: MethodTable | None = None,
) -> Analysis:
    """A session's findings in bounded memory: two streaming passes over its frames.

    The first reads the handshake facts (:class:`~mcp_proxy.analysis.facts.FactsBuilder`: era,
    versions, capabilities decide how every later message is judged); the second feeds one
    :class:`~mcp_proxy.analysis.core.SessionPass` that keeps no exchange. Memory: a batch of
    rows, the pending requests, the pairing's look-ahead and the check families' bounded state,
    whatever the session's size. The result has the findings and counts, not the exchanges
    (``exchange_count`` says how many): what ``check`` stores and the recorder process settles.
    ``session`` as :func:`session_view` gives it, with its ``fault_end``. ``also`` makes one more
    consumer of the pass from the list of injected frames the pass fills (``show -x``);
    ``stats`` counts each exchange and each ended task of the same pass (the per-method numbers
    the settle stores: one read of the session for both).
    """
    sid = str(session["id"])
    http = http_rows(http_list)
    with gc_paused():
        facts = FactsBuilder(session, http)
        # The handshake pass: only the frames the facts depend on (and the first and last, for
        # the session's span) are fetched, with only their bodies.
        first = Decoder(facts.feed, reads=facts.reads)
        shapes, batches = shaped_pages(url, sid, FACTS_COLUMNS, batch=LOAD_BATCH, rows=FACTS_ROWS)
        for rows in batches:
            first.feed(rows, shapes)
        facts.span(first.first_ts, first.last_ts)
        _first_envelope(url, sid, facts)
        injected: list[Injected] = []
        extra: list[Consumer] = [] if also is None else [also(injected)]
        on_task = None
        if stats is not None:
            extra.append(stats)
            on_task = stats.add_task
        one = SessionPass(facts.finish(), http, injected, keep=False, also=extra, on_task=on_task)
        held: list[Msg] = []
        decoder = Decoder(held.append)
        decoder.injected = injected

        def flush() -> None:
            one.feed_many(held)
            held.clear()

        _read(url, sid, decoder, flush)
        return one.finish(session, decoder.frames)


#: Host requests read per query while looking for the first that carries the envelope (in a
#: 2026-07-28 session the first request does: one small query, ~2 ms; a session without the
#: envelope is read through, a thousand requests a statement on PostgreSQL's keyset pages).
ENVELOPE_BATCH = 1000


def _first_envelope(url: str, session_id: str, facts: FactsBuilder) -> None:
    """Feed the host's requests to :meth:`FactsBuilder.envelope`, in order, until the first
    that carries the envelope is known (the handshake frames fed first may have settled it)."""
    decoder = Decoder(facts.envelope)
    shapes, batches = shaped_pages(
        url, session_id, FACTS_COLUMNS, batch=ENVELOPE_BATCH, rows=REQUEST_ROWS
    )
    try:
        for rows in batches:
            found = facts.facts.first_envelope_seq
            if found is not None and found <= rows[0][0]:
                return
            decoder.feed(rows, shapes)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


async def session_analysis(store: Store, session: SessionRow) -> Analysis:
    """The full analysis of a session (exchanges, chains, findings, facts), computed now in a
    worker thread and stored nowhere: what the dashboard shows of a session small enough to
    analyse whole (its caller's bound). What a session's stored findings and numbers come from
    is the one bounded pass (:func:`stored_findings`)."""
    http = await store.http_exchanges(session["id"])
    view = session_view(session)
    view["fault_end"] = fault_end(await store.recorded_findings(session["id"]))
    return await asyncio.to_thread(_load_and_analyze, store.url, str(session["id"]), view, http)


def _load_and_analyze(
    url: str, session_id: str, view: SessionView, http: list[HttpExchangeRow]
) -> Analysis:
    """Read and analyse in one go (a worker thread's whole job: the loop stays free)."""
    return analyze(load_sync(url, session_id), session=view, http_exchanges=http)


async def findings_view(
    store: Store, session: SessionRow, *, analyse_if_stale: bool = True, force: bool = False
) -> tuple[list[dict[str, Any]], bool]:
    """A session's findings and whether they are current, for an event loop (the dashboard):
    :func:`stored_findings` in a worker thread. With ``analyse_if_stale`` (the caller's choice,
    e.g. "small enough to analyse inline") stale findings are recomputed first, and with
    ``force`` whatever the stored ones ("Analyse now"); a read-only database still gets the
    stored rows.

    Current findings, and stale ones not to be analysed, are read through the async store (its
    one driver connection, :class:`~mcp_proxy.store.direct.DirectStore`); only a pass opens its
    own, for as long as it runs."""
    if not force:
        sid = str(session["id"])
        now = await store.get_session(sid) or session
        fresh = is_fresh(now, await store.analysis_summary(sid))
        if fresh or not analyse_if_stale:
            return finding_records(await store.recorded_findings(sid)), fresh
    return await asyncio.to_thread(
        stored_findings,
        store.url,
        session,
        analyse=force or analyse_if_stale,
        recompute=force,
        strict=False,
    )


async def sessions_stats(
    store: Store, sessions: Iterable[SessionRow], *, by_name: bool = False
) -> list[MethodStats]:
    """:func:`stats_of_sessions` for an event loop (the dashboard): in a worker thread, through
    the driver, on the async store's database."""
    return await asyncio.to_thread(stats_of_sessions, store.url, list(sessions), by_name=by_name)


def stats_of_sessions(
    url: str,
    sessions: Iterable[SessionRow],
    *,
    by_name: bool = False,
    recompute: bool = False,
) -> list[MethodStats]:
    """Per-method numbers over these sessions, busiest host methods first (``mcptape stats``).

    Each session's numbers are read from ``session_stats`` (stored when the session ended); a
    session whose stored numbers are missing or stale (another analyzer version, new frames, a
    new ending), or all of them with ``recompute``, is read in its one streaming pass
    (:func:`_session_pass`, which stores its findings too when they are stale) and its numbers
    stored. Either way they reach the table through their
    stored form (:meth:`~mcp_proxy.analysis.stats.MethodStats.stored`), so what is printed is
    the same whether it was read or recomputed; latencies pool exactly (histograms).
    """
    with DirectStore(url) as store:

        def each() -> Iterator[dict[StatsKey, MethodStats]]:
            for s in sessions:
                for row in session_stats(store, url, s, recompute=recompute):
                    st = MethodStats.from_stored(row, by_name=by_name)
                    yield {(st.direction, st.method, st.name): st}

        return sorted_stats(merge_stats(each()))


def stats_row(session: SessionRow, stats: dict[StatsKey, MethodStats]) -> SessionStatsRow:
    """The ``session_stats`` row of a session's per-method numbers (by name), stamped with what
    they were computed from (:func:`fingerprint`)."""
    return {
        "session_id": session["id"],
        "analyzer_version": ANALYZER_VERSION,
        "fingerprint": json.dumps(fingerprint(session), sort_keys=True),
        "methods": [st.stored() for st in sorted_stats(stats)],
        "created_at": time.time(),
    }


def stats_fresh(session: SessionRow, row: SessionStatsRow | None) -> bool:
    """True when a stored ``session_stats`` row was computed from this session as it is now."""
    if row is None or row.get("analyzer_version") != ANALYZER_VERSION:
        return False
    try:
        return bool(json.loads(row.get("fingerprint") or "") == fingerprint(session))
    except ValueError:
        return False


def session_stats(
    store: DirectStore, url: str, session: SessionRow, *, recompute: bool = False
) -> list[StoredMethod]:
    """A session's per-method numbers (by name) as stored: the stored row when it is current,
    else the session's one streaming pass (:func:`_session_pass`), its numbers stored unless the
    session is still live (a database that cannot be written still gets its numbers)."""
    row = None if recompute else store.session_stats(str(session["id"]))
    if row is not None and stats_fresh(session, row):
        methods: list[StoredMethod] = row["methods"]
        return methods
    return _session_pass(store, url, session, recount=True)


def _session_pass(
    store: DirectStore,
    url: str,
    session: SessionRow,
    *,
    findings: bool = False,
    recount: bool = False,
    strict: bool = True,
    also: Callable[[Sequence[Injected]], Consumer] | None = None,
) -> list[StoredMethod]:
    """The one streaming pass over a stored session (:func:`stream_analysis` with a
    :class:`~mcp_proxy.analysis.stats.MethodTable`): it gives both the session's per-method
    numbers and its findings, and whoever ran it — the settle, ``stats``, ``check`` — stores
    both, so that the next of either command is a read. The numbers are stored unless the
    session is live (a database that cannot be written still gets them); the findings with
    ``findings`` (``check``, ``show -x``, the dashboard: whatever the stored ones, a failure
    raised unless not ``strict``), else when the stored ones are stale and the session is not
    live. The numbers are stored when the stored ones are stale, or with ``recount`` whatever
    they are (``stats --recompute``). ``also`` makes one more consumer of the pass (:func:`stream_analysis`). Returns the
    numbers in their stored form."""
    sid = str(session["id"])
    view = session_view(session)
    view["fault_end"] = fault_end(store.recorded_findings(sid))
    table = MethodTable(by_name=True)
    analysis = stream_analysis(url, view, store.http_exchanges(sid), also=also, stats=table)
    fresh = stats_row(session, table.stats)
    if findings:
        try:
            store.replace_analyzer_findings(sid, finding_rows(analysis, session))
        except StoreError as exc:
            if strict:
                raise
            log.warning("could not store the findings of %s: %s", sid, exc)
    if view["status"] != "live":
        try:
            if recount or not stats_fresh(session, store.session_stats(sid)):
                store.replace_session_stats(fresh)
            if not findings and not is_fresh(session, store.analysis_summary(sid)):
                store.replace_analyzer_findings(sid, finding_rows(analysis, session))
        except StoreError as exc:
            log.warning("could not store the stats and findings of %s: %s", sid, exc)
    stored: list[StoredMethod] = fresh["methods"]
    return stored


def settle(url: str, session_id: str) -> bool:
    """Store the per-method numbers and the findings of a session that ended, unless current
    ones are stored: what the recorder process does once a session's rows are written
    (``mcp_proxy.recorder_process``), so that the first ``stats`` and the first ``check`` are
    reads. True when it analysed the session.

    Both come from one streaming pass over the session (:func:`_session_pass`): the session's
    rows are read once (its handshake's frames, then every frame once). Through the driver
    (:class:`~mcp_proxy.store.direct.DirectStore`), with no event loop: on SQLite the recorder
    process imports no SQLAlchemy for it (the async store's start-up cost more CPU than a small
    session's analysis, in every ``mcptape record``)."""
    with DirectStore(url) as store:
        session = store.session(session_id)
        if session is None or session_status(session) == "live":
            return False
        if stats_fresh(session, store.session_stats(session_id)) and is_fresh(
            session, store.analysis_summary(session_id)
        ):
            return False
        _session_pass(store, url, session)
        return True


def stored_findings(
    url: str,
    session: SessionRow,
    *,
    analyse: bool = True,
    recompute: bool = False,
    strict: bool = True,
    also: Callable[[Sequence[Injected]], Consumer] | None = None,
) -> tuple[list[dict[str, Any]], bool]:
    """A session's findings (recorder and analyzer) as stored, and whether they are current.

    With ``analyse``, stale ones (or all with ``recompute``, or whenever ``also`` asks for the
    pass: ``show -x``) are first recomputed by the one streaming pass (:func:`_session_pass`),
    which stores them and the session's numbers, so that the next ``check`` or ``stats`` is a
    read; ``strict=False`` lets a read-only database still answer with what it has. Through
    the driver, with no event loop: on SQLite no SQLAlchemy is imported (its import cost
    ``check`` on stored findings more CPU than the rest of its work). Records in the one
    finding shape (:func:`~mcp_proxy.analysis.model.finding_record`), in the one order."""
    sid = str(session["id"])
    with DirectStore(url) as store:
        now = store.session(sid) or session
        fresh = is_fresh(now, store.analysis_summary(sid))
        if analyse and (recompute or also is not None or not fresh):
            _session_pass(
                store, url, now, findings=recompute or not fresh, strict=strict, also=also
            )
            fresh = is_fresh(now, store.analysis_summary(sid))
        rows = store.recorded_findings(sid)
    return finding_records(rows), fresh


def current_findings(
    url: str, session: SessionRow, *, recompute: bool = False
) -> list[dict[str, Any]]:
    """:func:`stored_findings`, recomputed first when stale (``check``, ``show``)."""
    return stored_findings(url, session, recompute=recompute)[0]


def finding_records(rows: Iterable[StoredFinding]) -> list[dict[str, Any]]:
    """A session's stored findings (the summary row left out) in the one finding shape
    (:func:`~mcp_proxy.analysis.model.finding_record`) and the one order."""
    return sort_rows([finding_record(r) for r in rows if r["code"] != SUMMARY_CODE])


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings in the one order (worst first, then by frame)."""
    return sorted(rows, key=finding_order)
