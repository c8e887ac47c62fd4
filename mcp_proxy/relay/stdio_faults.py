"""The frame-aware stdio pumps that carry out fault rules (used only when rules were given).

Without rules the stdio relay moves raw chunks and never looks inside them (its speed is the
benchmark's); with rules each stream is cut into lines here, each line is shown to the fault
engine, and the :class:`Decision` it returns is carried out on the pipes:

===============  ==========================================================================
action           what the peers see
===============  ==========================================================================
delay            the frame arrives ``ms`` ± ``jitter`` later (frames behind it are not held:
                 a slow tool does not stop the server's other answers)
throttle         the frame is written in slices at ``bps`` bytes per second
drop             the frame never arrives
error            a JSON-RPC error (or an ``isError`` tool result) in the peer's place: a
tool-error       request is answered back to its sender, a response is replaced
corrupt          the frame arrives truncated, cut inside a UTF-8 sequence, or as bad JSON
disconnect       ``kill``: the server gets a signal and dies; ``close-stdin``: the server's
                 stdin and the host's stdout are closed (each side sees EOF)
duplicate        the frame arrives twice
reorder          the frame is held and arrives after the next frame in its direction (or
                 after ``wait`` ms if none comes)
===============  ==========================================================================

What is recorded (the agreed scheme): every frame a peer really sent, on its normal channel at
the time it was read; every byte mcptape put on the wire in a peer's place (an injected answer,
a corrupted copy, a second copy, a late reordered copy) as a frame on ``Channel.INJECT`` in the
direction it travelled; and, for each rule that fired, its ``inject.*`` finding.

The relay may import only the core and the recorder contract, so the engine and its decisions
are used through their methods (duck typing), never imported: the CLI builds the engine.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.osutil import write_all

if TYPE_CHECKING:
    from mcp_proxy.relay.stdio import StdioRelay

#: How long a reordered frame waits for a frame to swap with (``reorder wait=…`` overrides).
REORDER_WAIT = 1.0
#: Slices per second when throttling (each slice is ``bps / SLICES`` bytes).
SLICES = 20
_HTTP_ONLY_MODES = ("reset", "end-stream")
_OPPOSITE = {Direction.C2S: Direction.S2C, Direction.S2C: Direction.C2S}


class Later:
    """One thread that runs callbacks at their time: delayed frames and reorder time-outs.

    A thread per delayed frame would be thousands of threads under ``delay ms=100`` on a burst
    of notifications; one heap keeps them in due order (and in arrival order for equal times,
    so frames delayed alike keep their order).
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._count = itertools.count()
        self._thread: threading.Thread | None = None
        self.pending = 0  # callbacks scheduled and not yet finished

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + delay, next(self._count), fn))
            self.pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="faults", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                due, _, fn = self._heap[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            try:
                fn()
            except Exception:  # a callback writes to a pipe; a gone peer is already handled
                pass
            finally:
                with self._cond:
                    self.pending -= 1
                    self._cond.notify_all()

    def drain(self, timeout: float) -> None:
        """Wait until everything scheduled ran (a stream ended: deliver what is delayed)."""
        with self._cond:
            self._cond.wait_for(lambda: self.pending == 0, timeout=timeout)


class FaultDecider(Protocol):
    """What the relay needs of :class:`mcp_proxy.faults.FaultEngine`."""

    def decide(self, direction: str, raw: bytes) -> Any: ...


class Holder(Protocol):
    """What the relay needs of :class:`mcp_proxy.intercept.desk.InterceptDesk`: hold a message
    until a person decides (blocks the calling pump only), return the verdict."""

    def hold(
        self,
        session_id: str,
        direction: str,
        raw: bytes,
        decision: Any,
        gone: Callable[[], bool] | None = None,
    ) -> Any: ...

    def close(self) -> None: ...


class FaultPumps:
    """Both message pumps of one relay run, and the state the faults share between them."""

    def __init__(
        self,
        relay: StdioRelay,
        engine: FaultDecider,
        server_stdin: int,
        holder: Holder | None = None,
    ) -> None:
        self.relay = relay
        self.engine = engine
        #: Intercept: where a message an ``intercept`` rule matched waits for a person.
        self.holder = holder
        self.server_stdin = server_stdin
        self._to_host = threading.Lock()  # the host's stdout is written by both pumps
        self._to_server = threading.Lock()  # so is the server's stdin (answers to its requests)
        self._stdin_closed = False
        self._cut = False  # disconnect close-stdin: nothing reaches the host any more
        #: reorder: the frame held per direction, and a token telling its time-out apart
        self._held: dict[Direction, tuple[bytes, object]] = {}
        self._held_lock = threading.Lock()
        self._later = Later()  # delayed frames (drained at the end of a stream)
        self._timeouts = Later()  # reorder time-outs (never waited for)
        self._warned: set[str] = set()
        #: The signal a ``disconnect mode=kill`` sent (the server's death is ours, not a crash).
        self.killed_with: int | None = None

    # ------------------------------------------------------------------ wire
    def _send(self, direction: Direction, data: bytes) -> None:
        """Write ``data`` to the peer ``direction`` leads to; a gone peer is remembered."""
        relay = self.relay
        if direction is Direction.C2S:
            with self._to_server:
                if self._stdin_closed or relay.stdin_broken:
                    return
                try:
                    write_all(self.server_stdin, data)
                except OSError:
                    relay.stdin_broken = True
            return
        with self._to_host:
            if self._cut or relay.host_gone:
                return
            try:
                write_all(relay.stdout_fd, data)
            except OSError:
                relay.host_gone = True

    def _record(self, direction: Direction, data: bytes, mono: int, wall: float) -> None:
        self.relay.tee(direction, Channel.STDIO, data, mono, wall)

    def _inject(self, direction: Direction, data: bytes) -> None:
        """Record bytes mcptape put on the wire in a peer's place."""
        relay = self.relay
        if relay.recorder is not None and relay.session_id is not None:
            frame = Frame(direction, Channel.INJECT, data, time.monotonic_ns(), time.time())
            relay.recorder.put(relay.session_id, frame)

    def _finding(self, decision: Any, /, **detail: Any) -> None:
        relay = self.relay
        if relay.recorder is None or relay.session_id is None:
            return
        fields = decision.finding(detail.get("decision"), detail.get("by"))
        # The findings table keeps ``detail`` as text: JSON, as the analysis reads it back.
        fields["detail"] = json.dumps({**fields.get("detail", {}), **detail}, default=str)
        relay.recorder.add_finding(relay.session_id, **fields)

    def _warn(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            with contextlib.suppress(OSError):
                os.write(self.relay.stderr_fd, f"mcptape: {message}\n".encode())

    # ------------------------------------------------------------------ pumps
    def pump(self, direction: Direction, read_fd: int) -> None:
        """Read ``read_fd`` to its end, one line (one JSON-RPC message) at a time."""
        buf = bytearray()
        scan = 0
        while True:
            try:
                chunk = os.read(read_fd, 1 << 16)
                mono, wall = time.monotonic_ns(), time.time()
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            start = 0
            while (nl := buf.find(b"\n", scan)) >= 0:
                self._message(direction, bytes(buf[start : nl + 1]), mono, wall)
                start = scan = nl + 1
            del buf[:start]
            scan = len(buf)
        if buf:  # an unterminated last line: nothing to match, pass it on as it is
            self._pass(direction, bytes(buf), time.monotonic_ns(), time.time())
        self.finish(direction)

    def finish(self, direction: Direction) -> None:
        """The stream ended: deliver what is still held or delayed in this direction."""
        self._flush_held(direction)
        self._later.drain(timeout=30)

    def _pass(self, direction: Direction, line: bytes, mono: int, wall: float) -> None:
        """Forward unchanged, then record (the relay's order: forwarding first)."""
        if direction is Direction.C2S:
            with self.relay.handover:
                self._send(direction, line)
                self._record(direction, line, mono, wall)
        else:
            self._send(direction, line)
            self._record(direction, line, mono, wall)
        self._flush_held(direction)

    def _message(self, direction: Direction, line: bytes, mono: int, wall: float) -> None:
        try:
            decision = self.engine.decide(direction.value, line)
        except Exception as exc:  # the engine never raises; if it did, the wire must not stop
            self._warn(f"fault engine failed ({exc!r}); forwarding unchanged")
            decision = None
        if decision is None:
            self._pass(direction, line, mono, wall)
            return
        handler = getattr(self, "_do_" + decision.action.replace("-", "_"), None)
        if handler is None:  # e.g. an ``http`` rule edited into a rules file while running
            self._warn(f"{decision.rule.describe()!r} cannot be carried out on stdio; ignored")
        if handler is None or not handler(decision, direction, line, mono, wall):
            self._pass(direction, line, mono, wall)

    # ------------------------------------------------------------------ actions
    # Each returns True when it took care of the frame (forwarded, recorded, found), False to
    # have it forwarded unchanged (the rule cannot apply to this frame on stdio).

    def _do_delay(self, d: Any, direction: Direction, line: bytes, mono: int, wall: float) -> bool:
        seconds = d.delay_seconds()
        self._record(direction, line, mono, wall)
        self._finding(d, delay_ms=round(seconds * 1000, 3))
        self._later.at(seconds, lambda: self._send(direction, line))
        return True

    def _do_throttle(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        bps = max(1, int(d.settings.get("bps") or 1))
        step = max(1, bps // SLICES)
        began = time.monotonic()
        for at in range(0, len(line), step):
            self._send(direction, line[at : at + step])
            due = began + (at + step) / bps
            pause = due - time.monotonic()
            if pause > 0 and at + step < len(line):
                time.sleep(pause)
        self._record(direction, line, mono, wall)
        self._finding(d, bps=bps, bytes=len(line))
        return True

    def _do_drop(self, d: Any, direction: Direction, line: bytes, mono: int, wall: float) -> bool:
        self._record(direction, line, mono, wall)
        self._finding(d)
        return True

    def _do_error(self, d: Any, direction: Direction, line: bytes, mono: int, wall: float) -> bool:
        answer = d.replacement(line)
        if answer is None:
            return False
        # A request is answered back to its sender; a response is replaced on its way.
        to = _OPPOSITE[direction] if d.facts.kind == "request" else direction
        self._send(to, answer)
        self._record(direction, line, mono, wall)
        self._inject(to, answer)
        self._finding(d)
        return True

    _do_tool_error = _do_error

    def _do_corrupt(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        bad = d.corrupted(line)
        self._send(direction, bad)
        self._record(direction, line, mono, wall)
        self._inject(direction, bad)
        self._finding(d)
        return True

    def _do_duplicate(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        self._send(direction, line)
        self._send(direction, line)
        self._record(direction, line, mono, wall)
        self._inject(direction, line)
        self._finding(d)
        return True

    def _do_reorder(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        with self._held_lock:
            if direction in self._held:
                return False  # one frame held at a time: this one passes (and releases it)
            wait = float(d.settings.get("wait") or REORDER_WAIT * 1000) / 1000
            token = object()
            self._held[direction] = (line, token)
        self._record(direction, line, mono, wall)
        self._finding(d)
        self._timeouts.at(wait, lambda: self._flush_held(direction, token))
        return True

    def _flush_held(self, direction: Direction, token: object | None = None) -> None:
        """Deliver the frame a reorder holds (after the frame it swapped with, or on its
        time-out: ``token`` names the hold a time-out belongs to)."""
        with self._held_lock:
            held = self._held.get(direction)
            if held is None or (token is not None and held[1] is not token):
                return
            del self._held[direction]
        line, _ = held
        self._send(direction, line)
        self._inject(direction, line)

    def _do_intercept(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        """Hold the frame until a person decides (docs/intercept.md). This pump waits, so the
        frames behind it in this direction wait too (order kept); the other pump flows."""
        if self.holder is None:
            return False
        relay = self.relay
        self._record(direction, line, mono, wall)  # the frame as the peer sent it, when read
        verdict = self.holder.hold(
            relay.session_id or "", direction.value, line, d, gone=self.host_gone
        )
        end = line[len(line.rstrip(b"\r\n")) :] or b"\n"
        sent_to: Direction | None = direction
        if verdict.decision == "edit":
            self._send(direction, verdict.payload + end)
            self._inject(direction, verdict.payload + end)
        elif verdict.decision == "answer":
            sent_to = _OPPOSITE[direction]  # back to the request's sender
            self._send(sent_to, verdict.payload + end)
            self._inject(sent_to, verdict.payload + end)
        elif verdict.decision == "drop":
            sent_to = None
        else:  # forward, timeout, abandoned, too_large: the frame as it came
            self._send(direction, line)
        self._finding(
            d,
            intercept=verdict.id,
            decision=verdict.decision,
            by=verdict.by,
            sent=None if sent_to is None else sent_to.value,
        )
        return True

    def host_gone(self) -> bool:
        """The host closed its end of a pipe: its stdin (all writers gone: ``POLLHUP``) or its
        stdout (the reader gone: ``POLLERR``). Looked at while a message is held, so that a
        host that leaves does not leave the relay holding for ever."""
        relay = self.relay
        if relay.host_gone or not hasattr(select, "poll"):  # (no poll on Windows)
            return relay.host_gone
        poller = select.poll()
        poller.register(relay.stdin_fd, select.POLLHUP)
        poller.register(relay.stdout_fd, select.POLLERR)
        try:
            ready = poller.poll(0)
        except OSError:
            return False
        bad = select.POLLHUP | select.POLLERR | select.POLLNVAL
        return any(events & bad for _fd, events in ready)

    def _do_disconnect(
        self, d: Any, direction: Direction, line: bytes, mono: int, wall: float
    ) -> bool:
        mode = d.settings.get("mode")
        if mode in _HTTP_ONLY_MODES:
            self._warn(f"{d.rule.describe()!r} needs an HTTP transport; ignored on stdio")
            return False
        self._record(direction, line, mono, wall)  # the frame never arrives
        if mode == "kill":
            # (Windows has no SIGKILL, SIGHUP or SIGQUIT: TERM, which terminates there, stands in)
            signum = int(
                getattr(signal, "SIG" + str(d.settings.get("signal", "TERM")), signal.SIGTERM)
            )
            self._finding(d, signal=signal.Signals(signum).name)
            proc = self.relay.proc
            if proc is not None and proc.poll() is None:
                self.killed_with = signum
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)
            return True
        self._finding(d)
        self.cut()
        return True

    def cut(self) -> None:
        """Close the server's stdin and the host's stdout: each side sees its peer go."""
        with self._to_server:
            if not self._stdin_closed:
                self._stdin_closed = True
                with contextlib.suppress(OSError):
                    os.close(self.server_stdin)
        with self._to_host:
            self._cut = True
            self.relay.release_stdout()

    def close_server_stdin(self) -> None:
        """Host EOF: close the server's stdin (once; a cut may have closed it already)."""
        with self._to_server:
            if not self._stdin_closed:
                self._stdin_closed = True
                with contextlib.suppress(OSError):
                    os.close(self.server_stdin)


__all__ = ["FaultDecider", "FaultPumps", "Holder"]
