"""HAR 1.2 in: a HAR log from a browser's devtools, mitmproxy or mcptape becomes sessions.

Only MCP traffic is taken — a request whose body is JSON-RPC, a response that is an SSE stream,
or an exchange carrying ``Mcp-Session-Id`` — the rest (page loads, favicons) is skipped.
Entries are grouped into sessions by ``_mcptape.session`` (a HAR mcptape wrote), else by the
``Mcp-Session-Id`` (request header, or the response header that answers ``initialize``), else
by the endpoint URL (the sessionless 2026-07-28 era). The reader tolerates what producers leave
out or shape differently: ``-1`` timings, a missing ``postData`` or ``content.text``, base64
bodies, SSE events in ``_sseEvents`` or only in the body, HTTP/2 pseudo-headers.

Frames get the classification every other producer's frames get, and the session gets the
handshake facts (era, versions, client and server) from the shared
:class:`~mcp_proxy.handshake.HandshakeTracker`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from mcp_proxy.frames import Channel, Direction, Kind, classify
from mcp_proxy.framing import SSEParser
from mcp_proxy.handshake import HandshakeTracker
from mcp_proxy.recording.model import (
    Progress,
    Recording,
    RecordingFormatError,
    SessionRecording,
    frame_dicts,
)

_JSONRPC = frozenset({Kind.REQUEST, Kind.RESPONSE, Kind.ERROR, Kind.NOTIFICATION, Kind.BATCH})


def _when(value: Any) -> float | None:
    """An ISO 8601 ``startedDateTime`` as epoch seconds (``Z`` and offsets both accepted)."""
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt.timestamp()


def _pairs(headers: Any) -> list[list[str]]:
    """HAR headers as ``[[name, value], …]`` in order; HTTP/2 pseudo-headers left out."""
    out: list[list[str]] = []
    for h in headers if isinstance(headers, list) else []:
        if isinstance(h, dict) and isinstance(h.get("name"), str):
            name = h["name"]
            if not name.startswith(":"):
                out.append([name, str(h.get("value", ""))])
    return out


def _get(pairs: list[list[str]], name: str) -> str | None:
    for k, v in pairs:
        if k.lower() == name:
            return v
    return None


def _text_body(holder: Any) -> bytes:
    """The bytes of a ``postData`` or ``content`` object (``encoding: base64`` honoured)."""
    if not isinstance(holder, dict):
        return b""
    text = holder.get("text")
    if not isinstance(text, str):
        return b""
    if holder.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=False)
        except ValueError:
            return text.encode("utf-8", "replace")
    return text.encode("utf-8", "replace")


def _obj(value: Any) -> dict[str, Any]:
    """The value when it is a JSON object, else an empty one (producers leave parts out)."""
    return value if isinstance(value, dict) else {}


def _positive(timings: dict[str, Any], *names: str) -> float:
    total = 0.0
    for n in names:
        v = timings.get(n)
        if isinstance(v, (int, float)) and v > 0:
            total += float(v)
    return total / 1000.0


@dataclass
class _Entry:
    """One HAR entry reduced to what a session needs."""

    started: float
    first_byte: float
    ended: float
    method: str
    url: str
    status: int | None
    req_headers: list[list[str]]
    resp_headers: list[list[str]]
    req_body: bytes
    resp_body: bytes
    sse_events: list[tuple[float | None, bytes, str | None, str | None]]
    is_sse: bool
    mcptape: dict[str, Any]
    error: str | None
    page: str | None

    @property
    def session_key(self) -> str:
        sid = self.mcptape.get("session")
        if isinstance(sid, str) and sid:
            return "mcptape:" + sid
        header = _get(self.req_headers, "mcp-session-id") or _get(
            self.resp_headers, "mcp-session-id"
        )
        if header:
            return "mcp-session:" + header
        parts = urlsplit(self.url)
        return f"url:{parts.scheme}://{parts.netloc}{parts.path}"


def _sse_from_body(body: bytes) -> list[tuple[float | None, bytes, str | None, str | None]]:
    parser = SSEParser()
    events = parser.feed(body)
    tail = parser.flush()
    if tail is not None:
        events.append(tail)
    return [(None, e.data, e.id, e.event) for e in events if not e.comment_only]


def _sse_from_devtools(items: Any) -> list[tuple[float | None, bytes, str | None, str | None]]:
    out: list[tuple[float | None, bytes, str | None, str | None]] = []
    for ev in items if isinstance(items, list) else []:
        if not isinstance(ev, dict):
            continue
        t = ev.get("time")
        data = ev.get("data")
        ev_id = ev.get("eventId")
        out.append(
            (
                float(t) if isinstance(t, (int, float)) else None,
                str(data if data is not None else "").encode("utf-8"),
                str(ev_id) if ev_id not in (None, "") else None,
                str(ev.get("eventType") or "message"),
            )
        )
    return out


def _looks_like_mcp(body: bytes) -> bool:
    return bool(body) and classify(body, Channel.HTTP.value).kind in _JSONRPC


def _entry(raw: Any) -> _Entry | None:
    """A HAR entry as an :class:`_Entry`, or None when it is not MCP traffic."""
    if not isinstance(raw, dict):
        return None
    req = _obj(raw.get("request"))
    resp = _obj(raw.get("response"))
    started = _when(raw.get("startedDateTime"))
    if started is None or not isinstance(req.get("url"), str):
        return None
    req_headers = _pairs(req.get("headers"))
    resp_headers = _pairs(resp.get("headers"))
    content = _obj(resp.get("content"))
    mime = str(content.get("mimeType") or _get(resp_headers, "content-type") or "")
    is_sse = "text/event-stream" in mime.lower()
    req_body = _text_body(req.get("postData"))
    resp_body = _text_body(content)
    has_session = bool(_get(req_headers, "mcp-session-id") or _get(resp_headers, "mcp-session-id"))
    if not (is_sse or has_session or _looks_like_mcp(req_body)):
        return None
    timings = _obj(raw.get("timings"))
    total = raw.get("time")
    first = started + _positive(timings, "blocked", "dns", "connect", "send", "wait")
    ended = started + (
        float(total) / 1000.0 if isinstance(total, (int, float)) and total > 0 else 0
    )
    status = resp.get("status")
    meta = _obj(raw.get("_mcptape"))
    events: list[tuple[float | None, bytes, str | None, str | None]] = []
    if is_sse:
        events = _sse_from_devtools(raw.get("_sseEvents")) or _sse_from_body(resp_body)
    error = meta.get("error") or raw.get("_error") or resp.get("_error")
    return _Entry(
        started=started,
        first_byte=max(started, first),
        ended=max(first, ended),
        method=str(req.get("method") or "POST"),
        url=req["url"],
        status=int(status) if isinstance(status, int) and status > 0 else None,
        req_headers=req_headers,
        resp_headers=resp_headers,
        req_body=req_body,
        resp_body=resp_body,
        sse_events=events,
        is_sse=is_sse,
        mcptape=meta,
        error=str(error) if error else None,
        page=raw.get("pageref") if isinstance(raw.get("pageref"), str) else None,
    )


@dataclass
class _Builder:
    """Collects one session's exchanges and frames, then numbers and classifies them."""

    key: str
    entries: list[_Entry] = field(default_factory=list)

    def exchange_row(self, n: int, e: _Entry) -> dict[str, Any]:
        outcome = e.mcptape.get("outcome")
        if not isinstance(outcome, str):
            outcome = "complete" if e.status is not None else "upstream_error"
        return {
            "id": n,
            "method": e.method,
            "url": e.url,
            "status": e.status,
            "request_headers": e.req_headers,
            "response_headers": e.resp_headers,
            "started_at": e.started,
            "first_byte_at": e.first_byte if e.status is not None else None,
            "ended_at": e.ended,
            "outcome": outcome,
            "error": e.error,
            "request_size": len(e.req_body),
            "response_size": len(e.resp_body),
            "meta": None,
        }

    def frames_of(self, n: int, e: _Entry) -> list[tuple[float, int, _Wire]]:
        """The exchange's frames as (time, order, what the wire carried)."""
        out: list[tuple[float, int, _Wire]] = []
        if e.req_body:
            out.append((e.started, 0, (_C2S, _HTTP, e.req_body, n, None, None)))
        if e.is_sse:
            for i, (t, data, ev_id, ev_type) in enumerate(e.sse_events, start=1):
                out.append(
                    (t if t is not None else e.first_byte, i, (_S2C, _SSE, data, n, ev_id, ev_type))
                )
        elif e.resp_body:
            out.append((e.ended, 1, (_S2C, _HTTP, e.resp_body, n, None, None)))
        return out

    def build(self, titles: dict[str, str], creator: str) -> tuple[SessionRecording, Rows]:
        """The session without its frames, and its frames as row tuples (``FRAME_COLUMNS``
        order), numbered in time order and classified from their bytes."""
        self.entries.sort(key=lambda e: e.started)
        exchanges = []
        timed: list[tuple[float, int, int, _Wire]] = []
        for n, e in enumerate(self.entries, start=1):
            exchanges.append(self.exchange_row(n, e))
            timed.extend((t, n, order, wire) for t, order, wire in self.frames_of(n, e))
        timed.sort(key=lambda x: (x[0], x[1], x[2]))
        tracker = HandshakeTracker()
        facts: dict[str, Any] = {}
        rows: Rows = []
        for seq, (t, _, _, (direction, channel, raw, n, sse_id, sse_event)) in enumerate(
            timed, start=1
        ):
            c = classify(raw, channel)
            rows.append(
                (seq, t, int(t * 1e9), direction, channel, c.kind.value, c.method, c.msg_id,
                 c.error_code, len(raw), True, c.partial, raw, n, sse_id, sse_event)
            )  # fmt: skip
            if c.message is not None:
                facts.update(tracker.observe(Direction(direction), c) or {})
        session = SessionRecording(self.session_row(titles, creator, facts), exchanges)
        return session, rows

    def session_row(
        self, titles: dict[str, str], creator: str, facts: dict[str, Any]
    ) -> dict[str, Any]:
        first = self.entries[0]
        own = first.mcptape.get("session")
        sid = own if _is_hex_id(own) else hashlib.md5(self.key.encode()).hexdigest()
        parts = urlsplit(first.url)
        legacy = any(ev[3] == "endpoint" for e in self.entries for ev in e.sse_events)
        meta = dict(facts.pop("meta", None) or {})
        meta["har"] = {"creator": creator, "grouped_by": self.key.split(":", 1)[0]}
        name = titles.get(first.page or "") or f"har {parts.netloc}"
        return {
            "id": sid,
            "name": name[:200],
            "transport": "sse" if legacy else "http",
            "status": "ended",
            "started_at": first.started,
            "ended_at": max(e.ended for e in self.entries),
            "updated_at": max(e.ended for e in self.entries),
            "upstream": f"{parts.scheme}://{parts.netloc}{parts.path}",
            **{k: v for k, v in facts.items() if v is not None},
            "meta": meta,
            "frame_count": 0,
            "gap_count": 0,
        }


def _is_hex_id(value: Any) -> bool:
    return (
        isinstance(value, str)
        and len(value) == 32
        and all(ch in "0123456789abcdef" for ch in value)
    )


#: A frame as the wire carried it: direction, channel, bytes, exchange number, SSE id and event.
type _Wire = tuple[str, str, bytes, int, str | None, str | None]
#: A session's frames as row tuples (``mcp_proxy.store.columns.FRAME_COLUMNS`` order).
type Rows = list[tuple[Any, ...]]
_C2S, _S2C = Direction.C2S.value, Direction.S2C.value
_HTTP, _SSE = Channel.HTTP.value, Channel.SSE.value


def loads_har(data: bytes, origin: str = "HAR", progress: Progress | None = None) -> Recording:
    """A HAR 1.2 document's bytes → the MCP sessions it holds (pure), as the model (diff,
    replay, mock): :func:`loads_har_rows` with each frame row as the model's dict."""
    recording, rows = loads_har_rows(data, origin, progress)
    for s, frames in zip(recording.sessions, rows, strict=True):
        s.frames = frame_dicts(frames)
    return recording


def loads_har_rows(
    data: bytes, origin: str = "HAR", progress: Progress | None = None
) -> tuple[Recording, list[Rows]]:
    """A HAR 1.2 document's bytes → its MCP sessions without their frames, and each session's
    frames as row tuples (what an import writes: no dict per frame)."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise RecordingFormatError(f"{origin}: nested too deeply to read") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordingFormatError(f"{origin} is not a HAR file: not valid JSON ({exc})") from exc
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise RecordingFormatError(f'{origin} is not a HAR file: no "log" with "entries"')
    creator_info = _obj(log.get("creator"))
    creator = f"{creator_info.get('name', '?')} {creator_info.get('version', '')}".strip()
    titles = {
        p["id"]: str(p.get("title") or "")
        for p in log.get("pages") or []
        if isinstance(p, dict) and isinstance(p.get("id"), str)
    }
    groups: dict[str, _Builder] = {}
    taken = 0
    for raw in log["entries"]:
        e = _entry(raw)
        if e is None:
            continue
        taken += 1
        groups.setdefault(e.session_key, _Builder(e.session_key)).entries.append(e)
    if not groups:
        raise RecordingFormatError(
            f"{origin} holds no MCP traffic: none of its {len(log['entries'])} entries"
            " carries JSON-RPC, an SSE stream or an Mcp-Session-Id"
        )
    built = [b.build(titles, creator) for b in groups.values()]
    built.sort(key=lambda b: (b[0].session["started_at"], b[0].id))
    if progress is not None:
        progress(sum(len(rows) for _s, rows in built))
    return Recording([s for s, _rows in built], origin=origin), [rows for _s, rows in built]


def sniff(head: bytes) -> bool:
    """Whether a file's first bytes look like a HAR log (``{"log": {...``)."""
    compact = b"".join(head[:4096].split())
    return compact.startswith(b'{"log":')
