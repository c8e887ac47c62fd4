"""Replay over Streamable HTTP: the replaying host POSTs through a ``mcptape record`` child.

The messages are POSTed as the SDK client sends them (headers by the one rule of
:mod:`mcp_proxy.mcp_client`), JSON or SSE answers are read, and the traffic passes through a
``mcptape record --upstream URL --port 0`` child, so the real HTTP relay records the replay.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import sys
import threading
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcp_proxy.childproc import AnnouncedChild
from mcp_proxy.errors import UserError
from mcp_proxy.frames import id_key
from mcp_proxy.framing import SSEParser
from mcp_proxy.mcp_client import ClientState, messages_in, recorded_request_headers
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.replay.drive import (
    DEFAULT_TIMEOUT,
    STARTUP_GRACE,
    Live,
    ReplayResult,
    drive,
    linked_result,
)
from mcp_proxy.replay.plan import outstanding_requests, plan, recorded_states
from mcp_proxy.replay.tasks import task_plan

RELAY_PREFIX = "mcptape: relaying "
#: How often a stream that ended before its response is resumed (the SDK client's default).
RECONNECTS = 2


def relay_argv(upstream: str, db_url: str, name: str) -> list[str]:
    """``mcptape record --upstream URL --port 0`` with this interpreter."""
    return [
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


def _relayed_url(line: str) -> str | None:
    return line.split()[2] if line.startswith(RELAY_PREFIX) and len(line.split()) > 2 else None


class HttpHost:
    """Plays the SDK client over Streamable HTTP: one POST per message, JSON or SSE back.

    Requests are read in threads (their answer may take a while); the standalone GET stream is
    opened after ``notifications/initialized`` as the SDK client does; ``finish`` ends the
    session with DELETE.
    """

    def __init__(self, url: str, session: SessionRecording, live: Live, *, timeout: float) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.live = live
        self.timeout = timeout
        version = session.session.get("protocol_version")
        self.state = ClientState(
            recorded_version=version if isinstance(version, str) else None,
            recorded=recorded_request_headers(session.frames, session.exchanges),
        )
        self.problems: list[str] = []
        self.answered: set[str] = set()  # request ids whose response arrived
        self._threads: list[threading.Thread] = []
        self._get_conn: http.client.HTTPConnection | None = None
        #: Legacy HTTP+SSE (2024-11-05): the GET ``/sse`` stream names where to POST.
        self.legacy = parts.path.rstrip("/").endswith("/sse")
        self._endpoint = threading.Event()
        self.post_path = self.path

    def send(self, data: bytes) -> None:
        """POST one message; keep the recorded order on the wire."""
        if self.legacy and not self._endpoint.is_set():
            self._open_legacy_stream()
        body = data.strip()
        found = messages_in(body)
        msg: Any = found[0] if len(found) == 1 else None
        headers = self.state.headers_for(msg, body)
        method = msg.get("method") if isinstance(msg, dict) else None
        if method == "initialize":
            self._post(body, headers, msg)  # the session id is needed by what follows
            return
        if method == "notifications/initialized":
            self._start_get_stream()  # as the SDK client does: server requests may come there
        started = threading.Event()
        t = threading.Thread(
            target=self._post, args=(body, headers, msg, started), name="replay-post", daemon=True
        )
        t.start()
        self._threads.append(t)
        # The next message goes out once this one's response has begun (an SSE stream starts
        # at once; a JSON answer may take longer).
        started.wait(min(self.timeout, 2.0))

    def _post(
        self,
        body: bytes,
        headers: dict[str, str],
        msg: Any,
        started: threading.Event | None = None,
    ) -> None:
        what = msg.get("method") if isinstance(msg, dict) else None
        what = what or (f"response to id {msg.get('id')}" if isinstance(msg, dict) else "frame")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", self.post_path, body=body, headers=headers)
            try:
                resp = conn.getresponse()
            finally:
                if started is not None:
                    started.set()
            self.state.learn_headers(dict(resp.getheaders()))
            if resp.status >= 400:
                self._http_error(resp, what, msg)
                return
            last = self._read_body(resp)
            conn.close()
            self._resume(msg, last)
        except Exception as exc:  # a reported problem, never a traceback from a thread
            self.problems.append(f"{what}: {type(exc).__name__}: {exc}")
        finally:
            conn.close()

    def _resume(self, msg: Any, last: str | None) -> None:
        """A request's SSE stream ended before its response: reconnect as the SDK client does.

        ``GET`` with ``Last-Event-ID`` (the last event id the stream carried) resumes it, up to
        :data:`RECONNECTS` times; a recorded reconnect is thereby replayed as a reconnect.
        """
        rid = id_key(msg.get("id")) if isinstance(msg, dict) and "method" in msg else None
        attempts = 0
        while rid is not None and rid not in self.answered and last and attempts < RECONNECTS:
            attempts += 1
            headers = {"Accept": "text/event-stream", "Last-Event-ID": last}
            if self.state.session_id:
                headers["Mcp-Session-Id"] = self.state.session_id
            if self.state.version:
                headers["MCP-Protocol-Version"] = self.state.version
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                conn.request("GET", self.path, headers=headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    self.problems.append(f"resuming after event {last}: HTTP {resp.status}")
                    return
                last = self._read_body(resp, until=rid) or last
            finally:
                conn.close()

    def _http_error(self, resp: http.client.HTTPResponse, what: str, msg: Any) -> None:
        text = resp.read(2000)
        for err in messages_in(text):
            if err.get("id") is not None:
                self._deliver(err)
                return
        self.problems.append(f"{what}: HTTP {resp.status} {text.decode('utf-8', 'replace')[:200]}")
        if isinstance(msg, dict) and "method" in msg and msg.get("id") is not None:
            # Nothing will answer this request: unblock what waits for it (the recorded
            # replay shows the HTTP error; this stand-in is not recorded).
            stand_in = {"code": -32603, "message": f"HTTP {resp.status}"}
            self.live.q.put({"jsonrpc": "2.0", "id": msg["id"], "error": stand_in})

    def _read_body(self, resp: http.client.HTTPResponse, until: str | None = None) -> str | None:
        """Deliver what a response carries; the id of its last SSE event (for resuming).

        With ``until`` (a request id), stop reading once that request's response arrived, as
        the SDK client does: a resumed stream may stay open after it.
        """
        ctype = (resp.getheader("content-type") or "").split(";")[0].strip().lower()
        if ctype != "text/event-stream":
            for m in messages_in(resp.read()):
                self._deliver(m)
            return None
        parser = SSEParser()
        last_id: str | None = None
        while chunk := resp.read1(1 << 16):
            for ev in parser.feed(chunk):
                last_id = ev.id or last_id
                self._event(ev.event, ev.data)
            if until is not None and until in self.answered:
                return last_id
        tail = parser.flush()
        if tail is not None:
            last_id = tail.id or last_id
            self._event(tail.event, tail.data)
        return last_id

    def _event(self, name: str | None, data: bytes) -> None:
        if name == "endpoint":  # legacy: where this session's POSTs go
            target = urlsplit(data.decode("utf-8", "replace").strip())
            self.post_path = target.path + (f"?{target.query}" if target.query else "")
            self._endpoint.set()
            return
        for m in messages_in(data):
            self._deliver(m)

    def _open_legacy_stream(self) -> None:
        """``GET /sse`` (legacy transport): replies arrive there; wait for the endpoint event."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=None)
        self._get_conn = conn

        def read() -> None:
            try:
                conn.request("GET", self.path, headers={"Accept": "text/event-stream"})
                resp = conn.getresponse()
                if resp.status == 200:
                    self._read_body(resp)
                else:
                    self.problems.append(f"GET {self.path}: HTTP {resp.status}")
            except Exception as exc:  # closed by finish(), or the server went away
                if not self._endpoint.is_set():
                    self.problems.append(f"GET {self.path}: {type(exc).__name__}: {exc}")
            finally:
                self._endpoint.set()  # never leave send() waiting

        threading.Thread(target=read, name="replay-sse", daemon=True).start()
        if not self._endpoint.wait(self.timeout):
            self.problems.append(f"GET {self.path}: no endpoint event in {self.timeout:g} s")
            self._endpoint.set()

    def _deliver(self, msg: dict[str, Any]) -> None:
        self.state.learn_message(msg)
        if "method" not in msg and msg.get("id") is not None:
            self.answered.add(id_key(msg["id"]) or "")
        self.live.q.put(msg)

    def _start_get_stream(self) -> None:
        """The standalone GET SSE stream (initialize era, with a session), read in a thread."""
        if not self.state.session_id or self._get_conn is not None or self.legacy:
            return
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": self.state.session_id}
        if self.state.version:
            headers["MCP-Protocol-Version"] = self.state.version
        conn = http.client.HTTPConnection(self.host, self.port, timeout=None)
        self._get_conn = conn

        def read() -> None:
            try:
                conn.request("GET", self.path, headers=headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    resp.read()
                    return
                self._read_body(resp)
            except Exception:  # closed by finish(), or the server has no GET stream
                return

        threading.Thread(target=read, name="replay-get", daemon=True).start()

    def finish(self) -> None:
        """Wait for the POSTs still reading, then end the session as the SDK does (DELETE)."""
        deadline = time.monotonic() + self.timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self._threads):
            self.problems.append(f"a response stream was still open after {self.timeout:g} s")
        if self._get_conn is not None:
            sock = self._get_conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            self._get_conn.close()
        if not self.state.session_id:
            return
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            headers = {"Mcp-Session-Id": self.state.session_id}
            if self.state.version:
                headers["MCP-Protocol-Version"] = self.state.version
            conn.request("DELETE", self.path, headers=headers)
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            conn.close()


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
    """Replay one recorded session against a Streamable HTTP server, record it, diff it."""
    from mcp_proxy.store.travel import session_names

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--upstream {url}: not an http(s) URL")
    actions = plan(session)
    if not actions:
        raise UserError(f"session {session.label} has no host→server traffic to replay")
    expected = outstanding_requests(session)
    before = {sid for sid, _ in session_names(db_url)}
    new_name = name or f"{session.session.get('name') or session.id[:8]} replay"
    relay = AnnouncedChild(relay_argv(url, db_url, new_name), _relayed_url, "the recording relay")
    notes: list[str] = []
    try:
        # A loaded CI machine can take many seconds to import and start a Python relay: that is
        # not the server under test being slow, so it gets the same grace as the first answer.
        local = urlsplit(relay.start(timeout=max(timeout, 10.0) + STARTUP_GRACE))
        target = urlunsplit(("http", local.netloc, parts.path or "/", parts.query, ""))
        live = Live()
        host = HttpHost(target, session, live, timeout=timeout)
        drive(
            actions,
            expected,
            host.send,
            live,
            states=dict(recorded_states(session)),
            timeout=timeout,
            pacing=pacing,
            notes=notes,
            tasks=task_plan(session),
        )
        host.finish()
        notes.extend(host.problems)
    finally:
        relay.stop()
    # The relay's session: new in the database and named as asked (another recorder may be
    # writing to the same database meanwhile).
    new = [sid for sid, sname in session_names(db_url) if sid not in before and sname == new_name]
    if not new:
        raise UserError(
            "the replay was not recorded (the relay recorded no session)"
            + (f": {notes[0]}" if notes else "")
        )
    return linked_result(db_url, new[0], session, origin, notes, None)


__all__ = ["HttpHost", "relay_argv", "replay_http"]
