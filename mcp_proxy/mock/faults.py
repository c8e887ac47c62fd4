"""Fault rules in the mock: ``mcptape mock --fault RULE … / --faults FILE`` (issue 15).

The mock stands in for a server, so it fails the way a server fails: it answers late, never
answers, answers with an error (a JSON-RPC error, an ``isError`` tool result, or over HTTP a
status such as 429 with ``Retry-After``), sends a broken frame, goes away mid-call, or sends a
frame twice or out of order. Which rule fires is decided by the shared engine
(:class:`mcp_proxy.faults.FaultEngine`) on the exact bytes; the bytes a fault puts on the wire
come from :mod:`mcp_proxy.faults.actions`, the same the relays use — so a client sees what it
would see from a real failing server.

Where each action applies:

- **c2s** (the client's message, before the mock looks at it): ``delay``/``throttle``, ``drop``
  (the request is never answered), ``error``/``tool-error`` (answered in the server's place),
  ``http`` (the POST is answered with that status), ``corrupt`` (the server saw broken JSON: a
  ``-32700 Parse error``), ``disconnect``;
- **s2c** (what the mock sends): ``delay``/``throttle``, ``drop``, ``error``/``tool-error`` (a
  response replaced), ``http`` (a response not yet started becomes that status), ``corrupt``,
  ``disconnect``, ``duplicate``, ``reorder`` (held until the next frame goes out, then sent
  after it).

``disconnect`` modes: ``kill`` ends the mock with the signal (a crashed server);
``close-stdin`` closes its output (stdio) or stops serving (HTTP); ``reset`` aborts the HTTP
connection (stdio: closes the output); ``end-stream`` ends the SSE stream after ``after``
events (a server that dropped the connection; its events stay resumable with ``Last-Event-ID``,
as a server with an event store keeps them).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_proxy.errors import UserError
from mcp_proxy.faults import Decision, FaultEngine, Rule, RulesFile, parse_rule
from mcp_proxy.faults.actions import corrupt, error_response, tool_error_response
from mcp_proxy.faults.engine import MessageFacts

#: How long a held (reordered) frame waits for a frame to overtake it before it goes anyway.
REORDER_WAIT = 1.0
PARSE_ERROR = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'


@dataclass
class Verdict:
    """What the transport does instead of (or with) one message."""

    #: The bytes to send (each one message, no line end); ``None``: the message as it was.
    payloads: list[bytes] | None = None
    #: The request was dealt with here (answered or dropped): the mock never sees it.
    consumed: bool = False
    #: Over HTTP: answer with this status instead (``headers``, ``body``).
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    #: ``kill``, ``close-stdin``, ``reset`` or ``end-stream`` (with ``after`` events first).
    disconnect: str | None = None
    after: int = 0
    decision: Decision | None = None

    def sends(self, raw: bytes) -> list[bytes]:
        return [raw] if self.payloads is None else self.payloads


def _answer_to(decision: Decision) -> MessageFacts:
    """The request a replacement answers: the response's own request, or the request itself."""
    facts = decision.facts
    if decision.request is not None and facts.kind == "response":
        return MessageFacts(
            "request",
            decision.request.method,
            decision.request.name,
            facts.id,
            decision.request.message,
        )
    return facts


def _status(settings: Any) -> tuple[int, dict[str, str], bytes]:
    headers: dict[str, str] = {}
    for h in settings.get("header") or []:
        name, _, value = str(h).partition(":")
        headers[name.strip()] = value.strip()
    body = settings.get("body")
    return int(settings["status"]), headers, (str(body).encode() if body is not None else b"")


class MockFaults:
    """The rules of one mock process (one engine: ``nth``/``times`` count across sessions)."""

    def __init__(
        self,
        engine: FaultEngine,
        *,
        http: bool,
        fixed: Sequence[Rule] = (),
        source: RulesFile | None = None,
        intercepts: FaultEngine | None = None,
        holder: Any = None,
    ) -> None:
        self.engine = engine
        self.http = http
        #: Intercept (docs/intercept.md): rules asked first, and the desk a matched message
        #: waits at (``mcp_proxy.intercept.desk.InterceptDesk``, built by the CLI).
        self.intercepts = intercepts
        self.holder = holder
        self.fired: list[Decision] = []
        # The command line's rules stay when the rules file changes (the engine's own
        # ``source`` would replace them with the file's), so the file is watched here.
        self._fixed = list(fixed)
        self._source = source

    def _decide(self, direction: str, raw: bytes) -> Decision | None:
        if self._source is not None and self._source.changed():
            self.engine.replace_rules([*self._fixed, *self._source.rules])
        return self.engine.decide(direction, raw)

    @classmethod
    def build(
        cls,
        rules: Sequence[str],
        file: str | None,
        *,
        http: bool,
        seed: int | None = None,
        warn: Callable[[str], None] | None = None,
        intercepts: FaultEngine | None = None,
        holder: Any = None,
    ) -> MockFaults | None:
        """The rules given on the command line and in a rules file (re-read when it changes),
        and the intercept rules with their desk."""
        if not rules and not file and intercepts is None:
            return None
        parsed = [parse_rule(r) for r in rules]
        source = RulesFile(Path(file), warn=warn) if file else None
        if not http:
            for rule in [*parsed, *(source.rules if source else [])]:
                if rule.action == "http":
                    raise UserError(
                        f"fault {rule.describe()!r}: an HTTP status needs the HTTP mock (--port)"
                    )
        engine = FaultEngine([*parsed, *(source.rules if source else [])], seed=seed)
        return cls(
            engine,
            http=http,
            fixed=parsed,
            source=source,
            intercepts=intercepts,
            holder=holder,
        )

    async def _held(self, decision: Decision, direction: str, raw: bytes) -> Verdict:
        """An intercepted message, held until a person decides: that decision as a verdict
        (forward: as it was; edit: the edit instead; answer: a request answered in the mock's
        place; drop: nothing)."""
        verdict = await self.holder.hold_async("mock", direction, raw, decision)
        how = verdict.decision
        if how == "edit":
            return Verdict(payloads=[verdict.payload], decision=decision)
        if how == "answer" and direction == "c2s" and decision.facts.is_request:
            return Verdict(payloads=[verdict.payload], consumed=True, decision=decision)
        if how == "drop":
            return Verdict(payloads=[], consumed=direction == "c2s", decision=decision)
        return Verdict(decision=decision)

    async def _common(self, decision: Decision, raw: bytes) -> Verdict | None:
        """delay/throttle (then go on), http, disconnect, drop; None: action-specific."""
        s, action = decision.rule.settings, decision.action
        if action == "delay":
            ms = float(s.get("ms", 0)) + random.uniform(0, float(s.get("jitter") or 0))
            await asyncio.sleep(ms / 1000)
            return Verdict(decision=decision)
        if action == "throttle":
            await asyncio.sleep(len(raw) / max(1, int(s["bps"])))
            return Verdict(decision=decision)
        if action == "http":
            if not self.http:
                return Verdict(decision=decision)
            status, headers, body = _status(s)
            return Verdict(consumed=True, status=status, headers=headers, body=body)
        if action == "disconnect":
            mode = str(s["mode"])
            if mode == "end-stream" and decision.direction == "c2s":
                # The request is served; the stream that carries its answer ends early.
                return Verdict(disconnect=mode, after=int(s.get("after") or 0))
            if mode == "kill":
                # Die of the signal as a server does: the mock's own graceful SIGTERM/SIGINT
                # handling (finish, write the file) is exactly what a crash does not do.
                signum = getattr(signal, f"SIG{s.get('signal') or 'TERM'}")
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return Verdict(consumed=True, disconnect=mode, after=int(s.get("after") or 0))
        if action == "drop":
            return Verdict(payloads=[], consumed=True, decision=decision)
        return None

    async def _first_steps(
        self, direction: str, raw: bytes
    ) -> tuple[Decision | None, Verdict | None]:
        """The rule that fires on ``raw`` (None: none) and, when the common actions settle it,
        the verdict; a decision without a verdict is left to the direction's own actions."""
        if self.intercepts is not None and self.holder is not None:
            held = self.intercepts.decide(direction, raw)
            if held is not None:
                return held, await self._held(held, direction, raw)
        decision = self._decide(direction, raw)
        if decision is None:
            return None, None
        self.fired.append(decision)
        verdict = await self._common(decision, raw)
        if verdict is not None:
            verdict.decision = decision
        return decision, verdict

    async def inbound(self, raw: bytes) -> Verdict | None:
        """A client message the mock is about to handle (None: handle it as it is)."""
        decision, verdict = await self._first_steps("c2s", raw)
        if decision is None or verdict is not None:
            return verdict
        facts = decision.facts
        if facts.kind != "request" and decision.action != "corrupt":
            return Verdict(decision=decision)  # only a request can be answered in its place
        if decision.action in ("error", "tool-error"):  # answered in the server's place
            reply = decision.replacement(b"")
            if reply is not None:
                return Verdict(payloads=[reply.rstrip(b"\r\n")], consumed=True, decision=decision)
        if decision.action == "corrupt":  # what a server answers to a frame it cannot parse
            return Verdict(payloads=[PARSE_ERROR], consumed=True, decision=decision)
        return Verdict(decision=decision)  # duplicate/reorder: the mock's own frames only

    async def outbound(self, raw: bytes) -> Verdict | None:
        """A message the mock is about to send (None: send it as it is)."""
        decision, verdict = await self._first_steps("s2c", raw)
        if decision is None or verdict is not None:
            return verdict
        s, facts = decision.rule.settings, decision.facts
        if decision.action == "corrupt":
            at = s.get("at")
            return Verdict(payloads=[corrupt(raw, str(s["mode"]), at)], decision=decision)
        if decision.action == "duplicate":
            return Verdict(payloads=[raw, raw], decision=decision)
        if decision.action == "reorder":
            return Verdict(payloads=[], decision=decision)  # the Gate holds it
        if facts.id is None or facts.kind != "response":
            return Verdict(decision=decision)
        asked = _answer_to(decision)
        if decision.action == "error":
            reply = error_response(asked, int(s["code"]), str(s["message"]), s.get("data"), end=b"")
            return Verdict(payloads=[reply], decision=decision)
        reply = tool_error_response(asked, str(s["text"]), end=b"")
        return Verdict(payloads=[reply], decision=decision)

    def gate(self) -> Gate:
        return Gate(self)


class Gate:
    """One outgoing channel (the stdio output, one SSE stream): applies the s2c rules in order
    and holds a reordered frame until the next one has gone out."""

    def __init__(self, faults: MockFaults) -> None:
        self.faults = faults
        self.held: list[bytes] = []
        self.sent = 0  # frames sent on this channel (for ``end-stream after=N``)

    async def out(self, raw: bytes) -> Verdict:
        """The verdict on ``raw``; ``payloads`` is what to send now (held frames included)."""
        verdict = await self.faults.outbound(raw) or Verdict()
        if verdict.disconnect or verdict.status is not None:
            return verdict
        if verdict.decision is not None and verdict.decision.action == "reorder":
            self.held.append(raw)
            return Verdict(payloads=[], decision=verdict.decision)
        now = verdict.sends(raw) + self.held
        self.held = []
        return Verdict(payloads=now, decision=verdict.decision)

    def flush(self) -> list[bytes]:
        """Held frames nothing overtook: they go anyway (late, after the wait)."""
        out, self.held = self.held, []
        return out


__all__ = ["REORDER_WAIT", "Gate", "MockFaults", "Verdict"]
