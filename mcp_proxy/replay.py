"""Replay: re-send a recorded conversation to a live server, record it, diff it.

``mcptape replay SOURCE -- COMMAND…`` plays the host: it sends the recorded host→server frames
in their order, waits where the host waited (a frame recorded after some responses is sent only
after the live server has given those responses), answers the server's own requests (sampling,
elicitation, roots) with the answers the recording holds, and records everything through the
same relay ``mcptape record`` uses — so the replay is a normal session, linked to the original
in ``meta["replay_of"]``. Then it diffs the two conversations.

``mcptape replay SOURCE --upstream URL`` does the same against a Streamable HTTP server: the
messages are POSTed as the SDK client sends them (live ``Mcp-Session-Id``, negotiated
``MCP-Protocol-Version``, the 2026-07-28 era's ``Mcp-Method``/``Mcp-Name`` headers), JSON or SSE
answers are read, and the traffic passes through a ``mcptape record --upstream`` child, so the
real HTTP relay records the replay.

What cannot be re-sent verbatim is rewritten, and only that:
- a response to a server request gets the live request's id (server ids are the server's);
- an MRTR retry's ``requestState`` is the live server's sealed state, not the recorded one
  (the SDK seals it with a per-process key; the recorded value would be rejected).

The plan (what to send, what to wait for) is computed by :func:`plan`, a pure function; the I/O
loop only follows it, with a timeout on every wait so that a server that stops answering is a
reported difference, never a hang.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.diff import DiffResult, canonical, diff_sessions
from mcp_proxy.errors import UserError
from mcp_proxy.frames import id_key, parse_json
from mcp_proxy.framing import LineFramer
from mcp_proxy.recording.database import load_sessions
from mcp_proxy.recording.model import Recording, SessionRecording, frame_messages

DEFAULT_TIMEOUT = 15.0


# ============================================================================ the plan (pure)


@dataclass
class Action:
    """One thing the replaying host does, in order.

    ``send``: write ``raw`` (or ``message`` re-serialised when it must be rewritten) after the
    live responses to ``wait_for`` (recorded c2s request ids) have arrived.
    ``answer``: wait for the live server's next ``method`` request, then send ``message`` (the
    recorded answer) with the live id.
    """

    kind: str  # send | answer
    raw: bytes
    message: dict[str, Any] | None
    seq: int
    ts: float
    wait_for: list[str] = field(default_factory=list)
    method: str | None = None  # answer: the server request's method
    request_state: str | None = None  # send: the recorded requestState to replace


def _request_state(msg: dict[str, Any]) -> str | None:
    params = msg.get("params")
    value = params.get("requestState") if isinstance(params, dict) else None
    return value if isinstance(value, str) else None


def plan(session: SessionRecording) -> list[Action]:
    """What to send and what to wait for, from the recorded frames (pure).

    A host frame waits for every host request whose response the recording shows *before* that
    frame: that is the causality the host obeyed (it sent ``tools/call`` after it read the
    ``tools/list`` result), and all a replay may rely on.
    """
    actions: list[Action] = []
    answered: list[str] = []  # c2s request ids answered so far and not yet waited for
    s2c_methods: dict[str, str] = {}  # s2c request id → method
    for f, msg in frame_messages(session):
        if not isinstance(msg, dict):
            if f["direction"] == "c2s":
                actions.append(Action("send", bytes(f["raw"]), None, f["seq"], f["ts"], answered))
                answered = []
            continue
        if f["direction"] == "s2c":
            if "method" in msg and msg.get("id") is not None:
                s2c_methods[id_key(msg["id"]) or ""] = str(msg["method"])
            elif "method" not in msg and msg.get("id") is not None:
                answered.append(id_key(msg["id"]) or "")
            continue
        # host → server
        if "method" not in msg and msg.get("id") is not None:  # answer to a server request
            method = s2c_methods.get(id_key(msg["id"]) or "")
            actions.append(
                Action("answer", bytes(f["raw"]), msg, f["seq"], f["ts"], answered, method=method)
            )
        else:
            actions.append(
                Action(
                    "send",
                    bytes(f["raw"]),
                    msg,
                    f["seq"],
                    f["ts"],
                    answered,
                    request_state=_request_state(msg),
                )
            )
        answered = []
    return actions


def outstanding_requests(session: SessionRecording) -> list[str]:
    """Host request ids the recording shows answered (a replay waits for them before EOF)."""
    out = []
    for f, msg in frame_messages(session):
        if f["direction"] == "s2c" and isinstance(msg, dict) and "method" not in msg:
            if msg.get("id") is not None:
                out.append(id_key(msg["id"]) or "")
    return out


def _with_id(msg: dict[str, Any], live_id: Any) -> bytes:
    return _compact({**msg, "id": live_id})


def _compact(msg: Any) -> bytes:
    return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


# ============================================================================ the live side


@dataclass
class ReplayResult:
    """What a replay did: the new session, the diff against the original, what went wrong."""

    session_id: str | None
    original: SessionRecording
    replayed: SessionRecording | None
    diff: DiffResult | None
    notes: list[str] = field(default_factory=list)
    server_exit: int | None = None

    @property
    def equal(self) -> bool:
        return self.diff is not None and self.diff.equal and not self.notes

    def to_json(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "session": self.session_id,
            "original": self.original.id,
            "notes": self.notes,
            "server_exit": self.server_exit,
            "diff": self.diff.to_json() if self.diff else None,
        }


class _Live:
    """The server's side of the pipe, read by a thread into a queue of parsed messages."""

    def __init__(self, read_fd: int | None) -> None:
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
                msg = parse_json(line)
                if isinstance(msg, dict):
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


def _link_session(db_url: str, session_id: str, link: dict[str, Any]) -> None:
    """Merge ``meta["replay_of"]`` into the new session (after the recorder wrote its meta)."""
    import sqlalchemy as sa

    from mcp_proxy.store import writes
    from mcp_proxy.store.schema import sessions

    engine = writes.open_for_writing(db_url)
    try:
        with engine.begin() as conn:
            meta = conn.execute(
                sa.select(sessions.c.meta).where(sessions.c.id == session_id)
            ).scalar()
            merged = {**(meta or {}), "replay_of": link}
            conn.execute(sessions.update().where(sessions.c.id == session_id).values(meta=merged))
    finally:
        engine.dispose()


def _drive(
    actions: list[Action],
    expected: list[str],
    send: Callable[[bytes], None],
    live: _Live,
    *,
    states: dict[str, str],
    timeout: float,
    pacing: str,
    notes: list[str],
) -> None:
    """Follow the plan against the live server (blocking; the relay runs in its own thread)."""
    state_map: dict[str, str] = {}  # recorded requestState → live requestState
    recorded_results = dict(states)  # c2s request id → the requestState its result carried
    start = time.monotonic()
    t0 = actions[0].ts if actions else 0.0
    sent_ids: set[str] = set()

    def learn_states() -> None:
        for rid, rec_state in list(recorded_results.items()):
            live_msg = live.responses.get(rid)
            if live_msg is None:
                continue
            res = live_msg.get("result")
            live_state = res.get("requestState") if isinstance(res, dict) else None
            if isinstance(live_state, str):
                state_map[rec_state] = live_state
            del recorded_results[rid]

    def wait(pred: Any, what: str) -> bool:
        deadline = time.monotonic() + timeout
        while not pred():
            if live.closed or time.monotonic() >= deadline:
                why = (
                    "the server closed its output" if live.closed else f"no answer in {timeout:g} s"
                )
                notes.append(f"{what}: {why}")
                return False
            live.pump(min(deadline, time.monotonic() + 0.25))
        return True

    for act in actions:
        if pacing == "recorded":
            delay = (act.ts - t0) - (time.monotonic() - start)
            if delay > 0:
                time.sleep(min(delay, 60.0))
        missing = [rid for rid in act.wait_for if rid in sent_ids]
        if missing and not live.closed:
            wait(
                lambda m=missing: all(r in live.responses for r in m),  # type: ignore[misc]
                f"waiting for the response to request id {', '.join(missing)}",
            )
        live.pump(time.monotonic())
        learn_states()
        if act.kind == "answer":
            ok = not live.closed and wait(
                lambda a=act: any(r.get("method") == a.method for r in live.server_requests),  # type: ignore[misc]
                f"waiting for the server's {act.method} request",
            )
            if not ok:
                continue
            req = next(r for r in live.server_requests if r.get("method") == act.method)
            live.server_requests.remove(req)
            data = _with_id(act.message or {}, req["id"])
        else:
            data = act.raw
            msg = act.message
            if isinstance(msg, dict) and act.request_state and act.request_state in state_map:
                params = dict(msg.get("params") or {})
                params["requestState"] = state_map[act.request_state]
                data = _compact({**msg, "params": params})
            if isinstance(msg, dict) and "method" in msg and msg.get("id") is not None:
                sent_ids.add(id_key(msg["id"]) or "")
        if live.closed:
            notes.append(f"the server exited before frame #{act.seq} could be sent")
            return
        try:
            send(data)
        except OSError:
            notes.append(f"the server stopped reading before frame #{act.seq}")
            return
    pending = [rid for rid in expected if rid in sent_ids]
    wait(lambda: all(r in live.responses for r in pending), "waiting for the last responses")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def replay_stdio(
    session: SessionRecording,
    argv: list[str],
    db_url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    pacing: str = "fast",
    name: str | None = None,
    origin: str = "",
) -> ReplayResult:
    """Replay one recorded session against ``argv`` (a stdio server), record it, diff it."""
    from mcp_proxy.recorder import Recorder
    from mcp_proxy.relay.stdio import StdioRelay

    if not argv:
        raise UserError("no server command given (usage: mcptape replay SOURCE -- COMMAND…)")
    actions = plan(session)
    if not actions:
        raise UserError(f"session {session.label} has no host→server traffic to replay")
    expected = outstanding_requests(session)
    c2s_r, c2s_w = os.pipe()
    s2c_r, s2c_w = os.pipe()
    devnull = os.open(os.devnull, os.O_WRONLY)
    recorder = Recorder(db_url, flush_interval=0.02)
    procs: list[subprocess.Popen[bytes]] = []
    relay = StdioRelay(
        argv,
        recorder=recorder,
        name=name or f"{session.session.get('name') or session.id[:8]} replay",
        stdin_fd=c2s_r,
        stdout_fd=s2c_w,
        stderr_fd=devnull,
        on_start=procs.append,
    )
    recorder.start()
    outcome: dict[str, Any] = {}

    def run_relay() -> None:
        try:
            outcome["result"] = relay.run()
        except BaseException as exc:  # reported below, in the calling thread
            outcome["error"] = exc
        finally:
            with contextlib.suppress(OSError):
                os.close(s2c_w)

    thread = threading.Thread(target=run_relay, name="replay-relay", daemon=True)
    thread.start()
    notes: list[str] = []
    live = _Live(s2c_r)
    try:
        # Let a spawn failure surface before anything is written.
        deadline = time.monotonic() + 10
        while not procs and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if "error" in outcome:
            raise outcome["error"]
        _drive(
            actions,
            expected,
            lambda data: _write_all(c2s_w, data),
            live,
            states=dict(recorded_states(session)),
            timeout=timeout,
            pacing=pacing,
            notes=notes,
        )
    finally:
        with contextlib.suppress(OSError):
            os.close(c2s_w)  # EOF: the server finishes and exits, as under a real host
        thread.join(5.0)
        if thread.is_alive() and procs:
            notes.append("the server did not exit within 5 s of end of input; stopped it")
            with contextlib.suppress(ProcessLookupError):
                procs[0].terminate()
            thread.join(5.0)
            if thread.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    procs[0].kill()
                thread.join(5.0)
        recorder.close()
        os.close(devnull)
        with contextlib.suppress(OSError):
            os.close(s2c_r)
    if "error" in outcome:
        raise outcome["error"]
    result = outcome.get("result")
    sid = relay.session_id
    if sid is None:
        raise UserError("the replay was not recorded (the relay did not start a session)")
    return _linked_result(db_url, sid, session, origin, notes, result.exit_code if result else None)


def replay_http(
    session: SessionRecording,
    url: str,
    db_url: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    pacing: str = "fast",
    name: str | None = None,
    origin: str = "",
) -> ReplayResult:
    """Replay one recorded session against a Streamable HTTP server, record it, diff it.

    The replay's traffic goes through a real ``mcptape record --upstream URL --port 0`` child
    (the same relay a user runs), so the new session is recorded exactly as any HTTP session is;
    this function plays the SDK client's part over plain HTTP (see :class:`_HttpHost`).
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--upstream {url}: not an http(s) URL")
    actions = plan(session)
    if not actions:
        raise UserError(f"session {session.label} has no host→server traffic to replay")
    expected = outstanding_requests(session)
    before = {sid for sid, _ in _session_ids(db_url)}
    new_name = name or f"{session.session.get('name') or session.id[:8]} replay"
    relay = _RelayChild(url, db_url, new_name)
    notes: list[str] = []
    try:
        local = relay.start(timeout=max(timeout, 10.0))
        live = _Live(None)
        host = _HttpHost(local, session, live, timeout=timeout)
        _drive(
            actions,
            expected,
            host.send,
            live,
            states=dict(recorded_states(session)),
            timeout=timeout,
            pacing=pacing,
            notes=notes,
        )
        host.finish()
        notes.extend(host.problems)
    finally:
        relay.stop()
    # The relay's session: new in the database and named as asked (another recorder may be
    # writing to the same database meanwhile).
    new = [sid for sid, sname in _session_ids(db_url) if sid not in before and sname == new_name]
    if not new:
        raise UserError(
            "the replay was not recorded (the relay recorded no session)"
            + (f": {notes[0]}" if notes else "")
        )
    sid = new[0]
    return _linked_result(db_url, sid, session, origin, notes, None)


def _linked_result(
    db_url: str,
    sid: str,
    session: SessionRecording,
    origin: str,
    notes: list[str],
    server_exit: int | None,
) -> ReplayResult:
    """Link the replay's session to what it replayed, load it, and diff the two."""
    _link_session(
        db_url,
        sid,
        {"session_id": session.id, "origin": origin, "name": session.session.get("name")},
    )
    replayed = _load(db_url, sid)
    diff = diff_sessions(
        session, replayed, a_label=f"recorded {session.label}", b_label=f"replay {replayed.label}"
    )
    return ReplayResult(sid, session, replayed, diff, notes, server_exit=server_exit)


def _session_ids(db_url: str) -> list[tuple[str, str | None]]:
    """(id, name) of the sessions in the database, oldest first."""
    import sqlalchemy as sa

    from mcp_proxy.store import writes
    from mcp_proxy.store.schema import sessions

    engine = writes.open_for_writing(db_url)
    try:
        with engine.begin() as conn:
            rows = conn.execute(
                sa.select(sessions.c.id, sessions.c.name).order_by(
                    sessions.c.started_at, sessions.c.id
                )
            ).all()
    finally:
        engine.dispose()
    return [(str(r[0]), r[1]) for r in rows]


class _RelayChild:
    """``mcptape record --upstream URL --port 0`` as a child process, stopped by its pid."""

    def __init__(self, upstream: str, db_url: str, name: str) -> None:
        import sys

        self.upstream = upstream
        self.argv = [
            sys.executable,
            "-m",
            "mcp_proxy",
            "record",
            "--upstream",
            upstream,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--db",
            db_url,
            "--name",
            name,
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self._thread: threading.Thread | None = None

    def start(self, timeout: float) -> str:
        """Start the relay; the local URL that reaches ``upstream`` through it."""
        from urllib.parse import urlsplit, urlunsplit

        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        found: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            assert self.proc is not None and self.proc.stderr is not None
            for raw in iter(self.proc.stderr.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                self.lines.append(line)
                if not ready.is_set() and line.startswith("mcptape: relaying "):
                    found.append(line.split()[2])
                    ready.set()
            ready.set()

        self._thread = threading.Thread(target=drain, name="replay-relay-stderr", daemon=True)
        self._thread.start()
        ready.wait(timeout)
        if not found:
            tail = next((ln for ln in reversed(self.lines) if ln.strip()), "no output")
            raise UserError(f"the recording relay did not start: {tail}")
        local = urlsplit(found[0])
        up = urlsplit(self.upstream)
        return urlunsplit(("http", local.netloc, up.path or "/", up.query, ""))

    def stop(self) -> None:
        """SIGINT (the relay drains its recording on it), then terminate/kill by pid."""
        import signal

        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        if self._thread is not None:
            self._thread.join(5)
        if proc.stderr is not None:
            proc.stderr.close()


_COPIED_HEADERS = ("mcp-protocol-version", "mcp-method", "mcp-name")


class _HttpHost:
    """Plays the SDK client over Streamable HTTP: one POST per message, JSON or SSE back.

    Headers are what the SDK's client sends: ``Accept``/``Content-Type``, the live
    ``Mcp-Session-Id`` once ``initialize`` returned one, ``MCP-Protocol-Version`` once
    negotiated (or as recorded), and for the 2026-07-28 era the per-message ``Mcp-Method``,
    ``Mcp-Name`` and ``Mcp-Param-*`` headers as the recorded exchange carried them (derived from
    the message when the recording came over stdio and has no headers).
    """

    def __init__(self, url: str, session: SessionRecording, live: _Live, *, timeout: float) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.live = live
        self.timeout = timeout
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self.problems: list[str] = []
        self.modern = str(session.session.get("era") or "") not in ("", "initialize", "legacy")
        self.recorded_version = session.session.get("protocol_version")
        self._threads: list[threading.Thread] = []
        self._get_conn: Any = None  # http.client.HTTPConnection of the GET stream
        # recorded raw frame bytes → the MCP headers its exchange's request carried
        self._headers: dict[bytes, dict[str, str]] = {}
        by_ex = {ex["id"]: ex for ex in session.exchanges}
        for f in session.frames:
            ex = by_ex.get(f.get("http_exchange_id"))
            if ex is None or f["direction"] != "c2s":
                continue
            pairs = ex.get("request_headers") or []
            if isinstance(pairs, dict):
                pairs = list(pairs.items())
            kept = {
                str(k).lower(): str(v)
                for k, v in (p for p in pairs if isinstance(p, (list, tuple)) and len(p) == 2)
                if str(k).lower() in _COPIED_HEADERS or str(k).lower().startswith("mcp-param-")
            }
            self._headers[bytes(f["raw"]).strip()] = kept

    def _headers_for(self, data: bytes, msg: Any) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        recorded = self._headers.get(data.strip())
        method = msg.get("method") if isinstance(msg, dict) else None
        if self.session_id:
            headers["Mcp-Session-Id"] = self.session_id
        if method == "initialize":
            return headers
        if recorded is not None and self.modern:
            headers.update(recorded)
        elif recorded is not None and "mcp-protocol-version" in recorded:
            headers["MCP-Protocol-Version"] = (
                self.protocol_version or recorded["mcp-protocol-version"]
            )
        elif self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        elif self.modern and isinstance(self.recorded_version, str):
            headers["MCP-Protocol-Version"] = self.recorded_version
        if self.modern and recorded is None and isinstance(method, str):
            from mcp.shared.inbound import NAME_BEARING_METHODS

            headers["Mcp-Method"] = method
            key = NAME_BEARING_METHODS.get(method)
            params = msg.get("params") if isinstance(msg, dict) else None
            if key and isinstance(params, dict) and isinstance(params.get(key), str):
                headers["Mcp-Name"] = params[key]
        return headers

    def send(self, data: bytes) -> None:
        """POST one message; requests are read in a thread (their answer may take a while)."""
        msg = parse_json(data.strip())
        headers = self._headers_for(data, msg)
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            self._post(data.strip(), headers, msg)  # the session id is needed by what follows
            return
        if isinstance(msg, dict) and msg.get("method") == "notifications/initialized":
            self._start_get_stream()  # as the SDK client does: server requests may come there
        started = threading.Event()
        t = threading.Thread(
            target=self._post,
            args=(data.strip(), headers, msg, started),
            name="replay-post",
            daemon=True,
        )
        t.start()
        self._threads.append(t)
        # Keep the recorded order on the wire: the next message goes out once this one's
        # response has begun (an SSE stream starts at once; a JSON answer may take longer).
        started.wait(min(self.timeout, 2.0))

    def _post(
        self,
        body: bytes,
        headers: dict[str, str],
        msg: Any,
        started: threading.Event | None = None,
    ) -> None:
        import http.client

        from mcp_proxy.framing import SSEParser

        what = msg.get("method") if isinstance(msg, dict) else None
        what = what or (f"response to id {msg.get('id')}" if isinstance(msg, dict) else "frame")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", self.path, body=body, headers=headers)
            try:
                resp = conn.getresponse()
            finally:
                if started is not None:
                    started.set()
            if what == "initialize":
                self.session_id = resp.getheader("mcp-session-id") or self.session_id
            ctype = (resp.getheader("content-type") or "").split(";")[0].strip().lower()
            if resp.status >= 400:
                text = resp.read(2000).decode("utf-8", "replace").strip()
                err = parse_json(text.encode())
                if isinstance(err, dict) and "jsonrpc" in err and err.get("id") is not None:
                    self._deliver(err)
                    return
                self.problems.append(f"{what}: HTTP {resp.status} {text[:200]}")
                if isinstance(msg, dict) and "method" in msg and msg.get("id") is not None:
                    # Nothing will answer this request: unblock what waits for it (the
                    # recorded replay shows the HTTP error; this stand-in is not recorded).
                    stand_in = {"code": -32603, "message": f"HTTP {resp.status}"}
                    self.live.q.put({"jsonrpc": "2.0", "id": msg["id"], "error": stand_in})
                return
            if ctype == "text/event-stream":
                parser = SSEParser()
                while True:
                    chunk = resp.read1(1 << 16)
                    if not chunk:
                        break
                    for ev in parser.feed(chunk):
                        self._deliver_raw(ev.data)
                last = parser.flush()
                if last is not None:
                    self._deliver_raw(last.data)
            else:
                self._deliver_raw(resp.read())
        except Exception as exc:  # a reported problem, never a traceback from a thread
            self.problems.append(f"{what}: {type(exc).__name__}: {exc}")
        finally:
            conn.close()

    def _deliver_raw(self, data: bytes) -> None:
        if not data.strip():
            return
        parsed = parse_json(data)
        for m in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(m, dict):
                self._deliver(m)

    def _deliver(self, msg: dict[str, Any]) -> None:
        res = msg.get("result")
        if isinstance(res, dict) and isinstance(res.get("protocolVersion"), str):
            self.protocol_version = res["protocolVersion"]
        self.live.q.put(msg)

    def _start_get_stream(self) -> None:
        """The standalone GET SSE stream (initialize era, with a session), read in a thread."""
        import http.client

        if not self.session_id or self._get_conn is not None:
            return
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": self.session_id}
        if self.protocol_version:
            headers["MCP-Protocol-Version"] = self.protocol_version
        conn = http.client.HTTPConnection(self.host, self.port, timeout=None)
        self._get_conn = conn

        def read() -> None:
            from mcp_proxy.framing import SSEParser

            try:
                conn.request("GET", self.path, headers=headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    return
                parser = SSEParser()
                while True:
                    chunk = resp.read1(1 << 16)
                    if not chunk:
                        break
                    for ev in parser.feed(chunk):
                        self._deliver_raw(ev.data)
            except Exception:  # closed by finish(), or the server has no GET stream
                return

        threading.Thread(target=read, name="replay-get", daemon=True).start()

    def finish(self) -> None:
        """Wait for the POSTs still reading, then end the session as the SDK does (DELETE)."""
        import http.client

        deadline = time.monotonic() + self.timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self.problems.append(f"a response stream was still open after {self.timeout:g} s")
        if self._get_conn is not None:
            import socket

            sock = self._get_conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._get_conn.close()
        if not self.session_id:
            return
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            headers = {"Mcp-Session-Id": self.session_id}
            if self.protocol_version:
                headers["MCP-Protocol-Version"] = self.protocol_version
            conn.request("DELETE", self.path, headers=headers)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()


def _load(db_url: str, session_id: str) -> SessionRecording:
    import asyncio

    from mcp_proxy.store.queries import Store

    async def go() -> Recording:
        store = await Store.open(db_url)
        try:
            return await load_sessions(store, [session_id])
        finally:
            await store.close()

    return asyncio.run(go()).sessions[0]


def recorded_states(session: SessionRecording) -> Iterator[tuple[str, str]]:
    """(request id, requestState) for every recorded result that carried one (MRTR rounds)."""
    for f, msg in frame_messages(session):
        if (
            f["direction"] == "s2c"
            and isinstance(msg, dict)
            and isinstance(msg.get("result"), dict)
        ):
            state = msg["result"].get("requestState")
            if isinstance(state, str) and msg.get("id") is not None:
                yield id_key(msg["id"]) or "", state


__all__ = ["Action", "ReplayResult", "canonical", "plan", "replay_http", "replay_stdio"]
