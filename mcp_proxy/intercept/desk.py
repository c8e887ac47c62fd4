"""The relay's side of an intercept: hold one message in the store and wait for a person.

:meth:`InterceptDesk.hold` is called by a relay's pump for a message an intercept rule matched
(the fault engine's ``intercept`` decision). It stores the message (``store/intercepts.py``),
says on the terminal how to decide, and waits — on the calling thread only, so the held
message's direction waits behind it while the other direction flows — looking at the row every
:data:`~mcp_proxy.limits.INTERCEPT_POLL` seconds until:

- a person resolved it (``forward``, ``edit``, ``answer``, ``drop``): that :class:`Verdict`;
- the timeout passed (``--intercept-timeout``; 0 = never): resolved ``timeout`` (the update
  names ``state = 'held'``: a person who decided in the same instant wins), forwarded unchanged,
  and the terminal says so;
- the relay closes (:meth:`close`): resolved ``abandoned``, forwarded (to a peer that is
  usually gone).

A message larger than :data:`~mcp_proxy.limits.INTERCEPT_MAX_BYTES` is not held (``too_large``).
A payload read back from the store is checked again (another process wrote it): one that is not
one compact JSON-RPC message is not sent — the original is forwarded and the terminal says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_proxy.errors import McptapeError
from mcp_proxy.intercept.verdicts import check_message
from mcp_proxy.limits import INTERCEPT_MAX_BYTES, INTERCEPT_POLL
from mcp_proxy.store.intercepts import AlreadyResolved, HeldRow

__all__ = ["HoldTable", "InterceptDesk", "Verdict"]

#: Decisions that send the original message on unchanged.
FORWARDS = ("forward", "timeout", "abandoned", "too_large")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What to do with a held message: ``decision`` and, for ``edit``/``answer``, ``payload``
    (one compact JSON-RPC message, no line end). ``id`` is the intercept's (None: not held)."""

    id: int | None
    decision: str
    payload: bytes | None
    by: str
    method: str | None = None

    @property
    def forwards(self) -> bool:
        return self.decision in FORWARDS


class HoldTable(Protocol):
    """What the desk needs of :class:`~mcp_proxy.store.intercepts.InterceptTable`."""

    def hold(
        self,
        session_id: str,
        direction: str,
        kind: str,
        method: str | None,
        msg_id: str | None,
        rule: str | None,
        original: bytes,
    ) -> int: ...

    def get(self, intercept_id: int) -> HeldRow | None: ...

    def resolve(
        self, intercept_id: int, decision: str, payload: bytes | None, by: str
    ) -> HeldRow: ...


def _stderr(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        print(f"mcptape: {message}", file=sys.stderr, flush=True)


class InterceptDesk:
    """Holds messages for one relay run (thread-safe: one pump thread per direction)."""

    def __init__(
        self,
        table: HoldTable,
        *,
        timeout: float,
        poll: float = INTERCEPT_POLL,
        max_bytes: int = INTERCEPT_MAX_BYTES,
        say: Callable[[str], None] = _stderr,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.timeout = timeout
        self.poll = poll
        self.max_bytes = max_bytes
        self.say = say
        self.clock = clock
        self._closed = threading.Event()

    def close(self) -> None:
        """The relay ends: every wait returns (its message is resolved ``abandoned``)."""
        self._closed.set()

    def hold(
        self,
        session_id: str,
        direction: str,
        raw: bytes,
        decision: Any,
        gone: Callable[[], bool] | None = None,
    ) -> Verdict:
        """Hold ``raw`` (one message as the peer sent it) until it is decided; never raises.
        Blocks the calling thread (a stdio pump) and nothing else. ``gone`` (looked at each
        poll) says the host left: the hold is abandoned then, as when the relay ends."""
        held = self._start(session_id, direction, raw, decision)
        if isinstance(held, Verdict):
            return held
        deadline = self.clock() + self.timeout if self.timeout > 0 else None
        while (verdict := self._step(held, deadline)) is None:
            if gone is not None and gone():
                return self._give_up(held[0], held[1], "abandoned", "the host left")
            self._closed.wait(self.poll)
        return verdict

    async def hold_async(
        self, session_id: str, direction: str, raw: bytes, decision: Any
    ) -> Verdict:
        """:meth:`hold` for an event loop (the HTTP relay): the store is used on a worker
        thread one short call at a time, the wait between polls is the loop's, so a held
        exchange holds only its own task (its request, its response, its event stream)."""
        held = await asyncio.to_thread(self._start, session_id, direction, raw, decision)
        if isinstance(held, Verdict):
            return held
        deadline = self.clock() + self.timeout if self.timeout > 0 else None
        try:
            while True:
                verdict = await asyncio.to_thread(self._step, held, deadline)
                if verdict is not None:
                    return verdict
                # Another process decides (the store is polled; nothing here can be awaited).
                await asyncio.sleep(self.poll)
        except asyncio.CancelledError:
            # The host left (or the relay stops): the row must not stay "held" for ever. The
            # update runs on a worker thread; the cancellation is not held up by it.
            asyncio.get_running_loop().run_in_executor(
                None, self._give_up, held[0], held[1], "abandoned", "the host left"
            )
            raise

    def _start(
        self, session_id: str, direction: str, raw: bytes, decision: Any
    ) -> tuple[int, str | None] | Verdict:
        """Store the held message and say so: ``(id, method)``, or the verdict at once when it
        cannot be held (too large, no store)."""
        facts, request = decision.facts, decision.request
        method = request.method if request is not None else facts.method
        if len(raw) > self.max_bytes:
            self.say(
                f"not holding a {len(raw):,}-byte {method or facts.kind} (more than"
                f" {self.max_bytes:,} bytes): forwarded unchanged"
            )
            return Verdict(None, "too_large", None, "mcptape", method)
        msg_id = None if facts.id is None else json.dumps(facts.id)
        try:
            iid = self.table.hold(
                session_id, direction, facts.kind, method, msg_id, decision.rule.describe(), raw
            )
        except McptapeError as exc:  # the store is unreachable: the wire must not stop
            self.say(f"cannot hold a message ({exc}); forwarded unchanged")
            return Verdict(None, "forward", None, "mcptape", method)
        what = " ".join(p for p in (direction, facts.kind, method) if p)
        self.say(
            f"held #{iid} ({what}); decide with: mcptape intercept resolve {iid}"
            " --forward|--edit FILE|--set PATH=VALUE|--answer FILE|--drop"
        )
        return (iid, method)

    def _step(self, held: tuple[int, str | None], deadline: float | None) -> Verdict | None:
        """One look at a held message: its verdict, or None (still held; look again)."""
        iid, method = held
        row = self._look(iid)
        if row is not None and row.state == "resolved":
            return self._verdict(row, method)
        if self._closed.is_set():
            return self._give_up(iid, method, "abandoned", "the relay ended")
        if deadline is not None and self.clock() >= deadline:
            verdict = self._give_up(iid, method, "timeout", "nobody resolved it")
            if verdict.decision == "timeout":
                self.say(
                    f"#{iid} forwarded unchanged after {self.timeout:g} s"
                    " (--intercept-timeout): nobody resolved it"
                )
            return verdict
        return None

    def _look(self, iid: int) -> HeldRow | None:
        try:
            return self.table.get(iid)
        except McptapeError:
            return None  # a store that comes back is looked at again at the next poll

    def _give_up(self, iid: int, method: str | None, decision: str, why: str) -> Verdict:
        try:
            row = self.table.resolve(iid, decision, None, f"mcptape ({why})")
        except AlreadyResolved:  # a person decided in the same instant: theirs wins
            theirs = self.table.get(iid)
            if theirs is not None:
                return self._verdict(theirs, method)
            return Verdict(iid, decision, None, "mcptape", method)
        except McptapeError:
            return Verdict(iid, decision, None, "mcptape", method)
        return self._verdict(row, method)

    def _verdict(self, row: HeldRow, method: str | None) -> Verdict:
        decision = row.decision or "forward"
        by = row.resolved_by or "?"
        if decision in ("edit", "answer"):
            why = _bad_payload(row.payload)
            if why is not None:
                self.say(f"#{row.id}: the {decision} is not usable ({why}); forwarded unchanged")
                return Verdict(row.id, "forward", None, by, method)
        elif decision not in (*FORWARDS, "drop"):
            self.say(f"#{row.id}: unknown decision {decision!r}; forwarded unchanged")
            return Verdict(row.id, "forward", None, by, method)
        return Verdict(row.id, decision, row.payload, by, method)


def _bad_payload(payload: bytes | None) -> str | None:
    """Why a stored payload cannot go on the wire, or None."""
    if not payload:
        return "it is empty"
    if b"\n" in payload or b"\r" in payload:
        return "it is more than one line"
    try:
        check_message(json.loads(payload), "it")
    except (ValueError, McptapeError) as exc:
        return str(exc)
    return None
