"""The dashboard's pages. Each view builds one JSON-able dictionary — the page's ``.json`` twin —
and hands it to :func:`dashboard.app.render`; presentation-only extras (rendered JSON trees,
chart geometry) are passed beside it and never replace data.

URLs (each page also answers with ``.json`` appended to its path):

- ``/sessions`` — search, filters, sort, keyset pages
- ``/sessions/{id}`` — the timeline (``?after=SEQ`` pages, filters on method/direction/kind)
- ``/sessions/{id}/exchanges/{seq}`` — a request with its answer and what belongs to it
- ``/sessions/{id}/frames/{seq}`` — one frame; ``…/raw`` for its exact bytes
- ``/sessions/{id}/http/{n}`` — one HTTP request/response with headers and timings
- ``/stats``, ``/sessions/{id}/stats`` — latency distribution and error counts
- ``/sessions/live``, ``/sessions/{id}/live`` — Server-Sent Events for pages that follow a recording
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from dashboard import present
from dashboard.app import JINJA, QUERIES, SETTINGS, STORE, STREAMS, render
from dashboard.queries import (
    SEVERITIES,
    SORTS,
    TRANSPORTS,
    BadRequest,
    SessionFilter,
    TimelineFilter,
)
from mcp_proxy.errors import NotFoundError, StoreError
from mcp_proxy.render import frame_json, session_json
from mcp_proxy.store.queries import duration, session_status

EXT = r"{ext:(\.json)?}"
SID = r"{sid:[0-9a-f]{1,32}}"
KINDS = ("request", "response", "error", "notification", "stderr", "noise", "invalid", "batch")
SESSION_FILTERS = ("q", "method", "text", "transport", "era", "status", "severity", "tag")


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", index)
    r.add_get("/sessions/live", sessions_live)
    r.add_get("/sessions" + EXT, sessions_page)
    r.add_get("/stats" + EXT, stats_page)
    r.add_get(f"/sessions/{SID}/live", session_live)
    r.add_get(f"/sessions/{SID}/stats" + EXT, stats_page)
    r.add_get(f"/sessions/{SID}/frames/{{seq:\\d+}}/raw", frame_raw)
    r.add_get(f"/sessions/{SID}/frames/{{seq:\\d+}}" + EXT, frame_page)
    r.add_get(f"/sessions/{SID}/exchanges/{{seq:\\d+}}" + EXT, exchange_page)
    r.add_get(f"/sessions/{SID}/http/{{hid:\\d+}}" + EXT, http_page)
    r.add_get(f"/sessions/{SID}" + EXT, session_page)
    r.add_post(f"/sessions/{SID}/annotations" + EXT, annotation_add)
    r.add_post(r"/annotations/{aid:\d+}" + EXT, annotation_edit)
    r.add_post(r"/annotations/{aid:\d+}/delete" + EXT, annotation_delete)
    r.add_delete(r"/annotations/{aid:\d+}" + EXT, annotation_delete)


@web.middleware
async def errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Map our exceptions to HTTP statuses with one clear line (no tracebacks in pages)."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return _error(request, 400, str(exc))
    except NotFoundError as exc:
        return _error(request, 404, str(exc))
    except StoreError as exc:
        return _error(request, 503, f"database error: {exc}")


def _error(request: web.Request, status: int, message: str) -> web.Response:
    if request.match_info.get("ext") == ".json" or _wants_json(request):
        return web.json_response({"error": {"status": status, "message": message}}, status=status)
    html = request.app[JINJA].get_template("error.html").render(status=status, message=message)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def _wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


async def index(request: web.Request) -> web.StreamResponse:
    return web.Response(status=303, headers={"Location": "/sessions"})


# ---------------------------------------------------------------------------------- helpers


def _opt(request: web.Request, name: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = request.query.get(name, "").strip()
    if not value:
        return None
    if allowed is not None and value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}")
    return value


def _time(request: web.Request, name: str) -> float | None:
    value = _opt(request, name)
    if value is None:
        return None
    from mcp_proxy.commands.browse import parse_time
    from mcp_proxy.errors import UserError

    try:
        return parse_time(value)
    except UserError as exc:
        raise BadRequest(str(exc)) from exc


def _int(request: web.Request, name: str, default: int, lo: int = 0, hi: int = 10**12) -> int:
    value = request.query.get(name, "").strip()
    if not value:
        return default
    try:
        n = int(value)
    except ValueError as exc:
        raise BadRequest(f"{name} must be a number") from exc
    return min(max(n, lo), hi)


def _url(path: str, params: dict[str, Any]) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "", False)}
    return path + ("?" + urlencode(clean) if clean else "")


def _session_out(s: dict[str, Any], counts: dict[str, Any] | None = None) -> dict[str, Any]:
    out = session_json(s)
    out.pop("meta", None)
    if counts is not None:
        out.update(counts)
    return out


def _frame_row(
    f: dict[str, Any],
    partner: dict[str, Any] | None,
    http: dict[str, Any] | None,
    notes: list[dict[str, Any]],
) -> dict[str, Any]:
    """A timeline row: the frame's header fields, a preview, its partner and HTTP context."""
    row: dict[str, Any] = {
        "seq": f["seq"],
        "ts": f["ts"],
        "direction": f["direction"],
        "channel": f["channel"],
        "kind": f["kind"],
        "method": f["method"],
        "id": f["msg_id"],
        "error_code": f["error_code"],
        "size": f["size"],
        "complete": bool(f["complete"]),
        "preview": present.preview(f.get("head"), f["kind"]),
        "partner": None,
        "outcome": None,
        "http": None,
        "annotations": [_note_out(n) for n in notes],
    }
    if partner is not None:
        row["partner"] = {
            "seq": partner["seq"],
            "kind": partner["kind"],
            "method": partner["method"],
            "error_code": partner["error_code"],
            "latency": abs(partner["ts"] - f["ts"]),
        }
        if f["kind"] == "request":
            row["outcome"] = _outcome(partner["kind"], partner["error_code"])
    elif f["kind"] == "request":
        row["outcome"] = "pending"
    if http is not None:
        row["http"] = {"id": http["id"], "method": http["method"], "status": http["status"]}
    return row


def _outcome(answer_kind: str, error_code: int | None) -> str:
    if answer_kind == "error":
        return present.error_label(error_code)
    return "ok"


def _note_out(a: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": a["id"],
        "session_id": a["session_id"],
        "frame_seq": a["frame_seq"],
        "tag": a["tag"],
        "note": a["note"],
        "created_at": a["created_at"],
        "updated_at": a["updated_at"],
    }


def _finding_out(f: dict[str, Any]) -> dict[str, Any]:
    return {
        "code": f["code"],
        "severity": f["severity"],
        "title": f["title"],
        "detail": f.get("detail"),
        "frame_seqs": list(f.get("frame_seqs") or []),
        "source": f.get("source"),
        "spec": f.get("spec"),
        "explanation": f.get("explanation"),
    }


# ---------------------------------------------------------------------------------- sessions


def _session_filter(request: web.Request) -> SessionFilter:
    return SessionFilter(
        q=_opt(request, "q"),
        method=_opt(request, "method"),
        text=_opt(request, "text"),
        transport=_opt(request, "transport", TRANSPORTS),
        era=_opt(request, "era"),
        status=_opt(request, "status", ("live", "ended", "crashed")),
        severity=_opt(request, "severity", SEVERITIES),
        tag=_opt(request, "tag"),
        since=_time(request, "since"),
        until=_time(request, "until"),
        sort=_opt(request, "sort", SORTS) or "newest",
        cursor=_opt(request, "cursor"),
        limit=_int(request, "limit", 50, 1, 500),
    )


async def sessions_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    f = _session_filter(request)
    rows, cursor = await q.search_sessions(f)
    counts = await q.session_counts([r["id"] for r in rows])
    params = f.as_params()
    shown = {k: request.query.get(k) or None for k in ("since", "until")}
    data = {
        "filters": {
            **dict.fromkeys(SESSION_FILTERS),
            **params,
            **shown,
            "sort": f.sort,
            "limit": f.limit,
            "cursor": f.cursor,
        },
        "sessions": [_session_out(r, counts[r["id"]]) for r in rows],
        "next": cursor,
        "next_url": _url(
            "/sessions", {**params, "limit": f.limit if f.limit != 50 else None, "cursor": cursor}
        )
        if cursor
        else None,
        "tags": [{"tag": t["tag"], "sessions": t["count"]} for t in await q.all_tags()],
    }
    return render(
        request,
        "sessions.html",
        data,
        transports=TRANSPORTS,
        severities=SEVERITIES,
        sorts=SORTS,
        newest=max((r["started_at"] for r in rows), default=0.0),
        first_page=not f.cursor,
        filtered=bool(params),
    )


# ---------------------------------------------------------------------------------- session


def _timeline_filter(request: web.Request) -> TimelineFilter:
    return TimelineFilter(
        method=_opt(request, "method"),
        direction=_opt(request, "direction", ("c2s", "s2c")),
        kind=_opt(request, "kind", KINDS),
        annotated=request.query.get("annotated") in ("1", "on", "true"),
        after=_int(request, "after", 0),
        limit=_int(request, "limit", 200, 1, 1000),
    )


async def timeline_rows(
    request: web.Request, session_id: str, tf: TimelineFilter
) -> tuple[list[dict[str, Any]], int | None]:
    """The rows of one timeline window, shared by the page, its twin and the live stream."""
    q = request.app[QUERIES]
    page, next_after = await q.timeline(session_id, tf)
    partners = await q.partners(session_id, page)
    http = await q.http_exchanges_by_id(
        {f["http_exchange_id"] for f in page if f["http_exchange_id"] is not None}
    )
    seqs = [f["seq"] for f in page]
    notes: dict[int, list[dict[str, Any]]] = {}
    if seqs:
        for a in await q.annotations_for(session_id, seqs):
            if a["frame_seq"] is not None:
                notes.setdefault(a["frame_seq"], []).append(a)
    rows = [
        _frame_row(
            f,
            partners.get(f["seq"]),
            http.get(f["http_exchange_id"]) if f["http_exchange_id"] else None,
            notes.get(f["seq"], []),
        )
        for f in page
    ]
    return rows, next_after


async def session_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    store = request.app[STORE]
    s = await q.session(request.match_info["sid"])
    sid = s["id"]
    tf = _timeline_filter(request)
    rows, next_after = await timeline_rows(request, sid, tf)
    counts = (await q.session_counts([sid]))[sid]
    notes = [_note_out(a) for a in await q.annotations_for(sid, []) if a["frame_seq"] is None]
    found = [_finding_out(f) for f in await store.recorded_findings(sid)]
    params = tf.as_params()
    data = {
        "session": _session_out(s, counts),
        "meta": s.get("meta"),
        "filters": {
            "method": tf.method,
            "direction": tf.direction,
            "kind": tf.kind,
            "annotated": tf.annotated,
            "after": tf.after,
            "limit": tf.limit,
        },
        "timeline": rows,
        "next": next_after,
        "next_url": _url(
            f"/sessions/{sid}",
            {**params, "limit": tf.limit if tf.limit != 200 else None, "after": next_after},
        )
        if next_after
        else None,
        "annotations": notes,
        "findings": found,
        "methods": await q.session_methods(sid),
    }
    return render(
        request,
        "session.html",
        data,
        kinds=KINDS,
        live=session_status(s) == "live",
        filtered=bool(params),
        last_seq=rows[-1]["seq"] if rows else tf.after,
        live_url=_url(f"/sessions/{sid}/live", params),
    )


# ---------------------------------------------------------------------------------- details


async def _session_and_frame(request: web.Request) -> tuple[dict[str, Any], dict[str, Any]]:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    seq = int(request.match_info["seq"])
    f = await request.app[STORE].frame(s["id"], seq)
    if f is None:
        raise NotFoundError(f"no frame #{seq} in session {s['id'][:12]}")
    return s, f


def _frame_detail(f: dict[str, Any]) -> dict[str, Any]:
    out = frame_json(f)
    out["partial_parse"] = bool(f.get("partial_parse"))
    return out


def _http_out(h: dict[str, Any]) -> dict[str, Any]:
    started = h["started_at"]
    return {
        "id": h["id"],
        "method": h["method"],
        "url": h["url"],
        "status": h["status"],
        "outcome": h["outcome"],
        "error": h["error"],
        "started_at": started,
        "first_byte": (h["first_byte_at"] - started) if h["first_byte_at"] else None,
        "duration": (h["ended_at"] - started) if h["ended_at"] else None,
        "request_size": h["request_size"],
        "response_size": h["response_size"],
        "request_headers": present.header_rows(h["request_headers"]),
        "response_headers": present.header_rows(h["response_headers"]),
    }


async def frame_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s, f = await _session_and_frame(request)
    sid, seq = s["id"], f["seq"]
    partners = await q.partners(sid, [f])
    partner = partners.get(seq)
    http = None
    if f["http_exchange_id"] is not None:
        http = _http_out(await q.http_exchange(sid, f["http_exchange_id"]))
    prev_seq, next_seq = await q.neighbours(sid, seq)
    exchange_seq = None
    if f["kind"] == "request":
        exchange_seq = seq
    elif partner is not None and partner["kind"] == "request":
        exchange_seq = partner["seq"]
    findings = [
        _finding_out(x)
        for x in await request.app[STORE].recorded_findings(sid)
        if seq in (x.get("frame_seqs") or [])
    ]
    data = {
        "session": _session_out(s),
        "frame": _frame_detail(f),
        "partner": (
            {
                "seq": partner["seq"],
                "kind": partner["kind"],
                "latency": abs(partner["ts"] - f["ts"]),
            }
            if partner
            else None
        ),
        "exchange_seq": exchange_seq,
        "http": http,
        "prev": prev_seq,
        "next": next_seq,
        "annotations": [
            _note_out(a) for a in await q.annotations_for(sid, [seq]) if a["frame_seq"]
        ],
        "findings": findings,
    }
    return render(request, "frame.html", data, body=present.frame_body(f))


async def frame_raw(request: web.Request) -> web.Response:
    """The exact recorded bytes, as a download: never rendered by the browser."""
    s, f = await _session_and_frame(request)
    return web.Response(
        body=f["raw"],
        content_type="application/octet-stream",
        headers={
            "Content-Disposition": f'attachment; filename="{s["id"][:12]}-{f["seq"]}.bin"',
        },
    )


async def exchange_page(request: web.Request) -> web.Response:
    """A request, its answer, and the frames between them that belong to it.

    Belonging, without the analysis module: progress notifications carrying the request's
    progress token, and (on stdio, where nothing else ties them) log messages and
    server→client requests sent while it was in flight.
    """
    q = request.app[QUERIES]
    store = request.app[STORE]
    s, req = await _session_and_frame(request)
    sid = s["id"]
    if req["kind"] != "request":
        raise NotFoundError(f"frame #{req['seq']} is a {req['kind']}, not a request")
    partner = (await q.partners(sid, [req])).get(req["seq"])
    answer = await store.frame(sid, partner["seq"]) if partner else None
    token = _progress_token(req)
    related: list[dict[str, Any]] = []
    if answer is not None and answer["seq"] - req["seq"] > 1:
        for f in await q.frames_between(sid, req["seq"], answer["seq"]):
            if f["direction"] == req["direction"] and f["kind"] != "notification":
                continue
            msg = (
                json.loads(f["raw"]) if f["kind"] == "notification" and f["size"] < 65536 else None
            )
            why = _belongs(f, msg, token, req)
            if why:
                related.append({**frame_json(f), "why": why})
    http_ids = {x["http_exchange_id"] for x in (req, answer) if x and x["http_exchange_id"]}
    https = [_http_out(await q.http_exchange(sid, i)) for i in sorted(http_ids)]
    seqs = [req["seq"]] + ([answer["seq"]] if answer else [])
    findings = [
        _finding_out(x)
        for x in await store.recorded_findings(sid)
        if set(seqs) & set(x.get("frame_seqs") or [])
    ]
    outcome = (
        _outcome(answer["kind"], answer["error_code"])
        if answer
        else ("pending" if session_status(s) == "live" else "no response")
    )
    if answer is not None and answer["kind"] == "response" and _is_tool_error(answer):
        outcome = "tool error"
    data = {
        "session": _session_out(s),
        "method": req["method"],
        "request": _frame_detail(req),
        "response": _frame_detail(answer) if answer else None,
        "latency": (answer["ts"] - req["ts"]) if answer else None,
        "outcome": outcome,
        "related": related,
        "http": https,
        "findings": findings,
        "annotations": [
            _note_out(a) for a in await q.annotations_for(sid, seqs) if a["frame_seq"] is not None
        ],
    }
    return render(
        request,
        "exchange.html",
        data,
        req_body=present.frame_body(req),
        resp_body=present.frame_body(answer) if answer else None,
    )


def _progress_token(f: dict[str, Any]) -> Any:
    try:
        msg = json.loads(f["raw"])
        return msg["params"]["_meta"]["progressToken"]
    except (ValueError, KeyError, TypeError):
        return None


def _belongs(f: dict[str, Any], msg: Any, token: Any, req: dict[str, Any]) -> str | None:
    if f["kind"] == "notification" and isinstance(msg, dict):
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if f["method"] == "notifications/progress":
            return (
                "progress" if token is not None and params.get("progressToken") == token else None
            )
        if f["method"] == "notifications/cancelled":
            return "cancellation" if json.dumps(params.get("requestId")) == req["msg_id"] else None
        if f["method"] == "notifications/message":
            return "log (while in flight)"
        return None
    if f["kind"] in ("request", "response", "error") and f["direction"] != req["direction"]:
        return "server→client request (while in flight)" if f["kind"] == "request" else None
    return None


def _is_tool_error(answer: dict[str, Any]) -> bool:
    if answer["size"] > 1 << 20:
        return False
    try:
        result = json.loads(answer["raw"]).get("result")
    except (ValueError, AttributeError):
        return False
    return isinstance(result, dict) and result.get("isError") is True


async def http_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    h = await q.http_exchange(s["id"], int(request.match_info["hid"]))
    frames = await q.frames_of_http_exchange(h["id"])
    data = {
        "session": _session_out(s),
        "http": _http_out(h),
        "frames": [
            {
                "seq": f["seq"],
                "direction": f["direction"],
                "kind": f["kind"],
                "method": f["method"],
                "id": f["msg_id"],
                "size": f["size"],
                "sse": {"id": f["sse_id"], "event": f["sse_event"]} if f["sse_event"] else None,
            }
            for f in frames
        ],
    }
    return render(request, "http.html", data)


# ---------------------------------------------------------------------------------- stats


async def stats_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    sid = request.match_info.get("sid")
    session = None
    if sid:
        session = await q.session(sid)
        ids: list[str] | None = [session["id"]]
    else:
        ids = None
    recent = _int(request, "recent", 200, 1, 5000)
    pairs = await q.latency_pairs(ids, recent=recent)
    table = present.latency_table(pairs)
    errors: dict[str, dict[str, Any]] = {}
    for f in await q.error_frames(ids, recent=recent):
        if f["kind"] == "error":
            key = f"jsonrpc {f['error_code']}"
            label = present.error_label(f["error_code"])
        elif f["kind"] == "noise":
            key, label = "transport.noise", "non-JSON line on the wire"
        else:
            key, label = "transport.invalid", "JSON that is not JSON-RPC"
        entry = errors.setdefault(key, {"category": key, "label": label, "count": 0})
        entry["count"] += 1
    data = {
        "session": _session_out(session) if session else None,
        "scope": "session" if session else f"newest {recent} sessions",
        "latency": table,
        "errors": sorted(errors.values(), key=lambda e: -e["count"]),
        "answered_requests": len(pairs),
    }
    return render(request, "stats.html", data, chart=present.latency_svg(table))


# ---------------------------------------------------------------------------------- annotations


async def _form(request: web.Request) -> dict[str, str]:
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except ValueError as exc:
            raise BadRequest("the body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return {k: str(v) for k, v in body.items() if v is not None}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _back(form: dict[str, str], default: str) -> str:
    """Where to go after a form post: a local path only (no open redirect)."""
    nxt = form.get("next", "")
    if nxt.startswith("/") and not nxt.startswith("//") and "\\" not in nxt:
        return nxt
    return default


def _changed(request: web.Request, payload: dict[str, Any], back: str, status: int = 200):
    if request.match_info.get("ext") == ".json" or _wants_json(request):
        return web.json_response(payload, status=status, dumps=present.dumps)
    return web.Response(status=303, headers={"Location": back})


async def annotation_add(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    form = await _form(request)
    seq_text = form.get("frame_seq", "").strip()
    try:
        frame_seq = int(seq_text) if seq_text else None
    except ValueError as exc:
        raise BadRequest("frame_seq must be a number") from exc
    a = await q.add_annotation(
        s["id"], frame_seq=frame_seq, tag=form.get("tag"), note=form.get("note")
    )
    return _changed(request, {"annotation": _note_out(a)}, _back(form, f"/sessions/{s['id']}"), 201)


async def annotation_edit(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    form = await _form(request)
    aid = int(request.match_info["aid"])
    a = await q.update_annotation(aid, tag=form.get("tag"), note=form.get("note"))
    return _changed(
        request, {"annotation": _note_out(a)}, _back(form, f"/sessions/{a['session_id']}")
    )


async def annotation_delete(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    form = await _form(request) if request.method == "POST" else {}
    a = await q.delete_annotation(int(request.match_info["aid"]))
    return _changed(request, {"deleted": _note_out(a)}, _back(form, f"/sessions/{a['session_id']}"))


# ---------------------------------------------------------------------------------- live


async def _sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, event: str, data: Any) -> None:
    payload = present.dumps(data)
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


async def _follow(request: web.Request, body: Any) -> web.StreamResponse:
    """Run a live stream's loop as a tracked task so shutdown can end it."""
    task = asyncio.current_task()
    streams = request.app[STREAMS]
    if task is not None:
        streams.add(task)
    try:
        return await body()
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    finally:
        if task is not None:
            streams.discard(task)


async def session_live(request: web.Request) -> web.StreamResponse:
    """New timeline rows as they are recorded, rendered by the same partial as the page.

    Each ``frames`` event carries the rows' HTML (for the page) and their data (for scripts);
    a ``status`` event says when the session stops being live, and the stream ends.
    """
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    sid = s["id"]
    tf = _timeline_filter(request)
    tf.limit = 500
    last = _int(request, "after", 0)
    if "Last-Event-ID" in request.headers:
        last = max(last, _int_or(request.headers["Last-Event-ID"], 0))
    interval = request.app[SETTINGS]["poll_interval"]
    row_tpl = request.app[JINJA].get_template("_timeline_rows.html")

    async def body() -> web.StreamResponse:
        response = await _sse(request)
        idle = 0.0
        while True:
            tf.after = last_seen[0]
            rows, _more = await timeline_rows(request, sid, tf)
            if rows:
                last_seen[0] = rows[-1]["seq"]
                html = row_tpl.render(timeline=rows, session={"id": sid})
                await response.write(f"id: {last_seen[0]}\n".encode())
                await _send(response, "frames", {"rows": rows, "html": html})
                idle = 0.0
                continue
            cur = await request.app[STORE].get_session(sid)
            status = session_status(cur) if cur else "gone"
            if status != "live":
                await _send(
                    response,
                    "status",
                    {"status": status, "frame_count": cur["frame_count"] if cur else None},
                )
                return response
            idle += interval
            if idle >= 15:
                await response.write(b": keep-alive\n\n")
                idle = 0.0
            await asyncio.sleep(interval)

    last_seen = [last]
    return await _follow(request, body)


async def sessions_live(request: web.Request) -> web.StreamResponse:
    """Counts of the sessions on a list page as they grow, and how many newer ones started."""
    q = request.app[QUERIES]
    ids = [i for i in request.query.get("ids", "").split(",") if i][:500]
    newest = float(request.query.get("newest") or 0)
    interval = max(request.app[SETTINGS]["poll_interval"], 0.5)

    async def body() -> web.StreamResponse:
        response = await _sse(request)
        sent: dict[str, Any] = {}
        while True:
            rows = await q.sessions_by_id(ids)
            counts = await q.session_counts([r["id"] for r in rows])
            updates = []
            for r in rows:
                state = (session_status(r), r["frame_count"], counts[r["id"]]["exchanges"])
                if sent.get(r["id"]) != state:
                    sent[r["id"]] = state
                    updates.append(
                        {
                            "id": r["id"],
                            "status": state[0],
                            "frame_count": state[1],
                            "exchanges": state[2],
                            "duration": present.duration(duration(r)),
                        }
                    )
            newer = await q.newer_sessions(newest) if newest else 0
            if updates or sent.get("__newer") != newer:
                sent["__newer"] = newer
                await _send(response, "sessions", {"updates": updates, "newer": newer})
            await asyncio.sleep(interval)

    return await _follow(request, body)


def _int_or(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default
