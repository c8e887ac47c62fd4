"""Faults of the transport itself: lines that are not JSON-RPC, invalid JSON-RPC values, batches
where the revision forbids them, messages cut short or too large, a server that crashed.

One :class:`~mcp_proxy.analysis.consumer.Consumer` fed every message once; it keeps counts, the
first frames and the first offender of each kind, and the last few stderr lines.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from mcp_proxy.analysis.consumer import Seqs
from mcp_proxy.analysis.facts import header
from mcp_proxy.analysis.model import Exchange, FindingSink, Msg, SessionFacts
from mcp_proxy.frames import classify_message
from mcp_proxy.limits import STDERR_TAIL

SSE_EVENT_LIMIT = 1 << 20  # the SDK client's default max SSE event size
POST_BODY_LIMIT = 4 << 20  # the SDK server's max request body


def snippet(raw: bytes | None, limit: int = 160) -> str:
    """The first ``limit`` characters of some bytes, as text (what a finding quotes)."""
    if not raw:
        return ""
    text = raw.decode("utf-8", "replace").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _First:
    """How many, their first frames, and what the first one was (what the finding quotes)."""

    __slots__ = ("channel", "direction", "problem", "quote", "seqs")

    def __init__(self, m: Msg, quote: str, problem: str | None = None) -> None:
        self.seqs = Seqs()
        self.direction = m.direction
        self.channel = m.channel
        self.quote = quote
        self.problem = problem


class Transport:
    """Transport faults, one message at a time (see the module doc)."""

    def __init__(
        self, facts: SessionFacts, http: Mapping[int, Mapping[str, Any]], sink: FindingSink
    ) -> None:
        self.facts = facts
        self.http = http
        self.sink = sink
        self.noise: dict[str, _First] = {}
        self.invalid: dict[str, _First] = {}
        self.stderr_tail: deque[bytes] = deque(maxlen=STDERR_TAIL)
        self.last_seq: int | None = None

    def exchange(self, ex: Exchange) -> None:
        pass

    def reads_messages(self) -> bool:
        return True

    def reads_exchanges(self) -> bool:
        return False

    def message(self, m: Msg) -> None:
        if self.last_seq is None or m.seq > self.last_seq:
            self.last_seq = m.seq
        kind = m.kind
        if kind == "stderr":
            if m.raw is not None:
                self.stderr_tail.append(m.raw)
            return
        if kind == "noise":
            self._noise(m)
        elif kind == "invalid":
            first = self.invalid.get(m.direction)
            if first is None:
                problem = classify_message(m.body).problem if m.body is not None else None
                first = self.invalid[m.direction] = _First(m, "", problem)
            first.seqs.add(m.seq)
        elif kind == "batch":
            facts = self.facts
            if facts.version is not None and facts.version != "2025-03-26":
                self.sink.add(
                    "jsonrpc.batch_not_allowed",
                    f"JSON-RPC batch from the {'host' if m.direction == 'c2s' else 'server'}"
                    f" in a {facts.version} session",
                    "Batches were allowed only in 2025-03-26.",
                    [m.seq],
                )
        if m.complete and m.channel == "stdio":
            return  # (nothing :meth:`_shape` reports: most messages, once each)
        self._shape(m)

    def _noise(self, m: Msg) -> None:
        if m.channel == "sse" and m.event not in (None, "", "message"):
            return  # e.g. the legacy transport's `endpoint` event: not a JSON-RPC message
        if m.channel == "http" and m.direction == "s2c" and m.http is not None:
            row = self.http.get(m.http)
            if row is not None and (
                (row.get("status") or 0) >= 400
                or "json" not in (header(row.get("response_headers"), "content-type") or "")
            ):
                return  # a plain-text body ("Accepted", an error page): not JSON-RPC
        utf8_ok = True
        if m.raw is not None:
            try:
                m.raw.decode("utf-8")
            except UnicodeDecodeError:
                utf8_ok = False
        if not utf8_ok:
            code = "transport.invalid_utf8"
        elif m.direction == "s2c":
            code = "transport.server_noise"
        else:
            code = "transport.host_noise"
        first = self.noise.get(code)
        if first is None:
            first = self.noise[code] = _First(m, f"First: {snippet(m.raw)!r}" if m.raw else "")
        first.seqs.add(m.seq)

    def _shape(self, m: Msg) -> None:
        if not m.complete and m.channel != "stderr":
            self.sink.add(
                "transport.incomplete_frame",
                f"{'host' if m.direction == 'c2s' else 'server'} message cut short"
                f" ({m.size} bytes, no line end)",
                "The stream ended before the message did.",
                [m.seq],
            )
        if m.channel == "sse" and m.size > SSE_EVENT_LIMIT:
            self.sink.add(
                "transport.oversize",
                f"SSE event of {m.size / 1048576:.1f} MiB",
                "The official SDK client refuses SSE events over 1 MiB by default.",
                [m.seq],
            )
        elif m.channel == "http" and m.direction == "c2s" and m.size > POST_BODY_LIMIT:
            self.sink.add(
                "transport.oversize",
                f"POST body of {m.size / 1048576:.1f} MiB",
                "The official SDK server answers 413 for bodies over 4 MiB.",
                [m.seq],
            )

    def finish(self) -> None:
        sink, facts = self.sink, self.facts
        for code, first in self.noise.items():
            who = {
                "transport.server_noise": "server",
                "transport.host_noise": "host",
            }.get(code, "server" if first.direction == "s2c" else "host")
            where = {"stdio": "stdout" if first.direction == "s2c" else "stdin"}.get(
                first.channel, first.channel
            )
            n = first.seqs.n
            sink.add(
                code,
                f"{n} non-JSON line(s) from the {who} on {where}"
                if code != "transport.invalid_utf8"
                else f"{n} message(s) with invalid UTF-8",
                first.quote,
                first.seqs.seqs,
            )
        for direction, first in self.invalid.items():
            sink.add(
                "jsonrpc.invalid_message",
                f"{first.seqs.n} JSON value(s) from the"
                f" {'host' if direction == 'c2s' else 'server'} that are not JSON-RPC",
                f"First problem: {first.problem}." if first.problem else "",
                first.seqs.seqs,
            )
        if facts.status == "crashed":
            tail = [snippet(r, 200) for r in list(self.stderr_tail)[-5:]]
            how = (
                f"killed by signal {facts.exit_signal}"
                if facts.exit_signal is not None
                else f"exit status {facts.exit_code}"
            )
            sink.add(
                "transport.server_crashed",
                f"server crashed ({how})",
                "Last stderr lines:\n" + "\n".join(tail)
                if tail
                else "The server wrote nothing on stderr.",
                [self.last_seq] if self.last_seq is not None else [],
            )
