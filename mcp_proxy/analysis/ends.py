"""What became of the requests a session's end left pending, and the words findings use.

Helpers of :class:`mcp_proxy.analysis.exchanges.Pairing`: how the session ended (a crash, the
host's signal, a fault rule), what an HTTP exchange's end says about its request, and how a
finding names a side or a request. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcp_proxy.analysis.facts import Injected, header, injected_answers
from mcp_proxy.analysis.model import Exchange, FindingSink, Outcome, SessionFacts

__all__ = ["SessionEnd", "named", "side"]

#: HTTP exchange outcomes that say the host went away from its own request.
_ABORTED = frozenset({"host_aborted", "client_aborted", "client_disconnected", "host_disconnected"})


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


def side(direction: str) -> str:
    return "Host" if direction == "c2s" else "Server"


def named(ex: Exchange) -> str:
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
    text = ", ".join(f"{e.method}{named(e)}" for e in exchanges[:5])
    return text + (f" and {len(exchanges) - 5} more" if len(exchanges) > 5 else "")


class SessionEnd:
    """What the session's end made of the requests still pending: each one's outcome, and the
    findings that say why (one finding for the host requests a crash lost, one for those the
    host gave up on, one for those a fault rule cut)."""

    __slots__ = ("abandoned", "facts", "faulted", "http", "injected_answers", "lost", "sink")

    def __init__(
        self,
        facts: SessionFacts,
        http: Mapping[int, Mapping[str, Any]],
        sink: FindingSink,
        injected: Iterable[Injected],
    ) -> None:
        self.facts = facts
        self.http = http
        self.sink = sink
        #: Answers mcptape injected in the server's place (fault rules), by request id.
        self.injected_answers = injected_answers(injected)
        self.lost: list[Exchange] = []  # the server crashed
        self.abandoned: list[Exchange] = []  # the host stopped the server
        self.faulted: list[Exchange] = []  # a fault rule cut the connection

    def server_request(self, ex: Exchange) -> None:
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

    def host_request(self, ex: Exchange) -> None:
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
            self.lost.append(ex)
        elif facts.fault_end is not None:
            ex.outcome = Outcome.ABORTED
            self.faulted.append(ex)
        elif _host_stopped(facts):
            ex.outcome = Outcome.ABORTED
            self.abandoned.append(ex)
        elif row is not None and "text/event-stream" in (
            header(row.get("response_headers"), "content-type") or ""
        ):
            ex.outcome = Outcome.NO_RESPONSE
            self.sink.add(
                "transport.sse_ended_early",
                f"SSE stream of {ex.method}{named(ex)} ended without its response",
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
            f"host disconnected while {ex.method}{named(ex)} was pending",
            "The host closed the HTTP connection before the answer arrived and did not"
            " cancel the request.",
            [ex.request_seq],
            exchange=ex.index,
        )

    def _no_response(self, ex: Exchange) -> None:
        self.sink.add(
            "exchange.no_response",
            f"{ex.method}{named(ex)} (id {ex.msg_id}) was never answered",
            f"{side(ex.direction)} sent it in frame #{ex.request_seq}; the session ended"
            " without a response or a cancellation.",
            [ex.request_seq],
            exchange=ex.index,
        )

    def _cancel_finding(self, ex: Exchange, how: str, extra: list[int]) -> None:
        reason = f" ({ex.cancel_reason})" if ex.cancel_reason else ""
        self.sink.add(
            "exchange.cancelled",
            f"{ex.method}{named(ex)} cancelled{reason}",
            f"The request was {how}; no response followed, as the spec asks.",
            [ex.request_seq, *extra],
            exchange=ex.index,
        )

    def report(self) -> None:
        """One finding for the host requests a crash lost, one for those the host gave up on."""
        facts = self.facts
        if self.lost:
            self.sink.add(
                "transport.exit_with_pending",
                f"server {_exit_text(facts)} with {len(self.lost)} request(s) pending:"
                f" {_names(self.lost)}",
                "These requests were waiting for an answer when the server process ended;"
                " their answers are lost.",
                [e.request_seq for e in self.lost],
            )
        if self.faulted:
            self.sink.add(
                "inject.ended_with_pending",
                f"a fault rule ended the session ({facts.fault_end}) with"
                f" {len(self.faulted)} of the host's request(s) pending: {_names(self.faulted)}",
                "mcptape cut the connection on purpose (docs/faults.md) while these requests"
                " waited for their answers; neither the host nor the server ended the session.",
                [e.request_seq for e in self.faulted],
            )
        if self.abandoned:
            self.sink.add(
                "transport.host_ended_with_pending",
                f"the host ended the session ({_stop_text(facts)}) with"
                f" {len(self.abandoned)} of its request(s) pending: {_names(self.abandoned)}",
                "The host stopped the server through mcptape while waiting for these answers;"
                " the server did not crash.",
                [e.request_seq for e in self.abandoned],
            )
