"""A session's context cost: what its ``tools/list`` answer costs a model's context, estimated
(:mod:`mcp_proxy.tokens`), whole and per tool — the usual complaint is a server whose tool
descriptions eat the context."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dashboard.app import QUERIES, STORE
from mcp_proxy import tokens
from mcp_proxy.limits import COST_PARSE_LIMIT
from mcp_proxy.render import parse_json_safely

#: Tools listed by name on the session page (the dearest first); the twin has them all.
SHOWN_TOOLS = 8


async def tools_list_cost(request: web.Request, sid: str) -> dict[str, Any] | None:
    """The cost of the session's last answered ``tools/list`` (None when it has none)."""
    answered = await request.app[QUERIES].tools_list_answers(sid)
    if not answered:
        return None
    last = answered[-1]
    result = None
    if int(last["size"]) <= COST_PARSE_LIMIT:
        frame = await request.app[STORE].frame(sid, last["seq"])
        raw = frame.get("raw") if frame else None
        msg = parse_json_safely(raw) if raw is not None else None
        result = msg.get("result") if isinstance(msg, dict) else None
    cost = tokens.listing_cost(int(last["size"]), result, len(answered))
    return {**cost, "response_seq": last["seq"], "shown": SHOWN_TOOLS}
