"""A session's context cost: what its ``tools/list`` answer costs a model's context, estimated
(:mod:`mcp_proxy.tokens`), whole and per tool — the usual complaint is a server whose tool
descriptions eat the context."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aiohttp import web

from dashboard.app import QUERIES, STORE
from mcp_proxy import tokens
from mcp_proxy.limits import COST_PARSE_LIMIT
from mcp_proxy.render import parse_json_safely
from mcp_proxy.store.filters import TimelineFilter

#: Tools listed by name on the session page (the dearest first); the twin has them all.
SHOWN_TOOLS = 8


async def tools_list_cost(request: web.Request, sid: str) -> dict[str, Any] | None:
    """The cost of the session's last answered ``tools/list`` (None when it has none)."""
    q = request.app[QUERIES]
    tf = TimelineFilter(method="tools/list", kind="request", limit=20)
    asked, _more = await q.timeline(sid, tf)
    answers = await q.partners(sid, asked)
    answered = [a for r in asked if (a := answers.get(r["seq"])) and a["kind"] == "response"]
    if not answered:
        return None
    last = answered[-1]
    out: dict[str, Any] = {
        "how": tokens.METHOD,
        "response_seq": last["seq"],
        "listings": len(answered),
        "tokens": tokens.estimate(int(last["size"])),
        "tools": None,
        "tool_count": None,
        "more_pages": False,
        "shown": SHOWN_TOOLS,
    }
    if int(last["size"]) <= COST_PARSE_LIMIT:
        frame = await request.app[STORE].frame(sid, last["seq"])
        msg = parse_json_safely(frame["raw"]) if frame else None
        result = msg.get("result") if isinstance(msg, dict) else None
        if isinstance(result, dict):
            costs = tokens.tools_cost(result)
            out["tools"] = [asdict(c) for c in costs]
            out["tool_count"] = len(costs)
            out["more_pages"] = bool(result.get("nextCursor"))
    return out
