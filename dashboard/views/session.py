"""One session's timeline: the page, its windows, the analyse button and the live stream."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, JINJA, QUERIES, SETTINGS, STORE, render
from dashboard.travel import export_links
from dashboard.views import intercepts
from dashboard.views._common import (
    KINDS,
    SEQ_MAX,
    back,
    changed,
    client_gone,
    exchange_out,
    finding_out,
    follow,
    int_or,
    int_param,
    note_out,
    opt,
    read_form,
    send,
    session_out,
    url,
)
from dashboard.views.cost import tools_list_cost
from mcp_proxy import tokens
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.render import folded_poll
from mcp_proxy.store.filters import SessionFilter, TimelineFilter
from mcp_proxy.store.queries import session_status
from mcp_proxy.store.rows import AnnotationRow, HttpExchangeRow, SessionRow, TimelineFrame


def _timeline_filter(request: web.Request) -> TimelineFilter:
    outcome = opt(request, "outcome", an.OUTCOMES)
    return TimelineFilter(
        method=opt(request, "method"),
        direction=opt(request, "direction", ("c2s", "s2c")),
        # An outcome belongs to requests: only they are read (and then analysed) for it.
        kind="request" if outcome else opt(request, "kind", KINDS),
        annotated=request.query.get("annotated") in ("1", "on", "true"),
        after=int_param(request, "after", 0, hi=SEQ_MAX),
        limit=int_param(request, "limit", 200, 1, 1000),
        outcome=outcome,
        every_frame=request.query.get("every") in ("1", "on", "true"),
    )


async def timeline_rows(
    request: web.Request, session: SessionRow, tf: TimelineFilter, *, live: bool = False
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
        # A task's plain polls fold into the row of the call that created the task, as
        # ``show -x`` folds them (its row shows the lifecycle and counts them).
        polls: dict[int, set[int]] = {}
        if not tf.every_frame:
            for f in page:
                ex = idx["request"].get(f["seq"]) or idx["owner"].get(f["seq"])
                if ex is None or ex.task_of is None or ex.task_of not in on_page:
                    continue
                if folded_poll(ex):
                    polls.setdefault(ex.task_of, set()).add(ex.request_seq)
                    folded.add(f["seq"])
        http = await q.http_exchanges_by_id(
            {f["http_exchange_id"] for f in page if f["http_exchange_id"] is not None}
        )
        notes: dict[int, list[AnnotationRow]] = {}
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
            row["polls"] = len(polls.get(f["seq"], ()))
            if tf.outcome and (row["exchange"] or {}).get("outcome") != tf.outcome:
                continue
            rows.append(row)
        if next_after is None or len(rows) >= tf.limit:
            break
        after = next_after
    rows.sort(key=lambda r: (r["ts"], r["seq"] or 0))
    return rows, next_after


def _frame_row(
    f: TimelineFrame,
    idx: dict[str, dict[int, Exchange]],
    http: HttpExchangeRow | None,
    notes: list[AnnotationRow],
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
        "tokens": tokens.estimate(int(f["size"])) if f["channel"] != "stderr" else None,
        "complete": bool(f["complete"]),
        "preview": present.preview(f.get("head"), f["kind"]),
        "exchange": None,
        "belongs_to": None,
        "grouped": grouped.get(f["seq"], []),
        "http": None,
        "annotations": [note_out(n) for n in notes],
    }
    ex = idx["request"].get(f["seq"]) if f["kind"] == "request" else None
    if ex is not None:
        row["exchange"] = exchange_out(ex)
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


def _http_row(h: HttpExchangeRow) -> dict[str, Any]:
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
    notes = [note_out(a) for a in await q.annotations_for(sid, []) if a["frame_seq"] is None]
    params = tf.as_params()
    data = {
        "session": session_out(s, counts),
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
        "next_url": url(
            f"/sessions/{sid}",
            {**params, "limit": tf.limit if tf.limit != 200 else None, "after": next_after},
        )
        if next_after
        else None,
        "annotations": notes,
        "findings": [finding_out(f) for f in found],
        "analysis": {
            "current": fresh,
            "inline": analyst.small(s),
            "inline_limit": an.INLINE_LIMIT,
        },
        "methods": await q.session_methods(sid),
        "context_cost": await tools_list_cost(request, sid),
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
        live_url=url(f"/sessions/{sid}/live", params),
        replay_on=bool(request.app[SETTINGS].get("replay")),
        held=await intercepts.held_in(request, sid),
        recent=await _recent_others(request, sid),
        exports=export_links(s),
        selected=int_param(request, "x", 0, hi=SEQ_MAX) or None,
    )


async def _recent_others(request: web.Request, sid: str) -> list[SessionRow]:
    """Recent sessions to compare this one with (the "compare with…" form)."""
    rows, _ = await request.app[QUERIES].search_sessions(SessionFilter(limit=20))
    return [r for r in rows if r["id"] != sid]


async def session_analyse(request: web.Request) -> web.Response:
    """Analyse a session of any size now (a button: it can take seconds for a huge one)."""
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    form = await read_form(request)
    found, _fresh = await request.app[ANALYST].refresh(s)
    return changed(
        request,
        {"findings": [finding_out(f) for f in found]},
        back(form, f"/sessions/{s['id']}"),
    )


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
    last = int_param(request, "after", 0, hi=SEQ_MAX)
    if "Last-Event-ID" in request.headers:
        last = max(last, int_or(request.headers["Last-Event-ID"], 0, SEQ_MAX))
    interval = request.app[SETTINGS]["poll_interval"]
    row_tpl = request.app[JINJA].get_template("_timeline_rows.html")

    async def body(response: web.StreamResponse) -> None:
        idle = 0.0
        tf.after = last
        while not client_gone(request):
            rows, _more = await timeline_rows(request, s, tf, live=True)
            if rows:
                tf.after = max(r["seq"] for r in rows if r["seq"])
                html = row_tpl.render(timeline=rows, session={"id": sid})
                await response.write(f"id: {tf.after}\n".encode())
                await send(response, "frames", {"rows": rows, "html": html})
                idle = 0.0
                continue
            cur = await request.app[STORE].get_session(sid)
            status = session_status(cur) if cur else "gone"
            if status != "live":
                await send(
                    response,
                    "status",
                    {"status": status, "frame_count": cur["frame_count"] if cur else None},
                )
                return
            idle += interval
            if idle >= 15:
                await response.write(b": keep-alive\n\n")
                idle = 0.0
            await asyncio.sleep(interval)

    return await follow(request, body)
