"""The "Intercepted" page: messages a relay holds (``record --intercept``), and their decision.

``/intercepts`` (and ``.json``) lists what is held now, oldest first, each with its message in
an editor and the four decisions; ``/sessions/{id}`` shows a badge when its session has held
messages. ``POST /intercepts/{id}`` decides one (the same checks as ``mcptape intercept
resolve``: :mod:`mcp_proxy.intercept.verdicts`), with the security of every form — the token
in the request, Origin/Host checks (``dashboard/security.py``). A dashboard bound beyond
loopback shows the page but cannot decide unless it was started with ``--allow-remote``.

The store is the one :class:`~mcp_proxy.store.intercepts.InterceptTable` (sync), used on a
worker thread.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from dashboard.app import SETTINGS, render
from dashboard.views._common import (
    BadRequest,
    back,
    changed,
    error_response,
    path_id,
    read_form,
)
from mcp_proxy.errors import NotFoundError
from mcp_proxy.intercept import verdicts
from mcp_proxy.store.intercepts import HeldRow, InterceptTable

TABLE = web.AppKey("intercepts", InterceptTable)
CHOICES = ("forward", "edit", "answer", "drop")


def table(request: web.Request) -> InterceptTable:
    return request.app[TABLE]


async def held_in(request: web.Request, session_id: str) -> int:
    """Messages of one session held now (the session page's badge)."""
    return await asyncio.to_thread(table(request).held_in, session_id)


async def intercepts_page(request: web.Request) -> web.Response:
    rows, count = await asyncio.to_thread(table(request).held)
    data = {
        "held": [r.listed() for r in rows],
        "count": count,
        "can_resolve": bool(request.app[SETTINGS]["intercept"]),
    }
    return render(request, "intercepts.html", data, pretty={r.id: _pretty(r) for r in rows})


def _pretty(r: HeldRow) -> str:
    """The held message indented for the editor (its own text when it is not plain JSON)."""
    text = r.original.decode("utf-8", "replace").rstrip("\r\n")
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


async def intercept_resolve(request: web.Request) -> web.Response:
    if not request.app[SETTINGS]["intercept"]:
        return error_response(
            request,
            403,
            "this dashboard listens beyond loopback: start it with --allow-remote to"
            " resolve intercepts",
        )
    iid = path_id(request, "iid", "intercept")
    form = await read_form(request)
    decision = form.get("decision", "")
    if decision not in CHOICES:
        raise BadRequest(f"decision must be one of {', '.join(CHOICES)}")
    t = table(request)
    row = await asyncio.to_thread(t.get, iid)
    if row is None:
        raise NotFoundError(f"no held message #{iid}")
    payload: bytes | None = None
    if decision == "edit":
        payload = verdicts.edited_message(form.get("message", ""))
    elif decision == "answer":
        payload = verdicts.answer_message(row.original, form.get("message", ""))
    who = f"dashboard ({request.remote or 'local'})"
    done = await asyncio.to_thread(t.resolve, iid, decision, payload, who)
    out = {"id": done.id, "decision": done.decision, "by": done.resolved_by}
    return changed(request, {"resolved": out}, back(form, "/intercepts"))
