"""The analysis pipeline: frames → messages → exchanges → findings (see the package doc)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.analysis.catalogue import CATALOGUE, SEVERITY_RANK, Severity
from mcp_proxy.analysis.checks import protocol_consumers
from mcp_proxy.analysis.consumer import Consumer
from mcp_proxy.analysis.exchanges import pair
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
from mcp_proxy.analysis.oauth import oauth_checks
from mcp_proxy.analysis.taxonomy import Taxonomy, classify_error
from mcp_proxy.analysis.transport import Transport
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.limits import STDERR_TAIL

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
    with _gc_paused():
        decoder: Decoder
        if isinstance(frames, Decoder):
            decoder = frames
        else:
            decoder = Decoder()
            decoder.feed(frames)
        return _analyze(decoder, session, http_exchanges)


def gc_paused() -> contextlib.AbstractContextManager[None]:
    """Pause the cyclic GC (counted, thread-safe) while building many objects that make no
    cycles, e.g. while a :class:`~mcp_proxy.analysis.facts.Decoder` is fed from the store."""
    return _gc_paused()


_gc_lock = threading.Lock()
_gc_depth = 0
_gc_was_enabled = False


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while analysing, and restore it exactly once.

    Analysis allocates ~5 objects per frame and frees none of them until it returns; the cyclic
    GC would walk them all again and again (a third of the time at 100k frames). Nothing here
    makes reference cycles. Counted, because the dashboard runs analyses in threads at once.
    """
    global _gc_depth, _gc_was_enabled
    with _gc_lock:
        if _gc_depth == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0 and _gc_was_enabled:
                gc.enable()


def _analyze(
    decoder: Decoder,
    session: Mapping[str, Any] | None,
    http_exchanges: Sequence[Mapping[str, Any]],
) -> Analysis:
    msgs = decoder.msgs
    http = {int(r["id"]): r for r in http_exchanges if r.get("id") is not None}
    facts = session_facts(msgs, session, http)
    sink = FindingSink()
    pairing = pair(msgs, facts, http, sink, decoder.injected)
    _forget_notification_bytes(msgs)
    families: list[Consumer] = [
        Taxonomy(facts, http, sink, pairing.orphan_errors),
        *protocol_consumers(facts, http, sink),
        Transport(facts, http, sink),
    ]
    for ex in pairing.exchanges:
        for c in families:
            c.exchange(ex)
    for m in msgs:
        for c in families:
            c.message(m)
    for c in families:
        c.finish()
    if http:
        oauth_checks(http, sink, _seqs_by_exchange(msgs))
    # Drop the parsed bodies and the messages (exchanges keep their seqs): they are most of the
    # objects made, and freeing them here by reference counting spares the cyclic GC a walk
    # over all of them later.
    last_seq = max(msgs[-1].seq if msgs else 0, decoder.injected[-1].seq if decoder.injected else 0)
    decoder.msgs = []
    for m in msgs:
        m.release()
    del msgs
    for ex in pairing.exchanges:
        ex.request = ex.response = None
    return Analysis(
        session_id=(session or {}).get("id"),
        facts=facts,
        exchanges=pairing.exchanges,
        chains=pairing.chains,
        findings=sink.result(),
        frame_count=decoder.frames,
        last_seq=last_seq,
        unattached_logs=pairing.unattached_logs,
        injected=decoder.injected,
    )


def _seqs_by_exchange(msgs: list[Msg], cap: int = 4) -> dict[int, list[int]]:
    """The first frames of each HTTP exchange (what an HTTP-level finding points at)."""
    out: dict[int, list[int]] = {}
    for m in msgs:
        if m.http is not None:
            seqs = out.setdefault(m.http, [])
            if len(seqs) < cap and (not seqs or seqs[-1] != m.seq):
                seqs.append(m.seq)
    return out


def _forget_notification_bytes(msgs: list[Msg]) -> None:
    """Free the bytes no check reads after pairing: notifications (pairing has read their
    tokens, request ids and levels; later checks look at method, size and channel only) and
    stderr lines but the last few. On a burst of logs that is most of the session's memory."""
    stderr_kept = 0
    for m in reversed(msgs):
        kind = m.kind
        if kind == "notification" and m.raw is not None:
            m.raw = None
            m._body = None
        elif kind == "stderr":
            if stderr_kept < STDERR_TAIL:
                stderr_kept += 1
            else:
                m.raw = None
