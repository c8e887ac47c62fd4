"""The sessions list: search, filters, sort, keyset pages, and its live counts."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, QUERIES, SETTINGS, render
from dashboard.views._common import (
    SESSION_FILTERS,
    BadRequest,
    client_gone,
    follow,
    int_param,
    opt,
    send,
    session_out,
    time_param,
    url,
)
from mcp_proxy.store.filters import SEVERITIES, SORTS, TRANSPORTS, SessionFilter
from mcp_proxy.store.queries import duration, session_status


async def index(request: web.Request) -> web.StreamResponse:
    return web.Response(status=303, headers={"Location": "/sessions"})


def session_filter(request: web.Request) -> SessionFilter:
    return SessionFilter(
        q=opt(request, "q"),
        method=opt(request, "method"),
        text=opt(request, "text"),
        transport=opt(request, "transport", TRANSPORTS),
        era=opt(request, "era"),
        status=opt(request, "status", ("live", "ended", "crashed")),
        severity=opt(request, "severity", SEVERITIES),
        tag=opt(request, "tag"),
        since=time_param(request, "since"),
        until=time_param(request, "until"),
        sort=opt(request, "sort", SORTS) or "newest",
        cursor=opt(request, "cursor"),
        limit=int_param(request, "limit", 50, 1, 500),
    )


async def sessions_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    f = session_filter(request)
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
            session_out(r, counts[r["id"]], analysed=r["id"] not in stale_ids) for r in rows
        ],
        "next": cursor,
        "next_url": url(
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


async def sessions_live(request: web.Request) -> web.StreamResponse:
    """Counts of the sessions on a list page as they grow, and how many newer ones started."""
    q = request.app[QUERIES]
    ids = [i for i in request.query.get("ids", "").split(",") if i][:500]
    try:
        newest = float(request.query.get("newest") or 0)
    except ValueError as exc:
        raise BadRequest("newest must be a timestamp") from exc
    interval = max(request.app[SETTINGS]["poll_interval"], 0.5)

    async def body(response: web.StreamResponse) -> None:
        sent: dict[str, Any] = {}
        while not client_gone(request):
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
                await send(response, "sessions", {"updates": updates, "newer": newer})
            await asyncio.sleep(interval)

    return await follow(request, body)
