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
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, JINJA, QUERIES, SETTINGS, STORE, STREAMS, render
from dashboard.queries import (
    SEVERITIES,
    SORTS,
    TRANSPORTS,
    BadRequest,
    SessionFilter,
    TimelineFilter,
)
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.errors import NotFoundError, StoreError
from mcp_proxy.render import frame_json, session_json
from mcp_proxy.store.queries import duration, session_status

EXT = r"{ext:(\.json)?}"
SID = r"{sid:[0-9a-f]{1,32}}"
KINDS = ("request", "response", "error", "notification", "stderr", "noise", "invalid", "batch")
#: Frames read around one request on a session too big to analyse whole.
SPAN_LIMIT = 5000
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
    r.add_post(f"/sessions/{SID}/analyse" + EXT, session_analyse)
    r.add_post(r"/annotations/{aid:\d+}" + EXT, annotation_edit)
    r.add_post(r"/annotations/{aid:\d+}/delete" + EXT, annotation_delete)
    r.add_delete(r"/annotations/{aid:\d+}" + EXT, annotation_delete)
    from dashboard import travel

    travel.add_routes(app)


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
    idx: dict[str, dict[int, Exchange]],
    http: dict[str, Any] | None,
    notes: list[dict[str, Any]],
    grouped: dict[int, list[dict[str, Any]]],
) -> dict[str, Any]:
    """A timeline row: the frame's header fields, a preview, and what the analysis says of it."""
    row: dict[str, Any] = {
        "seq": f["seq"],
        "ts": f["ts"],
        "direction": f["direction"],
        "channel": f["channel"],
        "kind": f["kind"],
        "method": f["method"],
        "id": f["msg_id"],
        "error_code": f["error_code"],
        "error_name": an.error_name(f["error_code"]) if f["error_code"] is not None else None,
        "size": f["size"],
        "complete": bool(f["complete"]),
        "preview": present.preview(f.get("head"), f["kind"]),
        "exchange": None,
        "belongs_to": None,
        "grouped": grouped.get(f["seq"], []),
        "http": None,
        "annotations": [_note_out(n) for n in notes],
    }
    ex = idx["request"].get(f["seq"]) if f["kind"] == "request" else None
    if ex is not None:
        row["exchange"] = _exchange_out(ex)
    else:
        owner = idx["owner"].get(f["seq"])
        if owner is not None:
            row["belongs_to"] = {
                "request_seq": owner.request_seq,
                "method": owner.method,
                "latency_ms": owner.latency_ms if owner.response_seq == f["seq"] else None,
            }
    if http is not None:
        row["http"] = {"id": http["id"], "method": http["method"], "status": http["status"]}
    return row


def _exchange_out(ex: Exchange) -> dict[str, Any]:
    """The analysis's view of one exchange, as rows and pages show it."""
    return {
        "index": ex.index,
        "method": ex.method,
        "name": ex.name,
        "request_seq": ex.request_seq,
        "response_seq": ex.response_seq,
        "latency_ms": ex.latency_ms,
        "outcome": ex.outcome,
        "outcome_label": an.outcome_label(ex),
        "style": an.OUTCOME_STYLE.get(ex.outcome, "err"),
        "error_code": ex.error_code,
        "error_message": ex.error_message,
        "error_class": ex.error_class,
        "progress": len(ex.progress_seqs),
        "logs": len(ex.log_seqs),
        "children": len(ex.children),
        "parent": ex.parent,
        "chain": ex.chain,
        "round": ex.round,
    }


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
        "spec": f.get("spec") or None,
        "explanation": f.get("explanation") or None,
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
    summaries = await q.analysis_summaries([r["id"] for r in rows])
    stale = [
        r
        for r in rows
        if session_status(r) != "live" and not an.service.is_fresh(r, summaries.get(r["id"]))
    ]
    request.app[ANALYST].schedule(stale)
    stale_ids = {r["id"] for r in stale}
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
        "sessions": [
            _session_out(r, {**counts[r["id"]], "analysed": r["id"] not in stale_ids}) for r in rows
        ],
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
    outcome = _opt(request, "outcome", an.OUTCOMES)
    return TimelineFilter(
        method=_opt(request, "method"),
        direction=_opt(request, "direction", ("c2s", "s2c")),
        # An outcome belongs to requests: only they are read (and then analysed) for it.
        kind="request" if outcome else _opt(request, "kind", KINDS),
        annotated=request.query.get("annotated") in ("1", "on", "true"),
        after=_int(request, "after", 0),
        limit=_int(request, "limit", 200, 1, 1000),
        outcome=outcome,
        every_frame=request.query.get("every") in ("1", "on", "true"),
    )


async def timeline_rows(
    request: web.Request, session: dict[str, Any], tf: TimelineFilter, *, live: bool = False
) -> tuple[list[dict[str, Any]], int | None]:
    """The rows of one timeline window, shared by the page, its twin and the live stream.

    Notifications that belong to a request on the same page (progress, logs, cancellation)
    are folded into that request's row unless ``every`` is asked for; with an outcome filter,
    windows are read until the page is full (at most ten of them).
    """
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = session["id"]
    whole = None if live else await analyst.whole(session)
    rows: list[dict[str, Any]] = []
    after = tf.after
    next_after: int | None = None
    for _ in range(10 if tf.outcome else 1):
        page, next_after = await q.timeline(sid, tf, after=after)
        partners = await q.partners(sid, page)
        analysis = whole or await analyst.window(session, [*page, *partners.values()])
        idx = an.exchange_index(analysis)
        on_page = {f["seq"] for f in page}
        grouped: dict[int, list[dict[str, Any]]] = {}
        if not tf.every_frame:
            for f in page:
                owner = idx["owner"].get(f["seq"])
                if (
                    f["kind"] == "notification"
                    and owner is not None
                    and owner.request_seq in on_page
                ):
                    grouped.setdefault(owner.request_seq, []).append(
                        {"seq": f["seq"], "method": f["method"]}
                    )
        folded = {g["seq"] for items in grouped.values() for g in items}
        http = await q.http_exchanges_by_id(
            {f["http_exchange_id"] for f in page if f["http_exchange_id"] is not None}
        )
        notes: dict[int, list[dict[str, Any]]] = {}
        if page:
            for a in await q.annotations_for(sid, sorted(on_page)):
                if a["frame_seq"] is not None:
                    notes.setdefault(a["frame_seq"], []).append(a)
        # (Not on live streams: there they would repeat on every poll; a reload shows them.)
        if session.get("transport") != "stdio" and not tf.narrowed() and not live:
            # First page: from the start; last page: to the end; else between the page's frames.
            since = page[0]["ts"] if (page and after) else None
            before = page[-1]["ts"] if (page and next_after is not None) else None
            rows.extend(_http_row(h) for h in await q.http_without_frames(sid, since, before))
        for f in page:
            if f["seq"] in folded:
                continue
            row = _frame_row(
                f,
                idx,
                http.get(f["http_exchange_id"]) if f["http_exchange_id"] else None,
                notes.get(f["seq"], []),
                grouped,
            )
            if tf.outcome and (row["exchange"] or {}).get("outcome") != tf.outcome:
                continue
            rows.append(row)
        if next_after is None or len(rows) >= tf.limit:
            break
        after = next_after
    rows.sort(key=lambda r: (r["ts"], r["seq"] or 0))
    return rows, next_after


def _http_row(h: dict[str, Any]) -> dict[str, Any]:
    """A timeline row for an HTTP exchange that carried no frame."""
    return {
        "seq": None,
        "ts": h["started_at"],
        "kind": "http",
        "channel": "http",
        "direction": "c2s",
        "http": {
            "id": h["id"],
            "method": h["method"],
            "status": h["status"],
            "url": h["url"],
            "outcome": h["outcome"],
            "error": h["error"],
        },
    }


async def session_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    s = await q.session(request.match_info["sid"])
    sid = s["id"]
    tf = _timeline_filter(request)
    rows, next_after = await timeline_rows(request, s, tf)
    found, fresh = await analyst.findings(s)
    counts = (await q.session_counts([sid]))[sid]
    notes = [_note_out(a) for a in await q.annotations_for(sid, []) if a["frame_seq"] is None]
    params = tf.as_params()
    data = {
        "session": _session_out(s, counts),
        "meta": s.get("meta"),
        "filters": {
            "method": tf.method,
            "direction": tf.direction,
            "kind": tf.kind,
            "outcome": tf.outcome,
            "annotated": tf.annotated,
            "every": tf.every_frame,
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
        "findings": [_finding_out(f) for f in found],
        "analysis": {
            "current": fresh,
            "inline": analyst.small(s),
            "inline_limit": an.INLINE_LIMIT,
        },
        "methods": await q.session_methods(sid),
    }
    return render(
        request,
        "session.html",
        data,
        kinds=KINDS,
        outcomes=an.OUTCOMES,
        live=session_status(s) == "live",
        filtered=bool(params),
        last_seq=max((r["seq"] for r in rows if r["seq"]), default=tf.after),
        live_url=_url(f"/sessions/{sid}/live", params),
        replay_on=bool(request.app[SETTINGS].get("replay")),
        recent=await _recent_others(request, sid),
    )


async def _recent_others(request: web.Request, sid: str) -> list[dict[str, Any]]:
    """Recent sessions to compare this one with (the "compare with…" form)."""
    rows, _ = await request.app[QUERIES].search_sessions(SessionFilter(limit=20))
    return [r for r in rows if r["id"] != sid]


async def session_analyse(request: web.Request) -> web.Response:
    """Analyse a session of any size now (a button: it can take seconds for a huge one)."""
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    form = await _form(request)
    await request.app[ANALYST].refresh(s)
    found, _fresh = await request.app[ANALYST].findings(s)
    return _changed(
        request,
        {"findings": [_finding_out(f) for f in found]},
        _back(form, f"/sessions/{s['id']}"),
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


async def _exchange_context(
    request: web.Request, s: dict[str, Any], request_frame: dict[str, Any]
) -> tuple[Any, Exchange | None, list[dict[str, Any]]]:
    """The analysis that covers one request, its exchange, and the rows it was made from.

    Small sessions: the whole-session analysis (chains, parents and children are complete).
    Larger ones: the span from the request to its answer (at most 5,000 frames), which holds
    everything that can belong to it.
    """
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = s["id"]
    analysis = await analyst.whole(s)
    rows: list[dict[str, Any]] = []
    if analysis is None:
        partner = (await q.partners(sid, [request_frame])).get(request_frame["seq"])
        last = partner["seq"] if partner else request_frame["seq"] + 200
        rows = await q.frames_between(sid, request_frame["seq"] - 1, last + 1, limit=SPAN_LIMIT)
        if partner and all(r["seq"] != partner["seq"] for r in rows):
            rows.append(partner)
        analysis = await analyst.window(s, rows)
    ex = an.exchange_index(analysis)["request"].get(request_frame["seq"])
    return analysis, ex, rows


async def frame_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s, f = await _session_and_frame(request)
    sid, seq = s["id"], f["seq"]
    http = None
    if f["http_exchange_id"] is not None:
        http = _http_out(await q.http_exchange(sid, f["http_exchange_id"]))
    prev_seq, next_seq = await q.neighbours(sid, seq)
    analysis = await request.app[ANALYST].whole(s)
    if analysis is None:
        partners = await q.partners(sid, [f])
        analysis = await request.app[ANALYST].window(s, [f, *partners.values()])
    idx = an.exchange_index(analysis)
    ex = idx["request"].get(seq) if f["kind"] == "request" else idx["owner"].get(seq)
    found, _fresh = await request.app[ANALYST].findings(s)
    data = {
        "session": _session_out(s),
        "frame": _frame_detail(f),
        "exchange": _exchange_out(ex) if ex else None,
        "http": http,
        "prev": prev_seq,
        "next": next_seq,
        "annotations": [
            _note_out(a) for a in await q.annotations_for(sid, [seq]) if a["frame_seq"]
        ],
        "findings": [_finding_out(x) for x in found if seq in (x.get("frame_seqs") or [])],
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
    """A request, its answer, and what the analysis attached to it: progress, logs,
    cancellation, server→client requests made meanwhile, the MRTR chain it is part of."""
    q = request.app[QUERIES]
    store = request.app[STORE]
    s, req = await _session_and_frame(request)
    sid = s["id"]
    if req["kind"] != "request":
        raise NotFoundError(f"frame #{req['seq']} is a {req['kind']}, not a request")
    analysis, ex, _rows = await _exchange_context(request, s, req)
    if ex is None:  # pragma: no cover - every request frame opens an exchange
        raise NotFoundError(f"no exchange starts at frame #{req['seq']}")
    answer = await store.frame(sid, ex.response_seq) if ex.response_seq else None
    belongs: list[tuple[int, str]] = [(x, "progress") for x in ex.progress_seqs]
    belongs += [(x, "log") for x in ex.log_seqs]
    belongs += [(x, "notification") for x in ex.other_seqs]
    if ex.cancel_seq is not None:
        belongs.append((ex.cancel_seq, "cancellation"))
    children = [analysis.exchanges[i] for i in ex.children if i < len(analysis.exchanges)]
    belongs += [(c.request_seq, "request made meanwhile") for c in children]
    related = []
    for seq, why in sorted(belongs)[:500]:
        f = await store.frame(sid, seq)
        if f is not None:
            related.append({**frame_json(f), "why": why})
    chain = None
    if ex.chain is not None and ex.chain < len(analysis.chains):
        c = analysis.chains[ex.chain]
        chain = {
            **c.as_dict(),
            "rounds": [
                _exchange_out(analysis.exchanges[i])
                for i in c.exchanges
                if i < len(analysis.exchanges)
            ],
        }
    parent = (
        _exchange_out(analysis.exchanges[ex.parent])
        if ex.parent is not None and ex.parent < len(analysis.exchanges)
        else None
    )
    proof = {req["seq"], *(x for x, _ in belongs)}
    if ex.response_seq is not None:
        proof.add(ex.response_seq)
    findings = [
        an.finding_dict(f)
        for f in analysis.findings
        if f.exchange == ex.index or proof & set(f.frame_seqs)
    ]
    http_ids = {x["http_exchange_id"] for x in (req, answer) if x and x["http_exchange_id"]}
    https = [_http_out(await q.http_exchange(sid, i)) for i in sorted(http_ids)]
    seqs = [req["seq"]] + ([answer["seq"]] if answer else [])
    data = {
        "session": _session_out(s),
        "exchange": _exchange_out(ex),
        "method": ex.method,
        "request": _frame_detail(req),
        "response": _frame_detail(answer) if answer else None,
        "related": related,
        "chain": chain,
        "parent": parent,
        "http": https,
        "findings": [_finding_out(f) for f in findings],
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
    """Per-method latency and outcomes, and findings by taxonomy area: for one session, or
    for the newest sessions (each analysed whole, cached; big ones are left out and said so)."""
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = request.match_info.get("sid")
    session = None
    skipped = 0
    if sid:
        session = await q.session(sid)
        analysis = await analyst.whole(session, force=True)
        analyses = [analysis] if analysis else []
        scope = "session"
    else:
        recent = _int(request, "recent", 50, 1, 500)
        rows, _cursor = await q.search_sessions(SessionFilter(limit=recent))
        analyses = []
        for row in rows:
            a = await analyst.whole(row)
            if a is None:
                skipped += 1
            else:
                analyses.append(a)
        scope = f"newest {len(rows)} sessions"
    numbers = an.stats_of(analyses)
    data = {
        "session": _session_out(session) if session else None,
        "scope": scope,
        "sessions_analysed": len(analyses),
        "sessions_skipped": skipped,
        "inline_limit": an.INLINE_LIMIT,
        "methods": numbers["methods"],
        "errors": numbers["errors"],
    }
    return render(request, "stats.html", data, chart=present.latency_svg(numbers["methods"]))


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
        tf.after = last
        while True:
            rows, _more = await timeline_rows(request, s, tf, live=True)
            if rows:
                tf.after = max(r["seq"] for r in rows if r["seq"])
                html = row_tpl.render(timeline=rows, session={"id": sid})
                await response.write(f"id: {tf.after}\n".encode())
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

    return await _follow(request, body)


async def sessions_live(request: web.Request) -> web.StreamResponse:
    """Counts of the sessions on a list page as they grow, and how many newer ones started."""
    q = request.app[QUERIES]
    ids = [i for i in request.query.get("ids", "").split(",") if i][:500]
    try:
        newest = float(request.query.get("newest") or 0)
    except ValueError as exc:
        raise BadRequest("newest must be a timestamp") from exc
    interval = max(request.app[SETTINGS]["poll_interval"], 0.5)

    async def body() -> web.StreamResponse:
        response = await _sse(request)
        sent: dict[str, Any] = {}
        while True:
            rows = await q.sessions_by_id(ids)
            counts = await q.session_counts([r["id"] for r in rows])
            updates = []
            for r in rows:
                c = counts[r["id"]]
                state = (
                    session_status(r),
                    r["frame_count"],
                    c["exchanges"],
                    tuple(c["findings"].items()),
                )
                if sent.get(r["id"]) != state:
                    sent[r["id"]] = state
                    updates.append(
                        {
                            "id": r["id"],
                            "status": state[0],
                            "frame_count": state[1],
                            "exchanges": state[2],
                            "findings": c["findings"],
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
