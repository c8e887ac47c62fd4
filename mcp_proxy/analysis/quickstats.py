"""``mcptape stats`` in one streaming pass over a session's frame columns.

The full analysis (:mod:`mcp_proxy.analysis.core`) decodes every frame into a message, pairs,
classifies and checks, and holds the whole session meanwhile: ~20 s and ~800 MB on a
1,000,000-frame session. Per-method numbers need much less: which requests there were, how each
ended and how long it took. This module pairs requests and responses exactly as
:mod:`mcp_proxy.analysis.exchanges` does, from the columns the recorder already extracted
(direction, kind, method, id, HTTP exchange, monotonic clock), keeping in memory only the
requests still pending; a frame's JSON is parsed only when its outcome depends on the body:

- a ``tools/call`` result whose bytes mention ``isError`` (the tool-error outcome);
- a cancellation (which request it names);
- the requests whose tool/prompt/resource name ``--by-name`` groups by;
- the handshake frames that decide the era (an aborted HTTP request is "cancelled" in the
  2026-07-28 era and "aborted" before it).

What this pass does not model — MRTR rounds (``input_required`` results, retries carrying
``requestState``/``inputResponses``), JSON-RPC batches, two answers racing one request across the
reorder window — raises :class:`NeedsFullAnalysis`, and the caller runs the full analysis: the
numbers are the same either way (``tests/analysis/test_quickstats.py`` compares both on every
recorded-shape session of the finding catalogue). A byte that could hide one of those shapes
(a ``\\u`` escape) makes the frame parsed rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from mcp_proxy.analysis.model import ERA_INITIALIZE, ERA_MODERN, Outcome, parse_json_bytes
from mcp_proxy.analysis.reorder import (
    REORDER_LOOKAHEAD,
    REORDER_WINDOW_NS,
    fast_key,
    take_pending,
)
from mcp_proxy.analysis.stats import MethodStats, StatsKey
from mcp_proxy.protocol import META_PREFIX, NAME_PARAM, era_of

__all__ = [
    "SHAPED_STATS_COLUMNS",
    "STATS_COLUMNS",
    "NeedsFullAnalysis",
    "QuickStats",
    "quick_stats",
]

#: The frame columns this pass reads (names of :data:`~mcp_proxy.store.columns.FRAME_COLUMNS`).
STATS_COLUMNS: tuple[str, ...] = (
    "mono_ns",
    "direction",
    "channel",
    "kind",
    "method",
    "msg_id",
    "partial_parse",
    "raw",
    "http_exchange_id",
)

#: The same read from ``frame_rows`` as stored (:meth:`QuickStats.feed_shaped`).
SHAPED_STATS_COLUMNS: tuple[str, ...] = (
    "mono_ns",
    "shape",
    "msg_id",
    "partial_parse",
    "raw",
    "http_exchange_id",
)

_ABORTED = frozenset({"host_aborted", "client_aborted", "client_disconnected", "host_disconnected"})
_ENVELOPE_VERSION = META_PREFIX + "protocolVersion"
_INJECT = "inject"
#: Bytes that make a response's outcome depend on its body (or could be spelled in escapes).
_ESCAPE = b"\\u"
#: ``"isError": true`` as JSON may write it (a body is parsed to see whether it is top-level).
_IS_ERROR_TRUE = re.compile(rb'"isError"[ \t\n\r]*:[ \t\n\r]*true').search


class NeedsFullAnalysis(Exception):
    """The session has a shape this pass does not model; run the full analysis instead."""


class _Ex:
    """A request on its way to an outcome (what :class:`MethodStats.add` reads)."""

    __slots__ = ("cancelled", "direction", "done", "http", "key", "latency_ms", "method", "mono",
                 "outcome", "stats")  # fmt: skip

    def __init__(
        self, key: tuple[str, str], method: str, http: Any, mono: int, stats: MethodStats
    ) -> None:
        self.key = key
        self.direction = key[0]
        self.method = method
        self.http = http
        self.mono = mono
        self.stats = stats
        self.cancelled = False
        self.done = False
        self.latency_ms: float | None = None
        self.outcome: str = Outcome.PENDING


def _body(raw: Any, partial: Any) -> Any:
    """The parsed JSON of a frame, as :attr:`Msg.body` reads it (None: cut short or not JSON)."""
    if raw is None or partial:
        return None
    return parse_json_bytes(raw if type(raw) is bytes else bytes(raw))


def _part(body: Any, name: str) -> dict[str, Any] | None:
    if isinstance(body, dict):
        value = body.get(name)
        if isinstance(value, dict):
            return value
    return None


class QuickStats:
    """Feed frame rows (tuples of :data:`STATS_COLUMNS`) in order, then :meth:`finish`."""

    def __init__(
        self,
        session: Mapping[str, Any] | None = None,
        http_exchanges: Sequence[Mapping[str, Any]] = (),
        *,
        by_name: bool = False,
    ) -> None:
        s = session or {}
        self.session = s
        self.http = {int(r["id"]): r for r in http_exchanges if r.get("id") is not None}
        self.by_name = by_name
        self.stats: dict[StatsKey, MethodStats] = {}
        self.pending: dict[tuple[str, str], list[_Ex]] = {}
        self.by_http: dict[Any, _Ex] = {}
        #: responses to no pending request that a request stamped just after may still claim
        #: (the reorder window of :mod:`mcp_proxy.analysis.reorder`): (index, limit, key, row)
        self.held: list[tuple[int, int, tuple[str, str], tuple[Any, ...]]] = []
        self.i = -1
        # What decides the era (mcp_proxy.analysis.facts.session_facts, the parts that matter).
        self.init_seen = False
        self.init_id: str | None = None
        self.init_ok = False
        self.envelope_version: str | None = None

    # ------------------------------------------------------------------ feeding
    def feed(self, rows: Iterable[Sequence[Any]]) -> None:
        """The next rows of the session, in ``seq`` order."""
        request, response, held = self._request, self._response, self.held
        for row in rows:
            channel = row[2]
            if channel == _INJECT:
                # mcptape's own bytes: an injected answer answers its request (the analysis
                # pairs them, Analysis.injected); sessions with faults are few.
                raise NeedsFullAnalysis("frames injected by fault rules")
            self.i += 1
            if held:
                self._age(row[0])
            kind = row[3]
            if kind == "request":
                request(row)
            elif kind == "response" or kind == "error":
                response(row)
            elif kind == "notification":
                if row[4] == "notifications/cancelled":
                    self._cancelled(row)
            elif kind == "batch":
                raise NeedsFullAnalysis("a JSON-RPC batch")

    def feed_shaped(self, rows: Iterable[Sequence[Any]], shapes: Callable[[int], Any]) -> None:
        """:meth:`feed` for rows of :data:`SHAPED_STATS_COLUMNS`: direction, channel, kind and
        method as one stored integer that ``shapes`` decodes
        (:func:`mcp_proxy.store.stream.shaped_batches`; one column instead of four, and a
        notification other than a cancellation costs no tuple). The same numbers."""
        request, response, held = self._request, self._response, self.held
        decoded: dict[int, Any] = {}
        for mono, shape, msg_id, partial, raw, http in rows:
            found = decoded.get(shape)
            if found is None:
                found = decoded[shape] = shapes(shape)
            direction, channel, kind, method = found
            if channel == _INJECT:
                # mcptape's own bytes: an injected answer answers its request (the analysis
                # pairs them, Analysis.injected); sessions with faults are few.
                raise NeedsFullAnalysis("frames injected by fault rules")
            self.i += 1
            if held:
                self._age(mono)
            if kind == "request":
                request((mono, direction, channel, kind, method, msg_id, partial, raw, http))
            elif kind == "response" or kind == "error":
                response((mono, direction, channel, kind, method, msg_id, partial, raw, http))
            elif kind == "notification":
                if method == "notifications/cancelled":
                    self._cancelled(
                        (mono, direction, channel, kind, method, msg_id, partial, raw, http)
                    )
            elif kind == "batch":
                raise NeedsFullAnalysis("a JSON-RPC batch")

    def _request(self, row: Sequence[Any]) -> None:
        mono, direction, _ch, _kind, method, msg_id, partial, raw, http = row
        body: Any = None
        parsed = False
        if direction == "c2s":
            if raw is not None and (
                b"requestState" in raw or b"inputResponses" in raw or _ESCAPE in raw
            ):
                body, parsed = _body(raw, partial), True
                params = _part(body, "params") or {}
                if "requestState" in params or "inputResponses" in params:
                    raise NeedsFullAnalysis("an MRTR retry")
            if (method == "initialize" and not self.init_seen) or (
                # (what _handshake_request looks at, tested here: it is called per request)
                self.envelope_version is None
                and raw is not None
                and (parsed or b"protocolVersion" in raw or _ESCAPE in raw)
            ):
                self._handshake_request(method, msg_id, raw, partial, body, parsed)
        if msg_id is None or method is None:
            if msg_id is not None and any(h[2] == (direction, msg_id) for h in self.held):
                raise NeedsFullAnalysis("an answer waiting for a request without a method")
            return
        name = None
        if self.by_name:
            name_key = NAME_PARAM.get(method)
            if name_key is not None:
                if not parsed:
                    body = _body(raw, partial)
                v = (_part(body, "params") or {}).get(name_key)
                name = v if isinstance(v, str) else None
        skey = (direction, method, name)
        st = self.stats.get(skey)
        if st is None:
            st = self.stats[skey] = MethodStats(direction, method, name)
        key = (direction, msg_id)
        ex = _Ex(key, method, http, mono, st)
        plist = self.pending.get(key)
        if plist is None:
            self.pending[key] = [ex]
        else:
            plist.append(ex)
        if http is not None and direction == "c2s":
            self.by_http.setdefault(http, ex)
        if self.held:
            self._claim(key, method)

    def _handshake_request(
        self, method: Any, msg_id: Any, raw: Any, partial: Any, body: Any, parsed: bool
    ) -> None:
        if method == "initialize" and not self.init_seen:
            self.init_seen = True
            self.init_id = msg_id
        if self.envelope_version is None and raw is not None:
            if not parsed:
                if b"protocolVersion" not in raw and _ESCAPE not in raw:
                    return
                body = _body(raw, partial)
            meta = (_part(body, "params") or {}).get("_meta")
            v = meta.get(_ENVELOPE_VERSION) if isinstance(meta, dict) else None
            if isinstance(v, str):
                self.envelope_version = v

    def _response(self, row: Sequence[Any]) -> None:
        mono, direction, _ch, kind, _method, msg_id, partial, raw, http = row
        if (
            direction == "s2c"
            and msg_id is not None
            and not self.init_ok
            and self.init_id is not None
            and msg_id == self.init_id
            and kind == "response"
            and _part(_body(raw, partial), "result") is not None
        ):
            self.init_ok = True
        if msg_id is None:
            ex = self.by_http.get(http) if http is not None else None
            if ex is not None and not ex.done and direction != ex.direction:
                self._take(ex)
                self._complete(ex, row)
            return
        key = ("s2c" if direction == "c2s" else "c2s", msg_id)
        ex = take_pending(self.pending, key, http)
        if ex is None:
            # A request stamped just after may claim it (reorder window); else it is an
            # unknown or duplicate answer, which counts for no method.
            self.held.append((self.i, mono + REORDER_WINDOW_NS, key, tuple(row)))
            return
        self._complete(ex, row)

    def _take(self, ex: _Ex) -> None:
        plist = self.pending.get(ex.key)
        if plist and ex in plist:
            plist.remove(ex)
            if not plist:
                del self.pending[ex.key]

    def _complete(self, ex: _Ex, row: Sequence[Any]) -> None:
        mono, _d, _ch, kind, _m, _id, partial, raw, _h = row
        ex.done = True
        latency = ex.latency_ms = max(0, mono - ex.mono) // 1000 / 1000
        if kind == "error":
            ex.outcome = Outcome.ERROR
        else:
            outcome = Outcome.OK
            if raw is not None and (
                b"input_required" in raw
                or _ESCAPE in raw
                or (ex.method == "tools/call" and _IS_ERROR_TRUE(raw) is not None)
            ):
                result = _part(_body(raw, partial), "result") or {}
                if result.get("resultType") == "input_required":
                    raise NeedsFullAnalysis("an MRTR round")
                if ex.method == "tools/call" and result.get("isError") is True:
                    outcome = Outcome.TOOL_ERROR
            ex.outcome = outcome
            if outcome is Outcome.OK:  # MethodStats.add's common case, inline
                st = ex.stats
                st.count += 1
                st.ok += 1
                st.latencies.append(latency)
                return
        ex.stats.add(ex)  # type: ignore[arg-type]  # duck-typed: outcome and latency_ms

    def _cancelled(self, row: Sequence[Any]) -> None:
        _mono, direction, _ch, _k, _m, _id, partial, raw, http = row
        params = _part(_body(raw, partial), "params") or {}
        rid = fast_key(params.get("requestId"))
        if rid is None:
            return
        plist = self.pending.get((direction, rid))
        if plist:
            ex = next((c for c in plist if c.http == http), plist[0])
            ex.cancelled = True

    # ------------------------------------------------------------------ the reorder window
    def _age(self, mono: int) -> None:
        """Forget held answers this frame puts past the window (they stay unknown answers)."""
        i = self.i
        self.held[:] = [h for h in self.held if mono <= h[1] and i - h[0] <= REORDER_LOOKAHEAD]

    def _claim(self, key: tuple[str, str], method: str) -> None:
        """A request a held answer was waiting for: handle the answer right after it."""
        mine = [h for h in self.held if h[2] == key]
        if not mine:
            return
        if len(mine) > 1:
            raise NeedsFullAnalysis("two answers racing one request")
        self.held[:] = [h for h in self.held if h[2] != key]
        self._response(mine[0][3])

    # ------------------------------------------------------------------ the end
    def _modern(self) -> bool:
        if self.init_ok:
            return False
        if self.envelope_version is not None:
            return era_of(self.envelope_version) == ERA_MODERN
        return self.session.get("era") == ERA_MODERN

    def finish(self) -> dict[StatsKey, MethodStats]:
        """Give every request still pending its outcome; the per-method numbers."""
        s = self.session
        status = str(s.get("status") or "ended")
        live = status == "live"
        stopped = status == "ended" and (
            s.get("exit_signal") is not None or (s.get("exit_code") or 0) != 0
        )
        for plist in self.pending.values():
            for ex in plist:
                if ex.direction != "c2s":
                    ex.outcome = (
                        Outcome.CANCELLED
                        if ex.cancelled
                        else Outcome.PENDING
                        if live
                        else Outcome.NO_RESPONSE
                    )
                else:
                    ex.outcome = self._host_outcome(ex, live, status, stopped)
                ex.stats.add(ex)  # type: ignore[arg-type]
        self.pending = {}
        return self.stats

    def _host_outcome(self, ex: _Ex, live: bool, status: str, stopped: bool) -> str:
        """What :meth:`_Pairing._finalize` decides for a host request left unanswered."""
        row = self.http.get(ex.http) if ex.http is not None else None
        outcome = str(row.get("outcome") or "") if row else ""
        if ex.cancelled:
            return Outcome.CANCELLED
        if ex.method == "subscriptions/listen":
            return Outcome.PENDING if live else Outcome.CLOSED
        if row is not None and _refused(row, outcome):
            return Outcome.HTTP_ERROR
        if live and not outcome:
            return Outcome.PENDING
        if outcome in _ABORTED:
            return Outcome.CANCELLED if self._modern() else Outcome.ABORTED
        if live:
            return Outcome.PENDING
        if status == "crashed":
            return Outcome.LOST
        if self.session.get("fault_end") or stopped:
            return Outcome.ABORTED
        return Outcome.NO_RESPONSE


def _refused(row: Mapping[str, Any], outcome: str) -> bool:
    status = row.get("status")
    if status is not None:
        return int(status) >= 400
    return bool(outcome) and outcome not in _ABORTED | {"complete"}


def quick_stats(
    rows: Iterable[Sequence[Any]],
    session: Mapping[str, Any] | None = None,
    http_exchanges: Sequence[Mapping[str, Any]] = (),
    *,
    by_name: bool = False,
) -> dict[StatsKey, MethodStats]:
    """Per-method numbers of one session's rows (tuples of :data:`STATS_COLUMNS`), or
    :class:`NeedsFullAnalysis`."""
    q = QuickStats(session, http_exchanges, by_name=by_name)
    q.feed(rows)
    return q.finish()


assert ERA_INITIALIZE != ERA_MODERN  # the era test above relies on two distinct names
