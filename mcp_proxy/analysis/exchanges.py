"""Frames → messages → exchanges: pairing, latency, notifications, MRTR chains.

The proxy sees both directions, so pairing follows JSON-RPC exactly: a response answers the
request with the same id sent the *other* way (host and server number their requests in separate
spaces, and ``1`` and ``"1"`` are different ids). On Streamable HTTP the response to a POSTed
request normally rides that POST's own response (JSON body or SSE stream), which pins the pair
even when two clients of a 2026-07-28 session both use id 1.

Notifications are attached to the request they belong to: progress by its token, cancellation
by ``requestId``, and logs (and anything else) that rode the request's SSE stream. On stdio,
where nothing ties a log to a request, a log is attached only when exactly one host request was
in flight at that moment. MRTR rounds (``resultType: "input_required"`` then a retry with
``requestState``/``inputResponses``) are chained into one conversation.

Faults found on the way (unknown or duplicate responses, ids reused, cancellations and progress
for unknown requests, requests never answered) become findings here, because this is the one
place that knows them. Pure: rows in, objects out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mcp_proxy.analysis.facts import (
    FRAME_COLUMNS,
    Injected,
    decode,
    header,
    injected_answers,
    session_facts,
)
from mcp_proxy.analysis.model import (
    ERA_INITIALIZE,
    META,
    Chain,
    Exchange,
    FindingSink,
    Msg,
    Outcome,
    SessionFacts,
)
from mcp_proxy.analysis.reorder import (
    REORDER_LOOKAHEAD,
    REORDER_WINDOW_NS,
    Window,
    fast_key,
    take_pending,
)
from mcp_proxy.frames import id_key
from mcp_proxy.protocol import LOG_LEVELS, NAME_PARAM

#: Re-exported: :mod:`mcp_proxy.diff` pairs sessions with the same functions.
__all__ = ["FRAME_COLUMNS", "Pairing", "decode", "header", "pair", "session_facts"]

#: A response slower than this is reported as ``exchange.slow`` (info).
SLOW_MS = 10_000.0

_LEVEL_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}

_ABORTED = frozenset({"host_aborted", "client_aborted", "client_disconnected", "host_disconnected"})


def _other(direction: str) -> str:
    return "s2c" if direction == "c2s" else "c2s"


_fast_key = fast_key


# ---------------------------------------------------------------------------------- pairing
class _Pairing:
    """One pass over the messages; state lives here so each handler stays small."""

    def __init__(
        self,
        facts: SessionFacts,
        http: Mapping[int, Mapping[str, Any]],
        sink: FindingSink,
        injected: Sequence[Injected] = (),
    ) -> None:
        self.facts = facts
        self.http = http
        self.sink = sink
        #: Answers mcptape injected in the server's place (fault rules), by request id.
        self.injected_answers = injected_answers(injected)
        self.exchanges: list[Exchange] = []
        self.chains: list[Chain] = []
        self.pending: dict[tuple[str, str], list[Exchange]] = {}
        self.done: dict[tuple[str, str], Exchange] = {}
        self.ever: set[tuple[str, str]] = set()
        self.tokens: dict[tuple[str, str], Exchange] = {}
        self.done_tokens: dict[tuple[str, str], Exchange] = {}
        self.by_http: dict[int, Exchange] = {}
        self.inflight_c2s: dict[int, Exchange] = {}
        self.tails_state: dict[str, Exchange] = {}
        self.tails_nostate: dict[tuple[str, str | None], Exchange] = {}
        self.orphan_errors: list[Msg] = []
        self.log_violations: list[int] = []
        self.unattached_logs = 0
        self.not_increasing: set[int] = set()
        self.w = Window()

    def dispatch(self, m: Msg) -> None:
        kind = m.kind
        if kind == "request":
            if m.msg_id is not None and m.method is not None:
                self.request(m)
        elif kind == "response" or kind == "error":
            self.response(m)
        elif kind == "notification":
            self.notification(m)

    # ------------------------------------------------------------------ requests
    def request(self, m: Msg) -> None:
        assert m.method is not None and m.msg_id is not None
        if m.direction == "c2s" and self.w.msgs:
            state = m.params.get("requestState")
            if (
                isinstance(state, str)
                and state not in self.tails_state
                and self.w.defer_until(
                    m,
                    lambda x: (
                        x.kind == "response"
                        and (x.result or {}).get("requestState") == state
                        and (x.result or {}).get("resultType") == "input_required"
                    ),
                )
            ):
                return
        key = (m.direction, m.msg_id)
        ex = Exchange(
            len(self.exchanges),
            m.direction,
            m.method,
            m.msg_id,
            m.seq,
            m.ts,
            m.mono_ns,
            http=m.http,
            request=m,
        )
        params = m.params
        name_key = NAME_PARAM.get(m.method)
        if name_key is not None:
            v = params.get(name_key)
            ex.name = v if isinstance(v, str) else None
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            meta = {}
        tok = meta.get("progressToken")
        if isinstance(tok, (str, int, float)) and not isinstance(tok, bool):
            ex.progress_token = _fast_key(tok)
        lvl = meta.get(META + "logLevel")
        ex.log_level = lvl if isinstance(lvl, str) else None
        ex.enveloped = META + "protocolVersion" in meta and META + "clientCapabilities" in meta
        plist = self.pending.get(key)
        if plist:
            # 2026-07-28 over HTTP: every POST is its own scope and carries its own answer.
            if not (m.http is not None and self.facts.modern):
                first = plist[0]
                self.sink.add(
                    "exchange.id_reused_in_flight",
                    f"{_side(m.direction)} reused id {m.msg_id} for {m.method} while"
                    f" {first.method} #{first.request_seq} was still pending",
                    "Both requests are pending at once with the same id; their responses cannot"
                    " be told apart. Request ids must be unique per sender.",
                    [first.request_seq, m.seq],
                    exchange=ex.index,
                )
        elif key in self.ever and self.facts.era == ERA_INITIALIZE:
            prev = self.done.get(key)
            self.sink.add(
                "exchange.id_reused",
                f"{_side(m.direction)} reused id {m.msg_id} for {m.method}",
                "MCP forbids reusing a request id within a session, even after the earlier"
                " request completed.",
                [prev.request_seq, m.seq] if prev else [m.seq],
                exchange=ex.index,
            )
        self.ever.add(key)
        self.pending.setdefault(key, []).append(ex)
        if ex.progress_token is not None:
            self.tokens[(m.direction, ex.progress_token)] = ex
        if m.direction == "c2s":
            self.inflight_c2s[ex.index] = ex
            if m.http is not None:
                self.by_http.setdefault(m.http, ex)
            self._link_retry(ex, m)
        else:
            parent = self._owner(m)
            if parent is not None:
                ex.parent = parent.index
                parent.add("children", ex.index)
        self.exchanges.append(ex)

    def _owner(self, m: Msg) -> Exchange | None:
        """The host request a server message belongs to: its SSE stream, or the only one open."""
        if m.http is not None:
            return self.by_http.get(m.http)
        if len(self.inflight_c2s) == 1:
            return next(iter(self.inflight_c2s.values()))
        return None

    # ------------------------------------------------------------------ responses
    def response(self, m: Msg) -> None:
        if m.msg_id is None:
            ex = self.by_http.get(m.http) if m.http is not None else None
            if ex is not None and ex.response is None and m.direction != ex.direction:
                self._take(ex)
                self._complete(ex, m)
            else:
                self.orphan_errors.append(m)
            return
        req_dir = _other(m.direction)
        key = (req_dir, m.msg_id)
        ex = take_pending(self.pending, key, m.http)
        if ex is None and self.w.defer_to_request(m, self.w.ids, m.msg_id):
            return
        if ex is None:
            prev = self.done.get(key)
            if prev is not None:
                self.sink.add(
                    "exchange.duplicate_response",
                    f"{prev.method} id {m.msg_id} answered twice",
                    f"The first response was frame #{prev.response_seq}; JSON-RPC allows one"
                    " response per request.",
                    [prev.request_seq, prev.response_seq or m.seq, m.seq],
                    exchange=prev.index,
                )
            else:
                self.sink.add(
                    "exchange.unknown_response",
                    f"{_side(m.direction)} answered id {m.msg_id}, which"
                    f" {_side(req_dir).lower()} never sent",
                    "No request with this id was sent in the other direction in this session.",
                    [m.seq],
                )
            if m.kind == "error":
                self.orphan_errors.append(m)
            return
        self._complete(ex, m)

    def _take(self, ex: Exchange) -> None:
        key = (ex.direction, ex.msg_id)
        plist = self.pending.get(key)
        if plist and ex in plist:
            plist.remove(ex)
            if not plist:
                del self.pending[key]

    def _complete(self, ex: Exchange, m: Msg) -> None:
        ex.response = m
        ex.response_seq = m.seq
        ex.response_ts = m.ts
        # Never negative: a response stamped before its request (see REORDER_WINDOW_NS) took ~0.
        ex.latency_ms = max(0, m.mono_ns - ex.request_mono_ns) // 1000 / 1000
        self.done[(ex.direction, ex.msg_id)] = ex
        if ex.progress_token is not None:
            tkey = (ex.direction, ex.progress_token)
            if self.tokens.get(tkey) is ex:
                del self.tokens[tkey]
            self.done_tokens[tkey] = ex
        self.inflight_c2s.pop(ex.index, None)
        if m.kind == "error":
            ex.outcome = Outcome.ERROR
            ex.error_code = m.error_code
            msg = m.error.get("message")
            ex.error_message = msg if isinstance(msg, str) else None
        else:
            result = m.result
            if result is None:
                result = {}
            else:
                ex.untyped_result = "resultType" not in result
            rt = result.get("resultType")
            ex.result_type = rt if isinstance(rt, str) else None
            if rt == "input_required":
                ex.outcome = Outcome.INPUT_REQUIRED
                self._open_tail(ex, result)
            elif ex.method == "tools/call" and result.get("isError") is True:
                ex.outcome = Outcome.TOOL_ERROR
            else:
                ex.outcome = Outcome.OK
        if ex.latency_ms is not None and ex.latency_ms >= SLOW_MS:
            self.sink.add(
                "exchange.slow",
                f"{ex.method}{_named(ex)} took {ex.latency_ms / 1000:.1f} s",
                f"The response came {ex.latency_ms:.0f} ms after the request.",
                [ex.request_seq, m.seq],
                exchange=ex.index,
            )

    # ------------------------------------------------------------------ MRTR
    def _open_tail(self, ex: Exchange, result: dict[str, Any]) -> None:
        if ex.chain is None:
            chain = Chain(len(self.chains), ex.method, ex.name, [ex.index])
            self.chains.append(chain)
            ex.chain = chain.index
            ex.round = 1
        if self.facts.era == ERA_INITIALIZE:
            self.sink.add(
                "mrtr.in_initialize_era",
                f"{ex.method}{_named(ex)} answered input_required in a"
                f" {self.facts.version or 'initialize-era'} session",
                "input_required results exist only in 2026-07-28; this client negotiated an"
                " earlier revision and will read the result as complete.",
                [ex.request_seq, ex.response_seq or ex.request_seq],
                exchange=ex.index,
            )
        state = result.get("requestState")
        if isinstance(state, str):
            self.tails_state[state] = ex
        else:
            self.tails_nostate[(ex.method, ex.name)] = ex

    def _link_retry(self, ex: Exchange, m: Msg) -> None:
        p = m.params
        has_state = "requestState" in p
        if not has_state and "inputResponses" not in p:
            return
        state = p.get("requestState")
        tail: Exchange | None = None
        if isinstance(state, str) and state in self.tails_state:
            tail = self.tails_state[state]
            if tail.method == ex.method:
                del self.tails_state[state]
            else:
                tail = None
        elif not has_state:
            tail = self.tails_nostate.pop((ex.method, ex.name), None)
        if tail is None or tail.chain is None:
            waiting = [
                t for t in self.tails_state.values() if t.method == ex.method and t.name == ex.name
            ]
            why = (
                "its requestState differs from the one the server sent"
                if waiting and has_state
                else "it carries no requestState although the server sent one"
                if waiting
                else "no earlier input_required result is waiting for it"
            )
            self.sink.add(
                "mrtr.unmatched_retry",
                f"{ex.method}{_named(ex)} retry matches no input_required result",
                f"The request carries inputResponses/requestState, but {why}.",
                [t.response_seq or t.request_seq for t in waiting[:1]] + [m.seq],
                exchange=ex.index,
            )
            return
        chain = self.chains[tail.chain]
        ex.chain = chain.index
        chain.exchanges.append(ex.index)
        ex.round = len(chain.exchanges)
        asked_raw = (tail.response.result or {}).get("inputRequests") if tail.response else None
        asked = set(asked_raw) if isinstance(asked_raw, dict) else set()
        answered_raw = p.get("inputResponses")
        answered = set(answered_raw) if isinstance(answered_raw, dict) else set()
        if asked != answered:
            missing = sorted(asked - answered)
            extra = sorted(answered - asked)
            bits = []
            if missing:
                bits.append("missing " + ", ".join(missing))
            if extra:
                bits.append("unasked " + ", ".join(extra))
            self.sink.add(
                "mrtr.responses_mismatch",
                f"{ex.method}{_named(ex)} retry: inputResponses {'; '.join(bits)}",
                f"The server asked for {sorted(asked) or 'nothing'} in frame"
                f" #{tail.response_seq}; the retry answered {sorted(answered) or 'nothing'}.",
                [tail.response_seq or tail.request_seq, m.seq],
                exchange=ex.index,
            )

    # ------------------------------------------------------------------ notifications
    def notification(self, m: Msg) -> None:
        method = m.method
        if method == "notifications/progress":
            self._progress(m)
        elif method == "notifications/cancelled":
            self._cancelled(m)
        elif method == "notifications/message" and m.direction == "s2c":
            self._log(m)
        elif m.direction == "s2c" and m.http is not None:
            owner = self.by_http.get(m.http)
            if owner is not None:
                owner.add("other_seqs", m.seq)

    def _progress(self, m: Msg) -> None:
        p = m.params
        tok = p.get("progressToken")
        tkey = (_other(m.direction), _fast_key(tok) or "null")
        ex = self.tokens.get(tkey)
        if ex is not None:
            ex.add("progress_seqs", m.seq)
            value = p.get("progress")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if (
                    ex.last_progress is not None
                    and value <= ex.last_progress
                    and ex.index not in self.not_increasing
                ):
                    self.not_increasing.add(ex.index)
                    self.sink.add(
                        "notification.progress_not_increasing",
                        f"progress for {ex.method}{_named(ex)} went from {ex.last_progress:g}"
                        f" to {value:g}",
                        "The progress value must increase with each notification.",
                        [ex.progress_seqs[-2] if len(ex.progress_seqs) > 1 else m.seq, m.seq],
                        exchange=ex.index,
                    )
                ex.last_progress = float(value)
            return
        if self.w.defer_to_request(m, self.w.tokens, tkey[1]):
            return
        done = self.done_tokens.get(tkey)
        if done is not None:
            done.add("progress_seqs", m.seq)
            self.sink.add(
                "notification.progress_after_response",
                f"progress for {done.method}{_named(done)} after its response",
                f"The request was answered in frame #{done.response_seq}; progress must stop"
                " when the operation completes.",
                [done.response_seq or done.request_seq, m.seq],
                exchange=done.index,
            )
            return
        self.sink.add(
            "notification.progress_unknown",
            f"progress for token {id_key(tok)} that no request offered",
            "No request from the other side carried this progressToken in its _meta.",
            [m.seq],
        )

    def _cancelled(self, m: Msg) -> None:
        p = m.params
        rid = _fast_key(p.get("requestId"))
        if rid is None:
            return  # a 2026-07-28 or malformed cancel without requestId: nothing to pair
        key = (m.direction, rid)
        plist = self.pending.get(key)
        ex: Exchange | None = None
        if plist:
            ex = next((c for c in plist if c.http == m.http), plist[0])
        if ex is not None:
            if ex.cancel_seq is None:
                ex.cancel_seq = m.seq
                reason = p.get("reason")
                ex.cancel_reason = reason if isinstance(reason, str) else None
            if ex.method == "initialize":
                self.sink.add(
                    "notification.cancel_initialize",
                    "the client cancelled initialize",
                    "The initialize request must not be cancelled by clients.",
                    [ex.request_seq, m.seq],
                    exchange=ex.index,
                )
            return
        prev = self.done.get(key)
        if prev is not None:
            # The cancel crossed the response on the wire: allowed, just note it.
            prev.add("other_seqs", m.seq)
            return
        self.sink.add(
            "notification.cancel_unknown",
            f"{_side(m.direction)} cancelled id {rid}, which it never sent",
            "notifications/cancelled must name a request previously issued in the same direction.",
            [m.seq],
        )

    def _log(self, m: Msg) -> None:
        target = self._owner(m)
        if target is not None:
            target.add("log_seqs", m.seq)
        else:
            self.unattached_logs += 1
        if not self.facts.modern:
            return
        if m.http is not None:
            candidates = [target] if target is not None else []
        else:
            candidates = list(self.inflight_c2s.values())
        if not candidates:
            return
        level = m.params.get("level")
        rank = _LEVEL_RANK.get(level, 0) if isinstance(level, str) else 0
        for c in candidates:
            if c.log_level is not None and rank >= _LEVEL_RANK.get(c.log_level, 0):
                return
        if m.http is None and self._opted_in_ahead(m, rank):
            return
        self.log_violations.append(m.seq)

    def _opted_in_ahead(self, m: Msg, rank: int) -> bool:
        """A host request stamped just after this log (relay jitter) that asked for its level."""
        msgs, i = self.w.msgs, self.w.i
        limit = m.mono_ns + REORDER_WINDOW_NS
        for k in range(i + 1, min(len(msgs), i + 1 + REORDER_LOOKAHEAD)):
            x = msgs[k]
            if x.mono_ns > limit:
                return False
            if x.kind == "request" and x.direction == "c2s":
                lvl = x.meta.get(META + "logLevel")
                if isinstance(lvl, str) and rank >= _LEVEL_RANK.get(lvl, 0):
                    return True
        return False

    # ------------------------------------------------------------------ the end
    def finish(self) -> None:
        ends = _Ends()
        for plist in self.pending.values():
            for ex in plist:
                if ex.direction == "c2s":
                    self._finalize(ex, ends)
                else:
                    self._finalize_server_request(ex)
        self._report_ends(ends)
        for chain in self.chains:
            self._finish_chain(chain)
        if self.log_violations:
            n = len(self.log_violations)
            self.sink.add(
                "log.without_opt_in",
                f"{n} log message(s) sent for requests that did not opt in at that level",
                "In 2026-07-28 a request opts in to logs with io.modelcontextprotocol/logLevel;"
                " these notifications/message frames were sent while no request in flight had"
                " asked for their level.",
                self.log_violations,
            )

    def _report_ends(self, ends: _Ends) -> None:
        """One finding for the host requests a crash lost, one for those the host gave up on."""
        facts = self.facts
        if ends.lost:
            self.sink.add(
                "transport.exit_with_pending",
                f"server {_exit_text(facts)} with {len(ends.lost)} request(s) pending:"
                f" {_names(ends.lost)}",
                "These requests were waiting for an answer when the server process ended;"
                " their answers are lost.",
                [e.request_seq for e in ends.lost],
            )
        if ends.faulted:
            self.sink.add(
                "inject.ended_with_pending",
                f"a fault rule ended the session ({facts.fault_end}) with"
                f" {len(ends.faulted)} of the host's request(s) pending: {_names(ends.faulted)}",
                "mcptape cut the connection on purpose (docs/faults.md) while these requests"
                " waited for their answers; neither the host nor the server ended the session.",
                [e.request_seq for e in ends.faulted],
            )
        if ends.abandoned:
            self.sink.add(
                "transport.host_ended_with_pending",
                f"the host ended the session ({_stop_text(facts)}) with"
                f" {len(ends.abandoned)} of its request(s) pending: {_names(ends.abandoned)}",
                "The host stopped the server through mcptape while waiting for these answers;"
                " the server did not crash.",
                [e.request_seq for e in ends.abandoned],
            )

    def _finish_chain(self, chain: Chain) -> None:
        last = self.exchanges[chain.exchanges[-1]]
        if last.outcome == Outcome.OK:
            chain.outcome = "complete"
        elif last.outcome in (Outcome.TOOL_ERROR, Outcome.ERROR):
            chain.outcome = str(last.outcome)
        elif last.outcome == Outcome.PENDING or (
            self.facts.live and last.outcome == Outcome.INPUT_REQUIRED
        ):
            chain.outcome = "pending"
        else:
            chain.outcome = "incomplete"
            if last.outcome == Outcome.INPUT_REQUIRED:
                self.sink.add(
                    "mrtr.chain_incomplete",
                    f"{chain.method}{' ' + chain.name if chain.name else ''} stopped after"
                    f" {len(chain.exchanges)} round(s) waiting for input",
                    "The last result asked for input (resultType input_required) and the"
                    " client never retried.",
                    [self.exchanges[i].request_seq for i in chain.exchanges]
                    + [last.response_seq or last.request_seq],
                    exchange=last.index,
                )

    def _finalize_server_request(self, ex: Exchange) -> None:
        """A server→client request nobody answered: at most a no_response on that request.

        Whatever ended the session (a crash, the host's signal, a closed HTTP stream), the
        unanswered side is the host's: no answer was lost in transit and nothing was
        disconnected that the server was waiting on in vain.
        """
        if ex.cancel_seq is not None:
            ex.outcome = Outcome.CANCELLED
            self._cancel_finding(ex, f"cancelled by frame #{ex.cancel_seq}", [ex.cancel_seq])
        elif self.facts.live:
            ex.outcome = Outcome.PENDING
        else:
            ex.outcome = Outcome.NO_RESPONSE
            self._no_response(ex)

    def _finalize(self, ex: Exchange, ends: _Ends) -> None:
        """A host request without an answer at the end: what became of it, and why."""
        facts = self.facts
        row = self.http.get(ex.http) if ex.http is not None else None
        outcome = str(row.get("outcome") or "") if row else ""
        answer = self._injected_answer(ex)
        if ex.cancel_seq is not None:
            ex.outcome = Outcome.CANCELLED
            self._cancel_finding(ex, f"cancelled by frame #{ex.cancel_seq}", [ex.cancel_seq])
        elif answer is not None:
            _answered_by_fault(ex, answer)
        elif ex.method == "subscriptions/listen":
            ex.outcome = Outcome.PENDING if facts.live else Outcome.CLOSED
        elif row is not None and _http_refused(row, outcome):
            # The HTTP layer refused or failed the request; the HTTP finding says how.
            ex.outcome = Outcome.HTTP_ERROR
            status = row.get("status")
            ex.error_message = f"HTTP {status}" if status else f"no HTTP response ({outcome})"
        elif facts.live and not outcome:
            ex.outcome = Outcome.PENDING
        elif outcome in _ABORTED:
            self._host_aborted(ex)
        elif facts.live:
            ex.outcome = Outcome.PENDING
        elif _crashed(facts):
            ex.outcome = Outcome.LOST
            ends.lost.append(ex)
        elif facts.fault_end is not None:
            ex.outcome = Outcome.ABORTED
            ends.faulted.append(ex)
        elif _host_stopped(facts):
            ex.outcome = Outcome.ABORTED
            ends.abandoned.append(ex)
        elif row is not None and "text/event-stream" in (
            header(row.get("response_headers"), "content-type") or ""
        ):
            ex.outcome = Outcome.NO_RESPONSE
            self.sink.add(
                "transport.sse_ended_early",
                f"SSE stream of {ex.method}{_named(ex)} ended without its response",
                f"HTTP exchange {ex.http} answered with an event stream that closed"
                f" ({outcome or 'no outcome recorded'}) before the JSON-RPC response, and the"
                " response never arrived elsewhere.",
                [ex.request_seq],
                exchange=ex.index,
            )
        else:
            ex.outcome = Outcome.NO_RESPONSE
            self._no_response(ex)

    def _injected_answer(self, ex: Exchange) -> Injected | None:
        """The answer a fault rule gave this host request in the server's place, if any."""
        for answer in self.injected_answers.get(ex.msg_id, ()):
            if answer.seq > ex.request_seq:
                return answer
        return None

    def _host_aborted(self, ex: Exchange) -> None:
        """The host closed the HTTP connection of its own pending request."""
        if self.facts.modern:
            ex.outcome = Outcome.CANCELLED
            self._cancel_finding(ex, "the host closed the request's HTTP connection", [])
            return
        ex.outcome = Outcome.ABORTED
        self.sink.add(
            "transport.host_disconnected",
            f"host disconnected while {ex.method}{_named(ex)} was pending",
            "The host closed the HTTP connection before the answer arrived and did not"
            " cancel the request.",
            [ex.request_seq],
            exchange=ex.index,
        )

    def _no_response(self, ex: Exchange) -> None:
        self.sink.add(
            "exchange.no_response",
            f"{ex.method}{_named(ex)} (id {ex.msg_id}) was never answered",
            f"{_side(ex.direction)} sent it in frame #{ex.request_seq}; the session ended"
            " without a response or a cancellation.",
            [ex.request_seq],
            exchange=ex.index,
        )

    def _cancel_finding(self, ex: Exchange, how: str, extra: list[int]) -> None:
        reason = f" ({ex.cancel_reason})" if ex.cancel_reason else ""
        self.sink.add(
            "exchange.cancelled",
            f"{ex.method}{_named(ex)} cancelled{reason}",
            f"The request was {how}; no response followed, as the spec asks.",
            [ex.request_seq, *extra],
            exchange=ex.index,
        )


def _answered_by_fault(ex: Exchange, answer: Injected) -> None:
    """The host got an answer mcptape injected (``error``, ``tool-error``): answered."""
    ex.response_seq = answer.seq
    ex.response_ts = answer.ts
    ex.latency_ms = max(0.0, (answer.ts - ex.request_ts) * 1000.0)
    if answer.kind == "error":
        ex.outcome = Outcome.ERROR
        ex.error_code = answer.error_code
    else:
        ex.outcome = Outcome.TOOL_ERROR if answer.tool_error else Outcome.OK


def _side(direction: str) -> str:
    return "Host" if direction == "c2s" else "Server"


def _named(ex: Exchange) -> str:
    return f" {ex.name}" if ex.name else ""


def _crashed(facts: SessionFacts) -> bool:
    """The server died on its own: the relay says so (``crashed``) for a non-zero exit or a
    signal it did not forward. A signal the host sent through the relay ends the session
    normally (``ended`` with ``exit_signal``): that is how many hosts close a stdio server."""
    return facts.status == "crashed"


def _host_stopped(facts: SessionFacts) -> bool:
    """The host ended the session by a signal (forwarded by the relay), not by closing stdin."""
    return facts.status == "ended" and (
        facts.exit_signal is not None or (facts.exit_code or 0) != 0
    )


def _http_refused(row: Mapping[str, Any], outcome: str) -> bool:
    status = row.get("status")
    if status is not None:
        return int(status) >= 400
    return bool(outcome) and outcome not in _ABORTED | {"complete"}


def _exit_text(facts: SessionFacts) -> str:
    if facts.exit_signal is not None:
        return f"was killed by signal {facts.exit_signal}"
    if facts.exit_code is not None:
        return f"exited with status {facts.exit_code}"
    return "went away"


def _stop_text(facts: SessionFacts) -> str:
    if facts.exit_signal is not None:
        return f"signal {facts.exit_signal}"
    return f"the server exited with status {facts.exit_code}"


def _names(exchanges: list[Exchange]) -> str:
    names = ", ".join(f"{e.method}{_named(e)}" for e in exchanges[:5])
    return names + (f" and {len(exchanges) - 5} more" if len(exchanges) > 5 else "")


class _Ends:
    """Host requests that a session's end left unanswered, by why."""

    __slots__ = ("abandoned", "faulted", "lost")

    def __init__(self) -> None:
        self.lost: list[Exchange] = []  # the server crashed
        self.abandoned: list[Exchange] = []  # the host stopped the server
        self.faulted: list[Exchange] = []  # a fault rule cut the connection


class Pairing:
    """What :func:`pair` returns: exchanges, chains and the leftovers checks need."""

    __slots__ = ("chains", "exchanges", "orphan_errors", "unattached_logs")

    def __init__(self, p: _Pairing) -> None:
        self.exchanges = p.exchanges
        self.chains = p.chains
        self.orphan_errors = p.orphan_errors
        self.unattached_logs = p.unattached_logs


def pair(
    msgs: list[Msg],
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]] | None = None,
    sink: FindingSink | None = None,
    injected: Sequence[Injected] = (),
) -> Pairing:
    """Pair requests and responses, attach notifications, chain MRTR rounds.

    A message's parsed body is released once it has been handled (the checks that need it
    later parse it again from its bytes): holding every parsed body until the end made the
    analysis of a million frames grow by over a kilobyte per frame. ``injected`` are the frames
    mcptape put on the wire (``Decoder.injected``): an answer injected in the server's place
    answers its request.
    """
    p = _Pairing(facts, http or {}, sink or FindingSink(), injected)
    w = p.w
    w.msgs = msgs
    deferred = w.deferred
    for i, m in enumerate(msgs):
        w.i = i
        p.dispatch(m)
        m.release()
        if deferred:
            later = deferred.pop(i, None)
            if later:
                for d in later:
                    p.dispatch(d)
                    d.release()
    p.finish()
    return Pairing(p)
