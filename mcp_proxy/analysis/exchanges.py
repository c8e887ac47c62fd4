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

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mcp_proxy.analysis.ends import (
    SessionEnd,
    named,
    side,
)
from mcp_proxy.analysis.facts import (
    FRAME_COLUMNS,
    Injected,
    decode,
    header,
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
    latency_ms,
)
from mcp_proxy.analysis.reorder import TRIM, Window, fast_key, take_pending
from mcp_proxy.analysis.tasks import TASK_METHODS, TASK_NOTIFICATIONS, Tasks
from mcp_proxy.bounded import remember
from mcp_proxy.frames import id_key
from mcp_proxy.limits import (
    ANSWERED_KEPT,
    MAX_SEQS,
    REORDER_LOOKAHEAD,
    REORDER_WINDOW_NS,
    REQUEST_IDS_KEPT,
)
from mcp_proxy.protocol import LOG_LEVELS, NAME_PARAM

#: Re-exported: :mod:`mcp_proxy.diff` pairs sessions with the same functions.
__all__ = ["FRAME_COLUMNS", "Paired", "Pairing", "decode", "header", "pair", "session_facts"]

#: ``"isError": true`` as JSON may write it (the body is parsed to see whether it is top-level).
_IS_ERROR_TRUE = re.compile(rb'"isError"[ \t\n\r]*:[ \t\n\r]*true').search


def _escaped(raw: bytes) -> bool:
    """The bytes may spell a name in ``\\u`` escapes (a one-byte memchr first: ``\\u`` is
    rare, and a two-byte search cost as much as parsing a small message)."""
    return raw.find(b"\\") >= 0 and raw.find(b"\\u") >= 0


def _may_chain(raw: bytes) -> bool:
    """Bytes of a request that may make it an MRTR retry (or spell anything in escapes).

    ``bytes.find`` rather than ``in``: on CPython 3.12 ``in`` took ~2× as long per search
    (profile of ``stats``, issue 24 round 2)."""
    return raw.find(b"requestState") >= 0 or raw.find(b"inputResponses") >= 0 or _escaped(raw)


def _plain_result(method: str, raw: bytes) -> bool:
    """A response whose bytes cannot make it an MRTR round or a tool error: ``ok`` unread."""
    if raw.find(b"input_required") >= 0 or _escaped(raw):
        return False
    if method in _TASKABLE and raw.find(b"taskId") >= 0:
        return False  # (a task handle)
    return method != "tools/call" or raw.find(b"isError") < 0 or _IS_ERROR_TRUE(raw) is None


#: Requests a receiver may answer with a task handle (both eras).
_TASKABLE = frozenset({"tools/call", "sampling/createMessage", "elicitation/create"})

#: A response slower than this is reported as ``exchange.slow`` (info).
SLOW_MS = 10_000.0

_LEVEL_RANK = {name: i for i, name in enumerate(LOG_LEVELS)}


#: The other direction (a lookup, not a call: it runs for every answer and progress
#: notification): ``c2s`` for anything but ``c2s``.
_OTHER = {"c2s": "s2c"}


_fast_key = fast_key


# ---------------------------------------------------------------------------------- pairing
class Pairing:
    """The one pairing: fed messages one at a time (:meth:`feed`), then :meth:`finish`.

    It holds the requests still pending, the bounded look-ahead of the reorder window
    (:class:`~mcp_proxy.analysis.reorder.Window`) and, with ``keep`` (the full analysis, whose
    checks read every exchange), the exchanges and what the findings about answered requests
    need (ids and tokens already answered). Without ``keep`` (``stats``) an exchange is handed
    to ``on_final`` as soon as its outcome is known and then forgotten: memory holds only what
    is pending. ``on_final`` sees every exchange exactly once, in either mode.

    ``facts`` may still be filled in while messages are fed (``stats`` reads the handshake in
    the same pass, :class:`~mcp_proxy.analysis.facts.FactsBuilder`): the outcomes decided at
    :meth:`finish` read it then; ``injected`` (a list that may still grow) is read at
    :meth:`finish` too.
    """

    def __init__(
        self,
        facts: SessionFacts,
        http: Mapping[int, Mapping[str, Any]] | None = None,
        sink: FindingSink | None = None,
        injected: Sequence[Injected] = (),
        *,
        keep: bool = True,
        on_final: Callable[[Exchange], None] | None = None,
        names: bool = True,
        light: bool | None = None,
        on_message: Callable[[Msg], None] | None = None,
        on_task: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.facts = facts
        self.http = http or {}
        self.sink = sink or FindingSink()
        self.injected = injected
        self.keep = keep
        #: only what outcomes need (``stats``): no notifications but cancellations, no findings
        #: about answered requests, a plain result's bytes not parsed. Default: without ``keep``.
        self.light = not keep if light is None else light
        self.on_final = on_final
        #: handed each message once it has been handled (the checks fed in the same pass)
        self.on_message = on_message
        #: whether an exchange needs its tool/prompt/resource name (``stats --by-name``)
        self.names = names
        #: exchanges numbered so far (an exchange's ``index``)
        self.count = 0
        #: every exchange, in request order (``keep`` only)
        self.exchanges: list[Exchange] = []
        #: the last exchange of each MRTR chain, and its rounds' request seqs, by chain index
        self.chain_last: dict[int, Exchange] = {}
        self.chain_seqs: dict[int, list[int]] = {}
        self.chains: list[Chain] = []
        self.pending: dict[tuple[str, str], list[Exchange]] = {}
        #: answered requests (late progress, cancels, duplicate answers), the ANSWERED_KEPT last
        self.done: OrderedDict[tuple[str, str], Exchange] = OrderedDict()
        #: every request id seen (id reuse), the REQUEST_IDS_KEPT last: kept only where a finding
        #: reads it, an initialize-era session (``light`` False: the facts are complete by now)
        self.ever: OrderedDict[tuple[str, str], None] = OrderedDict()
        self.ids_kept = not self.light and facts.era == ERA_INITIALIZE
        self.tokens: dict[tuple[str, str], Exchange] = {}
        self.done_tokens: OrderedDict[tuple[str, str], Exchange] = OrderedDict()
        self.by_http: OrderedDict[int, Exchange] = OrderedDict()
        self.inflight_c2s: dict[int, Exchange] = {}
        self.tails_state: dict[str, Exchange] = {}
        self.tails_nostate: dict[tuple[str, str | None], Exchange] = {}
        self.orphan_errors: list[Msg] = []
        self.log_violations: list[int] = []  # the first MAX_SEQS of them
        self.log_violation_count = 0
        self.unattached_logs = 0
        self.not_increasing: set[int] = set()
        self.w = Window()
        #: the session's tasks (MCP tasks): ``on_task`` sees a creating exchange once its task ended
        self.tasks = Tasks(facts, self.sink, on_task)
        #: the handler of each kind the pairing reads (:meth:`dispatch`: one call a message)
        self.handlers: dict[str, Callable[[Msg], None]] = {
            "request": self.request,
            "response": self.response,
            "error": self.response,
            "notification": self.notification,
        }

    # ------------------------------------------------------------------ feeding
    def feed(self, m: Msg) -> None:
        """The session's next message (in ``seq`` order); handled once its look-ahead is in."""
        self.w.push(m)
        self._drain(False)

    def feed_many(self, msgs: Sequence[Msg]) -> None:
        """:meth:`feed` for several messages at once (one look at the window for all)."""
        self.w.buf.extend(msgs)
        self._drain(False)

    def _drain(self, final: bool) -> None:
        """Handle every message whose look-ahead is in (all of them when ``final``): the
        window's rule (:class:`~mcp_proxy.analysis.reorder.Window`), inline because it runs
        once per frame (a method call per message made it a third of ``stats``'s time)."""
        w = self.w
        buf = w.buf
        deferred = w.deferred
        handler = self.handlers.get
        on_message = self.on_message
        while True:
            base = w.base
            k = w.i + 1
            n = len(buf)
            if k - base >= n:
                return
            m = buf[k - base]
            top = m.mono_ns if m.mono_ns > w.top else w.top
            if (
                not final
                and base + n <= k + REORDER_LOOKAHEAD
                and buf[-1].mono_ns <= top + REORDER_WINDOW_NS
            ):
                return
            w.top = top
            w.i = k
            if k - base >= TRIM:
                del buf[: k - base]
                w.base = k
            handle = handler(m.kind)  # (what dispatch and _handle do, inline: once a message)
            if on_message is None:
                if handle is not None:
                    handle(m)
            else:
                before = w.deferrals
                if handle is not None:
                    handle(m)
                if w.deferrals == before:
                    on_message(m)
            if m.raw is not None:  # (a notification the checks have read is forgotten)
                m.release()
            if deferred:
                later = deferred.pop(k, None)
                if later:
                    for d in later:
                        self._handle(d)

    def _handle(self, m: Msg) -> None:
        """Dispatch a message and, unless it was deferred, hand it on (``on_message``)."""
        n = self.w.deferrals
        self.dispatch(m)
        if self.on_message is not None and self.w.deferrals == n:
            self.on_message(m)
        m.release()

    def _final(self, ex: Exchange) -> None:
        """An exchange's outcome is known: hand it on, and forget its messages unless kept."""
        if self.on_final is not None:
            self.on_final(ex)
        if not self.keep:
            ex.request = None
            if ex.outcome != Outcome.INPUT_REQUIRED:  # a retry reads what the round asked for
                ex.response = None

    def dispatch(self, m: Msg) -> None:
        """Hand a message to the handler of its kind (:attr:`handlers`), if the pairing reads
        such messages."""
        handle = self.handlers.get(m.kind)
        if handle is not None:
            handle(m)

    # ------------------------------------------------------------------ requests
    def request(self, m: Msg) -> None:
        if m.method is None or m.msg_id is None:
            return  # (a request without an id or a method pairs with nothing)
        # Without keep, a request whose bytes cannot be an MRTR retry is read for its name
        # only: its token, log level and envelope serve notifications and findings.
        light = self.light and m.raw is not None and not _may_chain(m.raw)
        # (the params looked up once: the steps below read them up to five times)
        p = None if light else m.params
        if m.direction == "c2s" and p is not None:
            state = p.get("requestState")
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
            self.count,
            m.direction,
            m.method,
            m.msg_id,
            m.seq,
            m.ts,
            m.mono_ns,
            http=m.http,
            request=m,
        )
        name_key = NAME_PARAM.get(m.method)
        if name_key is not None and (self.names or p is not None):
            v = (m.params if p is None else p).get(name_key)
            ex.name = v if isinstance(v, str) else None
        if p is not None:
            self._request_meta(ex, p)
        if not light or m.method.startswith("tasks/"):
            self.tasks.request(ex, m)
        plist = self.pending.get(key)
        if plist:
            # 2026-07-28 over HTTP: every POST is its own scope and carries its own answer.
            if not (m.http is not None and self.facts.modern):
                first = plist[0]
                self.sink.add(
                    "exchange.id_reused_in_flight",
                    f"{side(m.direction)} reused id {m.msg_id} for {m.method} while"
                    f" {first.method} #{first.request_seq} was still pending",
                    "Both requests are pending at once with the same id; their responses cannot"
                    " be told apart. Request ids must be unique per sender.",
                    [first.request_seq, m.seq],
                    exchange=ex.index,
                )
        elif self.ids_kept and key in self.ever:
            prev = self.done.get(key)
            self.sink.add(
                "exchange.id_reused",
                f"{side(m.direction)} reused id {m.msg_id} for {m.method}",
                "MCP forbids reusing a request id within a session, even after the earlier"
                " request completed.",
                [prev.request_seq, m.seq] if prev else [m.seq],
                exchange=ex.index,
            )
        if self.ids_kept:
            remember(self.ever, key, None, REQUEST_IDS_KEPT)
        self.pending.setdefault(key, []).append(ex)
        if ex.progress_token is not None:
            self.tokens[(m.direction, ex.progress_token)] = ex
        if m.direction == "c2s":
            self.inflight_c2s[ex.index] = ex
            if m.http is not None and m.http not in self.by_http:
                # (later logs on the POST's stream still find it: the ANSWERED_KEPT last)
                remember(self.by_http, m.http, ex, ANSWERED_KEPT)
            if p is not None:
                self._link_retry(ex, m, p)
        else:
            parent = self._owner(m)
            if parent is not None:
                ex.parent = parent.index
                parent.add("children", ex.index)
        self.count += 1
        if self.keep:
            self.exchanges.append(ex)

    def _request_meta(self, ex: Exchange, params: dict[str, Any]) -> None:
        """What a request's ``_meta`` says (its ``params``): its progress token, log level,
        envelope."""
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            meta = {}
        tok = meta.get("progressToken")
        if type(tok) is int:  # (fast_key's common case, inline: once a request)
            ex.progress_token = str(tok)
        elif isinstance(tok, (str, int, float)) and not isinstance(tok, bool):
            ex.progress_token = _fast_key(tok)
        lvl = meta.get(META + "logLevel")
        ex.log_level = lvl if isinstance(lvl, str) else None
        ex.enveloped = META + "protocolVersion" in meta and META + "clientCapabilities" in meta

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
        req_dir = _OTHER.get(m.direction, "c2s")
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
                    f"{side(m.direction)} answered id {m.msg_id}, which"
                    f" {side(req_dir).lower()} never sent",
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
        ex.latency_ms = latency_ms(ex.request_mono_ns, m.mono_ns)
        light = self.light
        handle = False  # (the answer may be a task's handle)
        # (bounded.remember, inline: it runs for every answer)
        if not light:
            done = self.done
            done[(ex.direction, ex.msg_id)] = ex
            if len(done) > ANSWERED_KEPT:
                done.popitem(last=False)
        if ex.progress_token is not None:
            tkey = (ex.direction, ex.progress_token)
            if self.tokens.get(tkey) is ex:
                del self.tokens[tkey]
            if not light:
                done = self.done_tokens
                done[tkey] = ex
                if len(done) > ANSWERED_KEPT:
                    done.popitem(last=False)
        self.inflight_c2s.pop(ex.index, None)
        if light and ex.http is not None and self.by_http.get(ex.http) is ex:
            # One POST carries one request body: no later host request joins this exchange.
            del self.by_http[ex.http]
        if light and m.kind == "response" and m.raw and _plain_result(ex.method, m.raw):
            ex.outcome = Outcome.OK  # (only what an outcome needs: the bytes said enough)
        elif m.kind == "error":
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
            handle = rt == "task" or "task" in result
            if rt == "input_required" and ex.method not in TASK_METHODS:
                ex.outcome = Outcome.INPUT_REQUIRED
                self._open_tail(ex, result)
            elif ex.method == "tools/call" and result.get("isError") is True:
                ex.outcome = Outcome.TOOL_ERROR
            else:
                ex.outcome = Outcome.OK
        if handle or ex.task_of is not None or ex.method.startswith("tasks/"):
            self.tasks.response(ex, m)
        if ex.latency_ms is not None and ex.latency_ms >= SLOW_MS:
            self.sink.add(
                "exchange.slow",
                f"{ex.method}{named(ex)} took {ex.latency_ms / 1000:.1f} s",
                f"The response came {ex.latency_ms:.0f} ms after the request.",
                [ex.request_seq, m.seq],
                exchange=ex.index,
            )
        self._final(ex)

    # ------------------------------------------------------------------ MRTR
    def _open_tail(self, ex: Exchange, result: dict[str, Any]) -> None:
        if ex.chain is None:
            chain = Chain(len(self.chains), ex.method, ex.name, [ex.index])
            self.chains.append(chain)
            self.chain_last[chain.index] = ex
            self.chain_seqs[chain.index] = [ex.request_seq]
            ex.chain = chain.index
            ex.round = 1
        if self.facts.era == ERA_INITIALIZE:
            self.sink.add(
                "mrtr.in_initialize_era",
                f"{ex.method}{named(ex)} answered input_required in a"
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

    def _link_retry(self, ex: Exchange, m: Msg, p: dict[str, Any]) -> None:
        has_state = "requestState" in p
        if (not has_state and "inputResponses" not in p) or ex.method in TASK_METHODS:
            return  # (tasks/update carries inputResponses for a task, not an MRTR round)
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
                f"{ex.method}{named(ex)} retry matches no input_required result",
                f"The request carries inputResponses/requestState, but {why}.",
                [t.response_seq or t.request_seq for t in waiting[:1]] + [m.seq],
                exchange=ex.index,
            )
            return
        chain = self.chains[tail.chain]
        ex.chain = chain.index
        chain.exchanges.append(ex.index)
        self.chain_last[chain.index] = ex
        self.chain_seqs[chain.index].append(ex.request_seq)
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
                f"{ex.method}{named(ex)} retry: inputResponses {'; '.join(bits)}",
                f"The server asked for {sorted(asked) or 'nothing'} in frame"
                f" #{tail.response_seq}; the retry answered {sorted(answered) or 'nothing'}.",
                [tail.response_seq or tail.request_seq, m.seq],
                exchange=ex.index,
            )

    # ------------------------------------------------------------------ notifications
    def notification(self, m: Msg) -> None:
        method = m.method
        if self.light and method != "notifications/cancelled" and method not in TASK_NOTIFICATIONS:
            return  # (light: only what decides an outcome, or a task's)
        if method == "notifications/progress":
            self._progress(m)
        elif method == "notifications/cancelled":
            self._cancelled(m)
        elif method == "notifications/message" and m.direction == "s2c":
            self._log(m)
        elif method in TASK_NOTIFICATIONS:
            self.tasks.notification(m)
        elif m.direction == "s2c" and m.http is not None:
            owner = self.by_http.get(m.http)
            if owner is not None:
                owner.add("other_seqs", m.seq)

    def _progress(self, m: Msg) -> None:
        p = m.params
        tok = p.get("progressToken")
        # (fast_key's common case, inline: once a progress notification)
        tkey = (
            _OTHER.get(m.direction, "c2s"),
            str(tok) if type(tok) is int else _fast_key(tok) or "null",
        )
        ex = self.tokens.get(tkey)
        if ex is not None:
            seqs = ex.progress_seqs  # (Exchange.add, inline: once a progress notification)
            if type(seqs) is list:
                seqs.append(m.seq)
            else:
                ex.progress_seqs = [m.seq]
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
                        f"progress for {ex.method}{named(ex)} went from {ex.last_progress:g}"
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
                f"progress for {done.method}{named(done)} after its response",
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
            f"{side(m.direction)} cancelled id {rid}, which it never sent",
            "notifications/cancelled must name a request previously issued in the same direction.",
            [m.seq],
        )

    def _log(self, m: Msg) -> None:
        target = self._owner(m)
        if target is not None:
            seqs = target.log_seqs  # (Exchange.add, inline: once a log message)
            if type(seqs) is list:
                seqs.append(m.seq)
            else:
                target.log_seqs = [m.seq]
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
        self.log_violation_count += 1
        if len(self.log_violations) < MAX_SEQS:
            self.log_violations.append(m.seq)

    def _opted_in_ahead(self, m: Msg, rank: int) -> bool:
        """A host request stamped just after this log (relay jitter) that asked for its level."""
        w = self.w
        i = w.i
        limit = m.mono_ns + REORDER_WINDOW_NS
        for k in range(i + 1, min(w.end, i + 1 + REORDER_LOOKAHEAD)):
            x = w.at(k)
            if x.mono_ns > limit:
                return False
            if x.kind == "request" and x.direction == "c2s":
                lvl = x.meta.get(META + "logLevel")
                if isinstance(lvl, str) and rank >= _LEVEL_RANK.get(lvl, 0):
                    return True
        return False

    # ------------------------------------------------------------------ the end
    def finish(self) -> Paired:
        """Handle what the look-ahead still holds, give every pending request its outcome."""
        self._drain(True)
        end = SessionEnd(self.facts, self.http, self.sink, self.injected)
        for plist in self.pending.values():
            for ex in plist:
                if ex.direction == "c2s":
                    end.host_request(ex)
                else:
                    end.server_request(ex)
                self._final(ex)
        self.pending = {}
        end.report()
        self.tasks.finish()
        for chain in self.chains:
            self._finish_chain(chain)
        if self.log_violations:
            n = self.log_violation_count
            self.sink.add(
                "log.without_opt_in",
                f"{n} log message(s) sent for requests that did not opt in at that level",
                "In 2026-07-28 a request opts in to logs with io.modelcontextprotocol/logLevel;"
                " these notifications/message frames were sent while no request in flight had"
                " asked for their level.",
                self.log_violations,
            )
        return Paired(self)

    def _finish_chain(self, chain: Chain) -> None:
        last = self.chain_last[chain.index]
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
                    self.chain_seqs[chain.index] + [last.response_seq or last.request_seq],
                    exchange=last.index,
                )


class Paired:
    """What :meth:`Pairing.finish` returns: exchanges, chains and the leftovers checks need."""

    __slots__ = ("chains", "count", "exchanges", "orphan_errors", "unattached_logs")

    def __init__(self, p: Pairing) -> None:
        self.exchanges = p.exchanges
        self.count = p.count
        self.chains = p.chains
        self.orphan_errors = p.orphan_errors
        self.unattached_logs = p.unattached_logs


def pair(
    msgs: list[Msg],
    facts: SessionFacts,
    http: Mapping[int, Mapping[str, Any]] | None = None,
    sink: FindingSink | None = None,
    injected: Sequence[Injected] = (),
) -> Paired:
    """Pair requests and responses, attach notifications, chain MRTR rounds: these messages
    fed to one :class:`Pairing` that keeps every exchange.

    A message's parsed body is released once it has been handled (the checks that need it
    later parse it again from its bytes): holding every parsed body until the end made the
    analysis of a million frames grow by over a kilobyte per frame. ``injected`` are the frames
    mcptape put on the wire (``Decoder.injected``): an answer injected in the server's place
    answers its request.
    """
    p = Pairing(facts, http, sink, injected)
    for i in range(0, len(msgs), _SLICE):
        p.feed_many(msgs[i : i + _SLICE])
    return p.finish()


#: Messages :func:`pair` hands the pairing at once (the window's buffer stays this much over
#: its look-ahead).
_SLICE = 1024
