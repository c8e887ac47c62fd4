"""HAR 1.2, both ways: HTTP sessions out to a HAR log, and a HAR log in as sessions.

Out: each HTTP exchange becomes an entry; SSE events go to the body (as SSE) and to
``_sseEvents`` (the shape Chromium's devtools use); ``_mcptape`` on each entry names the session
and exchange, so a HAR that mcptape wrote imports back into the same sessions. Building the log
is linear: frames are grouped by exchange once, not searched per exchange.

In: a HAR from browsers' devtools (Chromium, Firefox, Playwright's ``record_har_path``),
from mitmproxy (``mitmdump --set hardump=…``) or from mcptape becomes sessions. Only MCP traffic
is taken — a request whose body is JSON-RPC, an SSE stream, or an exchange carrying
``Mcp-Session-Id`` — the rest (page loads, favicons) is skipped. Entries are grouped into
sessions by ``_mcptape.session``, else ``Mcp-Session-Id``, else the endpoint URL (the
sessionless 2026-07-28 era). The importer is tolerant of what producers leave out (``-1``
timings, missing ``postData``, base64 bodies, ``_sseEvents`` or not).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from mcp_proxy import __version__
from mcp_proxy.errors import UserError
from mcp_proxy.frames import Channel, Direction, text_or_none
from mcp_proxy.framing import SSEParser
from mcp_proxy.recording.model import (
    Progress,
    Recording,
    SessionRecording,
)

# ============================================================================ writing


def _iso(ts: float | None) -> str:
    """HAR wants ISO 8601 with milliseconds and a zone."""
    dt = datetime.fromtimestamp(ts or 0.0, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def _ms(a: float | None, b: float | None) -> float:
    """Milliseconds from a to b, never negative (clocks: both are the relay's wall clock)."""
    if a is None or b is None:
        return 0.0
    return round(max(0.0, (b - a) * 1000.0), 3)


def _headers(pairs: Any) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    if isinstance(pairs, dict):
        pairs = list(pairs.items())
    for item in pairs or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append({"name": str(item[0]), "value": str(item[1])})
    return out


def _header(pairs: list[dict[str, str]], name: str) -> str | None:
    for h in pairs:
        if h["name"].lower() == name:
            return h["value"]
    return None


STATUS_TEXT = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}
_SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


def sse_event_bytes(f: dict[str, Any]) -> bytes:
    """The wire bytes of one recorded SSE event.

    A relay that keeps whole events stores them as the frame's raw bytes (they start with a
    field name or a comment); one that keeps only the ``data`` payload gets its event rebuilt in
    the form sse-starlette writes (CRLF line ends), so the concatenated HAR body reads as SSE.
    """
    raw = bytes(f["raw"])
    if raw.lstrip()[:8].startswith(_SSE_FIELDS) or raw.startswith(b"\r\n"):
        return raw
    lines: list[bytes] = []
    if f.get("sse_id") is not None:
        lines.append(b"id: " + str(f["sse_id"]).encode())
    if f.get("sse_event") is not None:
        lines.append(b"event: " + str(f["sse_event"]).encode())
    for part in raw.split(b"\n"):
        lines.append(b"data: " + part)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _sse_data(f: dict[str, Any]) -> bytes:
    raw = bytes(f["raw"])
    if not raw.lstrip()[:8].startswith(_SSE_FIELDS):
        return raw
    parser = SSEParser()
    events = parser.feed(raw)
    tail = parser.flush()
    if tail is not None:
        events.append(tail)
    return b"\n".join(e.data for e in events)


def _content(body: bytes, mime: str) -> dict[str, Any]:
    text = text_or_none(body)
    if text is None:
        return {
            "size": len(body),
            "mimeType": mime,
            "text": base64.b64encode(body).decode(),
            "encoding": "base64",
        }
    return {"size": len(body), "mimeType": mime, "text": text}


def _har_request(ex: dict[str, Any], req_frames: list[dict[str, Any]]) -> dict[str, Any]:
    req_headers = _headers(ex.get("request_headers"))
    url = str(ex["url"])
    req_body = b"".join(bytes(f["raw"]) for f in req_frames)
    request: dict[str, Any] = {
        "method": str(ex["method"]),
        "url": url,
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": req_headers,
        "queryString": [{"name": k, "value": v} for k, v in parse_qsl(urlsplit(url).query)],
        "headersSize": -1,
        "bodySize": len(req_body) if req_frames or ex.get("request_size") is not None else 0,
    }
    if req_body:
        mime = _header(req_headers, "content-type") or "application/json"
        text = text_or_none(req_body)
        request["postData"] = {
            "mimeType": mime,
            "text": text if text is not None else base64.b64encode(req_body).decode(),
        }
    return request


def _har_response(
    ex: dict[str, Any], resp_frames: list[dict[str, Any]], sse: list[dict[str, Any]]
) -> dict[str, Any]:
    resp_headers = _headers(ex.get("response_headers"))
    if sse:
        body = b"".join(sse_event_bytes(f) for f in sse)
        mime = _header(resp_headers, "content-type") or "text/event-stream"
    else:
        body = b"".join(bytes(f["raw"]) for f in resp_frames)
        mime = _header(resp_headers, "content-type") or (
            "application/json" if body else "x-unknown"
        )
    status = ex.get("status")
    return {
        "status": int(status) if isinstance(status, int) else 0,
        "statusText": STATUS_TEXT.get(status or 0, "") if status else (ex.get("error") or ""),
        "httpVersion": "HTTP/1.1",
        "cookies": [],
        "headers": resp_headers,
        "content": _content(body, mime),
        "redirectURL": _header(resp_headers, "location") or "",
        "headersSize": -1,
        "bodySize": len(body) if status else -1,
    }


def har_entry(
    s: SessionRecording, ex: dict[str, Any], frames: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """One HTTP exchange as a HAR 1.2 entry; SSE events go to ``_sseEvents`` and the body.

    ``frames`` are the exchange's frames when the caller has grouped them already (the log
    builder does, once); without them the session is searched.
    """
    if frames is None:
        frames = [f for f in s.frames if f.get("http_exchange_id") == ex["id"]]
    req_frames = [f for f in frames if f["direction"] == Direction.C2S.value]
    resp_frames = [f for f in frames if f["direction"] == Direction.S2C.value]
    sse = [f for f in resp_frames if f["channel"] == Channel.SSE.value]
    started = float(ex["started_at"])
    first = ex.get("first_byte_at")
    ended = ex.get("ended_at")
    wait = _ms(started, first if first is not None else ended)
    receive = _ms(first, ended) if first is not None else 0.0
    entry: dict[str, Any] = {
        "startedDateTime": _iso(started),
        "time": round(wait + receive, 3),
        "request": _har_request(ex, req_frames),
        "response": _har_response(ex, resp_frames, sse),
        "cache": {},
        "timings": {
            "blocked": -1,
            "dns": -1,
            "connect": -1,
            "send": 0.0,
            "wait": wait,
            "receive": receive,
            "ssl": -1,
        },
        "_mcptape": {
            "session": s.id,
            "exchange": ex["id"],
            "outcome": ex.get("outcome"),
            **({"error": ex["error"]} if ex.get("error") else {}),
        },
    }
    if sse:
        entry["_sseEvents"] = [
            {
                "time": f["ts"],
                "eventId": f.get("sse_id"),
                "eventType": f.get("sse_event") or "message",
                "data": text_or_none(_sse_data(f)) or "",
            }
            for f in sse
        ]
    return entry


def to_har(recording: Recording, progress: Progress | None = None) -> dict[str, Any]:
    """HTTP sessions as one HAR 1.2 log (pure, linear). stdio sessions are refused."""
    stdio = [
        s.label
        for s in recording.sessions
        if not s.exchanges and s.session.get("transport") == "stdio"
    ]
    if stdio:
        raise UserError(
            f"HAR holds HTTP traffic; session {stdio[0]} was recorded over stdio"
            " (export it as JSON Lines instead)"
        )
    pages = []
    entries = []
    for s in recording.sessions:
        page_id = f"session-{s.id[:12]}"
        pages.append(
            {
                "startedDateTime": _iso(s.session.get("started_at")),
                "id": page_id,
                "title": f"{s.session.get('name') or 'mcptape session'} {s.id[:8]}",
                "pageTimings": {"onContentLoad": -1, "onLoad": -1},
            }
        )
        grouped = s.frames_by_exchange()
        for ex in s.exchanges:
            entry = har_entry(s, ex, grouped.get(ex["id"], []))
            entry["pageref"] = page_id
            entries.append(entry)
        if progress is not None:
            progress(len(s.frames))
    entries.sort(
        key=lambda e: (e["startedDateTime"], e["_mcptape"]["session"], e["_mcptape"]["exchange"])
    )
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "mcptape", "version": __version__},
            "pages": pages,
            "entries": entries,
        }
    }


def dumps_har(recording: Recording, progress: Progress | None = None) -> bytes:
    """HAR as bytes, indented (people open these in editors), deterministic like JSON Lines."""
    return (json.dumps(to_har(recording, progress), ensure_ascii=False, indent=2) + "\n").encode(
        "utf-8"
    )


def write_har(recording: Recording, progress: Progress | None = None) -> list[bytes]:
    """The registry's writer: the whole log as one chunk (HAR is one JSON document)."""
    return [dumps_har(recording, progress)]


def _format() -> Any:
    from mcp_proxy.recording.har_read import loads_har, loads_har_rows, sniff
    from mcp_proxy.recording.registry import Format

    return Format(
        name="har",
        title="HAR 1.2 (HTTP sessions): browsers' devtools, mitmproxy and mcptape read it",
        suffixes=(".har",),
        media_type="application/json",
        write=write_har,
        read=loads_har,
        read_rows=loads_har_rows,
        sniff=sniff,
        transports=("http", "sse"),
    )


FORMAT = _format()
