"""Deciding, frame by frame, which fault rule fires — pure, so it is tested without sockets.

The transports ask :meth:`FaultEngine.decide` about each whole JSON-RPC message they are about
to forward and carry out the :class:`Decision` they get back; the engine never touches a socket
or a pipe. It keeps just enough protocol state to match what a person means by a rule:

- a response is matched by its *request's* method and name (``error method=tools/call`` means
  "that call fails"), so the engine remembers in-flight requests per direction — ids of the two
  directions live in separate spaces and collide (see the wire facts);
- ``nth``/``times`` count per rule; ``p`` rolls a die seeded per rule (``seed=``), so a failing
  run replays identically.

Why only JSON-RPC messages and not bytes: every rule names protocol things (methods, tool names,
requests, responses). Faults on raw bytes (bandwidth) are stream settings the transport applies.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp_proxy.faults.rules import Rule, parse_rules_file

__all__ = ["Decision", "FaultEngine", "FirstOf", "MessageFacts", "RulesFile", "message_facts"]

_NAME_METHODS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


@dataclass(frozen=True, slots=True)
class MessageFacts:
    """What a rule can match on, read once from a message's bytes."""

    kind: str  # "request", "notification", "response", "other"
    method: str | None
    name: str | None
    id: Any = None
    message: Any = None  # the parsed message (a dict), when it parsed

    @property
    def is_request(self) -> bool:
        return self.kind == "request"


def message_facts(raw: bytes) -> MessageFacts:
    """Kind, method, tool/prompt/resource name and id of one JSON-RPC message; never raises.

    Deeply nested or broken JSON is "other": a rule can still match it by direction alone.
    """
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError):
        return MessageFacts("other", None, None)
    if not isinstance(msg, dict):
        return MessageFacts("other", None, None, message=msg)
    method = msg.get("method")
    if isinstance(method, str):
        params = msg.get("params")
        key = _NAME_METHODS.get(method)
        name = params.get(key) if key and isinstance(params, dict) else None
        kind = "request" if "id" in msg else "notification"
        return MessageFacts(
            kind, method, name if isinstance(name, str) else None, msg.get("id"), msg
        )
    if "result" in msg or "error" in msg:
        return MessageFacts("response", None, None, msg.get("id"), msg)
    return MessageFacts("other", None, None, message=msg)


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule fired on a message: what to do, and the facts that made it fire."""

    rule: Rule
    facts: MessageFacts
    direction: str
    #: For a response: the request it answers (its facts), when the engine saw it.
    request: MessageFacts | None = None
    #: A seeded die in [0, 1) rolled for this firing (the jitter of a delay), so a run with a
    #: seed delays every frame by the same amount again.
    roll: float = 0.5

    @property
    def action(self) -> str:
        return self.rule.action

    @property
    def settings(self) -> Mapping[str, Any]:
        return self.rule.settings

    def delay_seconds(self) -> float:
        """``delay``: how long to hold the frame — ``ms`` ± ``jitter`` (uniform), never < 0."""
        ms = float(self.settings.get("ms") or 0.0)
        jitter = float(self.settings.get("jitter") or 0.0)
        return max(0.0, ms + (2.0 * self.roll - 1.0) * jitter) / 1000.0

    def replacement(self, raw: bytes) -> bytes | None:
        """``error``/``tool-error``: the bytes sent in a peer's place, or None (nothing to send).

        For a request they answer it (and travel back to its sender, which never reaches the
        other peer); for a response they replace it (same id, same direction). A notification
        or a line that is not JSON-RPC has nothing to answer: None.
        """
        from mcp_proxy.faults.actions import error_response, split_line_end, tool_error_response

        if self.facts.kind not in ("request", "response") or self.facts.id is None:
            return None
        end = split_line_end(raw)[1] or b"\n"
        s = self.settings
        if self.action == "tool-error":
            return tool_error_response(self.request or self.facts, str(s.get("text")), end=end)
        code = int(s.get("code", -32603))
        return error_response(self.facts, code, str(s.get("message")), s.get("data"), end=end)

    def corrupted(self, raw: bytes) -> bytes:
        """``corrupt``: ``raw`` broken the way the rule says (line end kept)."""
        from mcp_proxy.faults.actions import corrupt

        return corrupt(raw, str(self.settings.get("mode", "truncate")), self.settings.get("at"))

    def finding(self, decided: str | None = None, by: str | None = None) -> dict[str, Any]:
        """The ``inject.*`` finding that marks this fault in the recording (an intercept's
        title says what was ``decided`` and ``by`` whom)."""
        what = self.request.method if self.request else self.facts.method
        title = f"injected {self.rule.action}" + (f" on {what}" if what else "")
        if self.rule.action == "intercept":
            by_whom = f" by {by}" if by and decided not in ("timeout", "too_large") else ""
            title = f"intercepted {what or self.facts.kind}: {decided}{by_whom}"
        return {
            "code": f"inject.{self.rule.action.replace('-', '_')}",
            "severity": "info",
            "title": title,
            "detail": {
                "rule": self.rule.describe(),
                "direction": self.direction,
                "id": self.facts.id if self.facts.id is not None else None,
            },
        }


@dataclass
class _RuleState:
    seen: int = 0  # messages that passed the static match
    fired: int = 0
    rng: random.Random = field(default_factory=random.Random)


class FaultEngine:
    """Matches messages against rules; thread-safe (the stdio relay has one thread per stream).

    ``rules`` can be swapped at run time (:meth:`replace_rules`, or a :class:`RulesFile`
    ``source`` that is re-read when the file changes); counters restart for new rules only.
    """

    def __init__(
        self,
        rules: Sequence[Rule] = (),
        *,
        seed: int | None = None,
        source: RulesFile | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._seed = seed
        self._source = source
        self._rules: list[Rule] = []
        self._state: dict[int, _RuleState] = {}
        #: In-flight requests per the direction they travelled: ``(direction, id) → facts``.
        self._pending: dict[tuple[str, str], MessageFacts] = {}
        #: The rules given directly (``--fault``): they stay when the file's rules change.
        self._fixed: list[Rule] = list(rules)
        self.replace_rules([*rules, *(source.rules if source else [])])

    @property
    def rules(self) -> list[Rule]:
        return list(self._rules)

    def replace_rules(self, rules: Sequence[Rule]) -> None:
        with self._lock:
            old = {id(r): self._state[id(r)] for r in self._rules if id(r) in self._state}
            self._rules = list(rules)
            self._state = {}
            for n, rule in enumerate(self._rules):
                state = old.get(id(rule)) or _RuleState()
                if id(rule) not in old:
                    seed = rule.match.seed if rule.match.seed is not None else self._seed
                    state.rng = random.Random(None if seed is None else f"{seed}:{n}")
                self._state[id(rule)] = state

    def decide(self, direction: str, raw: bytes) -> Decision | None:
        """The first rule that fires on this message (``None``: forward it unchanged)."""
        if self._source is not None and self._source.changed():
            self.replace_rules([*self._fixed, *self._source.rules])
        facts = message_facts(raw)
        with self._lock:
            request = self._track(direction, facts)
            method = request.method if request else facts.method
            name = request.name if request else facts.name
            for rule in self._rules:
                if not rule.match.selects(
                    direction, method, name, facts.kind, facts.id, facts.message
                ):
                    continue
                if request is not None and rule.action == "intercept" and not rule.match.direction:
                    continue  # ``--intercept method=tools/call`` holds the call, not its answer
                if self._fires(rule):
                    roll = (
                        self._state[id(rule)].rng.random() if rule.settings.get("jitter") else 0.5
                    )
                    return Decision(rule, facts, direction, request, roll)
        return None

    def _track(self, direction: str, facts: MessageFacts) -> MessageFacts | None:
        """Remember requests; for a response, return (and forget) the request it answers."""
        if facts.id is None or isinstance(facts.id, dict | list):
            return None
        key = json.dumps(facts.id)
        if facts.kind == "request":
            self._pending[(direction, key)] = facts
            return None
        if facts.kind == "response":
            other = "c2s" if direction == "s2c" else "s2c"
            return self._pending.pop((other, key), None)
        return None

    def _fires(self, rule: Rule) -> bool:
        state = self._state[id(rule)]
        state.seen += 1
        m = rule.match
        if m.nth is not None and state.seen != m.nth:
            return False
        if m.times is not None and state.fired >= m.times:
            return False
        if m.p < 1.0 and state.rng.random() >= m.p:
            return False
        state.fired += 1
        return True


class RulesFile:
    """A TOML rules file, re-read when it changes (checked at most every ``interval`` s).

    A file that becomes invalid keeps the last good rules and reports the error once through
    ``warn`` — a typo while a host is connected must not stop the relay.
    """

    def __init__(
        self,
        path: Path,
        *,
        interval: float = 0.25,
        warn: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        table: str = "fault",
    ) -> None:
        self.path = path
        self.table = table
        self.interval = interval
        self._warn = warn or (lambda _msg: None)
        self._clock = clock
        self._stamp = self._stat()
        self.rules = parse_rules_file(path, table=table)  # the first read must succeed
        self._checked = clock()
        self._last_error: str | None = None

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def changed(self) -> bool:
        """True once after the file changed to a valid set of rules."""
        now = self._clock()
        if now - self._checked < self.interval:
            return False
        self._checked = now
        stamp = self._stat()
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.rules = parse_rules_file(self.path, table=self.table)
        except Exception as exc:  # any bad edit keeps the last good rules
            if str(exc) != self._last_error:
                self._last_error = str(exc)
                self._warn(f"{exc} (keeping the previous {self.table} rules)")
            return False
        self._last_error = None
        return True


class FirstOf:
    """Several engines asked in turn (intercept rules first, then fault rules): the first
    decision wins. Each engine keeps its own counters and rules file."""

    def __init__(self, *engines: FaultEngine) -> None:
        self.engines = engines

    def decide(self, direction: str, raw: bytes) -> Decision | None:
        found = None
        for engine in self.engines:
            decision = engine.decide(direction, raw)  # every engine tracks every request
            found = found or decision
        return found
