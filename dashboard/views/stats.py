"""Latency and outcome statistics: for one session, or across the newest sessions."""

from __future__ import annotations

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, QUERIES, render
from dashboard.views._common import int_param, session_out
from mcp_proxy.analysis import service
from mcp_proxy.store.filters import SessionFilter


async def stats_page(request: web.Request) -> web.Response:
    """Per-method latency and outcomes, and findings by taxonomy area: for one session, or
    for the newest sessions. The numbers are ``mcptape stats``'s (one streaming pass per
    session, :func:`mcp_proxy.analysis.service.sessions_stats`); the findings are the stored
    ones, analysed first when stale (for the newest sessions only those small enough to
    analyse inline; big ones are left out and said so)."""
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = request.match_info.get("sid")
    session = None
    skipped = 0
    if sid:
        session = await q.session(sid)
        chosen = [session]
        scope = "session"
    else:
        recent = int_param(request, "recent", 50, 1, 500)
        rows, _cursor = await q.search_sessions(SessionFilter(limit=recent))
        chosen = [row for row in rows if analyst.small(row)]
        skipped = len(rows) - len(chosen)
        scope = f"newest {len(rows)} sessions"
    records = []
    for s in chosen:
        found, _fresh = await service.findings_view(analyst.store, s, analyse_if_stale=True)
        records.extend(found)
    methods = an.method_rows(await service.sessions_stats(analyst.store, chosen))
    data = {
        "session": session_out(session) if session else None,
        "scope": scope,
        "sessions_analysed": len(chosen),
        "sessions_skipped": skipped,
        "inline_limit": an.INLINE_LIMIT,
        "methods": methods,
        "errors": an.findings_by_area(records),
    }
    return render(request, "stats.html", data, chart=present.latency_svg(methods))
