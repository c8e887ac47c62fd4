"""Latency and outcome statistics: for one session, or across the newest sessions."""

from __future__ import annotations

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, QUERIES, render
from dashboard.views._common import int_param, session_out
from mcp_proxy.store.filters import SessionFilter


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
        recent = int_param(request, "recent", 50, 1, 500)
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
        "session": session_out(session) if session else None,
        "scope": scope,
        "sessions_analysed": len(analyses),
        "sessions_skipped": skipped,
        "inline_limit": an.INLINE_LIMIT,
        "methods": numbers["methods"],
        "errors": numbers["errors"],
    }
    return render(request, "stats.html", data, chart=present.latency_svg(numbers["methods"]))
