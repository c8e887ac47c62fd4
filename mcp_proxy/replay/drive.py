"""Following a replay plan against a live server, whatever the transport.

The transport gives :func:`drive` a ``send(bytes)`` callable and feeds what the server says into
a :class:`Live`; the driver waits where the recorded host waited (with a timeout on every wait,
so a server that stops answering is a reported difference, never a hang), rewrites what cannot be
re-sent verbatim (server-request ids, sealed MRTR ``requestState``), and notes what went wrong.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.diff import DiffResult, diff_sessions
from mcp_proxy.frames import id_key
from mcp_proxy.framing import LineFramer
from mcp_proxy.mcp_client import compact, messages_in
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.replay.plan import Action
from mcp_proxy.replay.tasks import TERMINAL, LiveTasks, TaskPlan

DEFAULT_TIMEOUT = 15.0
#: Extra seconds the first awaited answer may take: the server is starting.
STARTUP_GRACE = 15.0


@dataclass
class ReplayResult:
    """What a replay did: the new session, the diff against the original, what went wrong."""

    session_id: str | None
    original: SessionRecording
    replayed: SessionRecording | None
    diff: DiffResult | None
    notes: list[str] = field(default_factory=list)
    server_exit: int | None = None
    #: Host fields the recording redacted: sent as ``[REDACTED]``, so not reproduced.
    redacted: list[str] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return self.diff is not None and self.diff.equal and not self.notes

    def to_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "session": self.session_id,
            "original": self.original.id,
            "notes": self.notes,
            "redacted": self.redacted,
            "server_exit": self.server_exit,
            "diff": self.diff.to_json() if self.diff else None,
        }


class Live:
    """The server's side: parsed messages arrive in a queue (from a pipe reader or HTTP reads)."""

    def __init__(self, read_fd: int | None = None) -> None:
        self.q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.responses: dict[str, dict[str, Any]] = {}  # c2s request id → live response
        self.server_requests: list[dict[str, Any]] = []  # s2c requests not yet answered
        self.closed = False
        if read_fd is not None:  # stdio; over HTTP the POSTs put what they read into ``q``
            self.fd = read_fd
            threading.Thread(target=self._read, name="replay-read", daemon=True).start()

    def _read(self) -> None:
        framer = LineFramer()
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            for line in framer.feed(chunk):
                for msg in messages_in(line):
                    self.q.put(msg)
        self.q.put(None)

    def pump(self, until: float) -> bool:
        """Take what arrived (waiting until ``until`` for one message); False when closed."""
        timeout = max(0.0, until - time.monotonic())
        try:
            msg = self.q.get(timeout=timeout)
        except queue.Empty:
            return not self.closed
        while True:
            if msg is None:
                self.closed = True
                return False
            if "method" in msg and msg.get("id") is not None:
                self.server_requests.append(msg)
            elif "method" not in msg and msg.get("id") is not None:
                self.responses[id_key(msg["id"]) or ""] = msg
            try:
                msg = self.q.get_nowait()
            except queue.Empty:
                return True


class _Driver:
    """The state of one replay run: what was sent, which sealed states map to which."""

    def __init__(
        self, live: Live, states: dict[str, str], timeout: float, notes: list[str]
    ) -> None:
        self.live = live
        self.timeout = timeout
        self.notes = notes
        self.state_map: dict[str, str] = {}  # recorded requestState → live requestState
        self.pending_states = dict(states)  # c2s request id → the requestState its result had
        self.sent_ids: set[str] = set()
        self.started = False
        self.tasks: LiveTasks | None = None

    def learn_states(self) -> None:
        for rid, rec_state in list(self.pending_states.items()):
            live_msg = self.live.responses.get(rid)
            if live_msg is None:
                continue
            res = live_msg.get("result")
            live_state = res.get("requestState") if isinstance(res, dict) else None
            if isinstance(live_state, str):
                self.state_map[rec_state] = live_state
            del self.pending_states[rid]

    def wait(self, pred: Callable[[], bool], what: str) -> bool:
        # The first answer also waits for the server to start (an SDK server needs ~0.7 s to
        # import, far more on a loaded CI machine): that is not the server being slow to answer.
        grace = STARTUP_GRACE if not self.started else 0.0
        self.started = True
        deadline = time.monotonic() + self.timeout + grace
        while not pred():
            if self.live.closed or time.monotonic() >= deadline:
                why = (
                    "the server closed its output"
                    if self.live.closed
                    else f"no answer in {self.timeout:g} s"
                    + (f" (+{grace:g} s allowed for the server to start)" if grace else "")
                )
                self.notes.append(f"{what}: {why}")
                return False
            self.live.pump(min(deadline, time.monotonic() + 0.25))
        return True

    def responded(self, ids: list[str]) -> Callable[[], bool]:
        return lambda: all(r in self.live.responses for r in ids)

    def data_for(self, act: Action) -> bytes | None:
        """The bytes to send for ``act`` (None: the server request it answers never came)."""
        live = self.live
        if act.kind == "answer":

            def asked() -> bool:
                return any(r.get("method") == act.method for r in live.server_requests)

            if live.closed or not self.wait(
                asked, f"waiting for the server's {act.method} request"
            ):
                return None
            req = next(r for r in live.server_requests if r.get("method") == act.method)
            live.server_requests.remove(req)
            return compact({**(act.message or {}), "id": req["id"]}) + b"\n"
        msg = act.message
        data = act.raw
        if isinstance(msg, dict) and act.request_state and act.request_state in self.state_map:
            params = {
                **(msg.get("params") or {}),
                "requestState": self.state_map[act.request_state],
            }
            msg = {**msg, "params": params}
            data = compact(msg) + b"\n"
        live_task = self.tasks.rewrite(msg) if self.tasks and isinstance(msg, dict) else None
        if live_task is not None:
            data = compact(live_task) + b"\n"
        if isinstance(msg, dict) and "method" in msg and msg.get("id") is not None:
            self.sent_ids.add(id_key(msg["id"]) or "")
        return data

    def poll_task(self, template: dict[str, Any], send: Callable[[bytes], None], want: str) -> None:
        """Poll the live task of ``template`` until its status is ``want`` (or terminal)."""
        assert self.tasks is not None
        params = template.get("params")
        recorded = params.get("taskId") if isinstance(params, dict) else None
        deadline = time.monotonic() + self.timeout
        while not self.live.closed and time.monotonic() < deadline:
            rid, msg = self.tasks.poll(template)
            msg = self.tasks.rewrite(msg) or msg
            self.sent_ids.add(rid)
            send(compact(msg) + b"\n")
            if not self.wait(self.responded([rid]), f"waiting for an extra poll of {recorded}"):
                return
            result = self.live.responses[rid].get("result")
            status = result.get("status") if isinstance(result, dict) else None
            if status == want or status in TERMINAL:
                return
            time.sleep(self.tasks.pause_for(recorded))
        self.notes.append(f"task {recorded}: not {want} after polling for {self.timeout:g} s")

    def task_steps(self, act: Action, send: Callable[[bytes], None], *, after: bool) -> None:
        """Before a ``tasks/update``: wait for the question; after a task's last recorded poll
        that saw it end: poll until the live task ended too (:mod:`.tasks`)."""
        msg = act.message
        if self.tasks is None or not isinstance(msg, dict) or self.live.closed:
            return
        if not after and msg.get("method") == "tasks/update":
            self.poll_task(msg, send, "input_required")
            return
        rid = id_key(msg["id"]) if after and msg.get("id") is not None else None
        recorded = self.tasks.plan.last_polls.get(rid or "")
        if recorded not in TERMINAL or rid is None:
            return
        if not self.wait(self.responded([rid]), f"waiting for the response to request id {rid}"):
            return
        result = self.live.responses[rid].get("result")
        if not (isinstance(result, dict) and result.get("status") in TERMINAL):
            self.poll_task(msg, send, str(recorded))


def drive(
    actions: list[Action],
    expected: list[str],
    send: Callable[[bytes], None],
    live: Live,
    *,
    states: dict[str, str],
    timeout: float,
    pacing: str,
    notes: list[str],
    tasks: TaskPlan | None = None,
) -> None:
    """Follow the plan against the live server (blocking; the transport runs elsewhere)."""
    d = _Driver(live, states, timeout, notes)
    if tasks is not None and not tasks.empty:
        d.tasks = LiveTasks(tasks)
    start = time.monotonic()
    t0 = actions[0].ts if actions else 0.0
    for act in actions:
        if pacing == "recorded":
            delay = (act.ts - t0) - (time.monotonic() - start)
            if delay > 0:
                time.sleep(min(delay, 60.0))
        missing = [rid for rid in act.wait_for if rid in d.sent_ids]
        if missing and not live.closed:
            d.wait(
                d.responded(missing),
                f"waiting for the response to request id {', '.join(missing)}",
            )
        live.pump(time.monotonic())
        d.learn_states()
        if d.tasks is not None:
            d.tasks.learn(live.responses)
        try:
            d.task_steps(act, send, after=False)
        except OSError:
            notes.append(f"the server stopped reading before frame #{act.seq}")
            return
        data = d.data_for(act)
        if data is None:
            continue
        if live.closed:
            notes.append(f"the server exited before frame #{act.seq} could be sent")
            return
        try:
            send(data)
            d.task_steps(act, send, after=True)
        except OSError:
            notes.append(f"the server stopped reading before frame #{act.seq}")
            return
    pending = [rid for rid in expected if rid in d.sent_ids]
    d.wait(d.responded(pending), "waiting for the last responses")


def load_session(db_url: str, session_id: str) -> SessionRecording:
    """One session of the database as a recording (what the diff compares)."""
    from mcp_proxy.recording.database import read_session

    return read_session(db_url, session_id)


def linked_result(
    db_url: str,
    sid: str,
    session: SessionRecording,
    origin: str,
    notes: list[str],
    server_exit: int | None,
) -> ReplayResult:
    """Link the replay's session to what it replayed, load it, and diff the two."""
    from mcp_proxy.replay.plan import redaction_warnings
    from mcp_proxy.store.travel import merge_session_meta

    link = {"session_id": session.id, "origin": origin, "name": session.session.get("name")}
    merge_session_meta(db_url, sid, {"replay_of": link})
    replayed = load_session(db_url, sid)
    diff = diff_sessions(
        session, replayed, a_label=f"recorded {session.label}", b_label=f"replay {replayed.label}"
    )
    result = ReplayResult(sid, session, replayed, diff, notes, server_exit=server_exit)
    result.redacted = redaction_warnings(session)
    return result


__all__ = ["DEFAULT_TIMEOUT", "Live", "ReplayResult", "drive", "linked_result", "load_session"]
