"""The analysis pipeline: frames → messages → exchanges → findings (see the package doc)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.analysis.catalogue import CATALOGUE, SEVERITY_RANK, Severity
from mcp_proxy.analysis.checks import protocol_consumers
from mcp_proxy.analysis.consumer import Consumer
from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.facts import Decoder, Injected, session_facts
from mcp_proxy.analysis.model import (
    Chain,
    Exchange,
    Finding,
    FindingSink,
    Msg,
    SessionFacts,
    severity_counts,
)
from mcp_proxy.analysis.oauth import OAuth
from mcp_proxy.analysis.taxonomy import Taxonomy, classify_error
from mcp_proxy.analysis.transport import Transport
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.osutil import gc_paused

__all__ = [
    "CATALOGUE",
    "Analysis",
    "Chain",
    "Exchange",
    "Finding",
    "SessionFacts",
    "Severity",
    "analyze",
    "classify_error",
]


@dataclass(slots=True)
class Analysis:
    """Everything the analysis derives from one session's frames."""

    session_id: str | None
    facts: SessionFacts
    exchanges: list[Exchange]
    chains: list[Chain]
    findings: list[Finding]
    frame_count: int
    last_seq: int
    unattached_logs: int = 0
    #: Frames mcptape injected (fault rules): left out of pairing and checks, shown apart.
    injected: list[Injected] = field(default_factory=list)
    #: How many exchanges the session had (``exchanges`` is empty when not kept).
    exchange_count: int = 0

    def counts(self) -> dict[str, int]:
        """Findings per severity (error, warning, info)."""
        return severity_counts(self.findings)

    def worst(self) -> str | None:
        """The most severe severity present, or None without findings."""
        if not self.findings:
            return None
        return max((f.severity for f in self.findings), key=lambda s: SEVERITY_RANK[s])

    def as_dict(self) -> dict[str, Any]:
        facts = self.facts
        return {
            "session_id": self.session_id,
            "analyzer_version": ANALYZER_VERSION,
            "era": facts.era,
            "protocol_version": facts.version,
            "transport": facts.transport,
            "frames": self.frame_count,
            "first_frame_at": facts.first_ts,
            "last_frame_at": facts.last_ts,
            "active_s": facts.active_s,
            "open_ended": facts.open_ended,
            "last_seq": self.last_seq,
            "exchanges": [e.as_dict() for e in self.exchanges],
            "chains": [c.as_dict() for c in self.chains],
            "findings": [f.as_dict() for f in self.findings],
            "counts": self.counts(),
        } | ({"injected": [i.as_dict() for i in self.injected]} if self.injected else {})


def analyze(
    frames: Iterable[Any] | Decoder,
    *,
    session: Mapping[str, Any] | None = None,
    http_exchanges: Sequence[Mapping[str, Any]] = (),
) -> Analysis:
    """Analyse one session: pair exchanges, name every error, run the protocol checks.

    ``frames`` must be one session's frame rows in ``seq`` order (with ``raw`` for body-level
    checks), or a :class:`~mcp_proxy.analysis.facts.Decoder` already fed with them (the service
    streams rows from the store into one, batch by batch); ``session`` is its sessions row (how
    it ended) and ``http_exchanges`` its http_exchanges rows (statuses and headers), both
    optional.
    """
    with gc_paused():
        decoder: Decoder
        if isinstance(frames, Decoder):
            decoder = frames
        else:
            decoder = Decoder()
            decoder.feed_frames(frames)
        return _analyze(decoder, session, http_exchanges)


def _analyze(
    decoder: Decoder,
    session: Mapping[str, Any] | None,
    http_exchanges: Sequence[Mapping[str, Any]],
) -> Analysis:
    msgs = decoder.msgs
    http = http_rows(http_exchanges)
    one = SessionPass(session_facts(msgs, session, http), http, decoder.injected, keep=True)
    for i in range(0, len(msgs), _SLICE):
        one.feed_many(msgs[i : i + _SLICE])
    # Drop the messages (exchanges keep their seqs): they are most of the objects made, and
    # freeing them here by reference counting spares the cyclic GC a walk over them later.
    decoder.msgs = []
    del msgs
    return one.finish(session, decoder.frames)


def http_rows(http_exchanges: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """A session's http_exchanges rows by id (what the analysis reads them as)."""
    return {int(r["id"]): r for r in http_exchanges if r.get("id") is not None}


#: Messages handed to the pairing at once by :func:`analyze` (the window's buffer stays this
#: much over its look-ahead).
_SLICE = 1024


class SessionPass:
    """The one analysis of a session, fed its messages batch by batch (:meth:`feed_many`, in
    ``seq`` order) and then :meth:`finish`ed.

    ``facts`` must be complete before the first message (the handshake decides how messages
    are judged): :func:`analyze` reads them from the messages it holds; the service from a first
    pass over the store. The one :class:`~mcp_proxy.analysis.exchanges.Pairing` hands every
    exchange, once its outcome is known, and every message, once handled, to each check family
    (:class:`~mcp_proxy.analysis.consumer.Consumer`). With ``keep`` the exchanges are kept (the
    views list them); without, an exchange is forgotten once the checks have seen it, and memory
    holds the pending requests, the look-ahead and the families' bounded state. ``also`` are
    consumers fed after the check families (``show -x`` prints the exchanges, the settle counts
    them for ``stats``); ``on_task`` sees a creating exchange once its task ended.
    """

    def __init__(
        self,
        facts: SessionFacts,
        http: Mapping[int, Mapping[str, Any]],
        injected: Sequence[Injected],
        *,
        keep: bool,
        also: Sequence[Consumer] = (),
        on_task: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.facts = facts
        self.injected = injected
        self.sink = sink = FindingSink()
        self.last_seq = 0
        self.pairing = Pairing(
            facts,
            http,
            sink,
            injected,
            keep=keep,
            light=False,
            on_final=self._exchange,
            on_message=self._message,
            on_task=on_task,
        )
        self.families: tuple[Consumer, ...] = (
            Taxonomy(facts, http, sink, self.pairing.orphan_errors),
            *protocol_consumers(facts, http, sink),
            Transport(facts, http, sink),
            OAuth(http, sink),
            *also,
        )
        #: the families called per message: those that read messages in this session (the
        #: rest declare that they read exchanges only, :meth:`Consumer.reads_messages`); per
        #: exchange, those that read exchanges (:meth:`Consumer.reads_exchanges`)
        self.readers = [c for c in self.families if c.reads_messages()]
        # (bound once: these run once per message and once per exchange)
        self._reads = [c.message for c in self.readers]
        self._exchanges = [c.exchange for c in self.families if c.reads_exchanges()]

    def _exchange(self, ex: Exchange) -> None:
        for exchange in self._exchanges:
            exchange(ex)

    def _message(self, m: Msg) -> None:
        for read in self._reads:
            read(m)
        if m.seq > self.last_seq:
            self.last_seq = m.seq
        if m.kind == "notification" or m.kind == "stderr":
            m.forget()  # (no exchange holds it; the checks have read it)

    def feed_many(self, msgs: Sequence[Msg]) -> None:
        self.pairing.feed_many(msgs)

    def finish(self, session: Mapping[str, Any] | None, frames: int) -> Analysis:
        """Every pending request's outcome, every family's findings: the session's analysis."""
        paired = self.pairing.finish()
        for c in self.families:
            c.finish()
        for ex in paired.exchanges:
            ex.request = ex.response = None
        injected = list(self.injected)
        return Analysis(
            session_id=(session or {}).get("id"),
            facts=self.facts,
            exchanges=paired.exchanges,
            chains=paired.chains,
            findings=self.sink.result(),
            frame_count=frames,
            last_seq=max(self.last_seq, injected[-1].seq if injected else 0),
            unattached_logs=paired.unattached_logs,
            injected=injected,
            exchange_count=paired.count,
        )
