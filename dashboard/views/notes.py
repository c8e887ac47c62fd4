"""Adding, editing and deleting tags and notes (forms and their JSON equivalents)."""

from __future__ import annotations

from aiohttp import web

from dashboard.app import QUERIES
from dashboard.views._common import back, changed, note_out, path_id, read_form
from mcp_proxy.store.filters import check_id


async def annotation_add(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    form = await read_form(request)
    seq_text = form.get("frame_seq", "").strip()
    frame_seq = check_id(seq_text, "frame_seq") if seq_text else None
    a = await q.add_annotation(
        s["id"], frame_seq=frame_seq, tag=form.get("tag"), note=form.get("note")
    )
    return changed(request, {"annotation": note_out(a)}, back(form, f"/sessions/{s['id']}"), 201)


async def annotation_edit(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    form = await read_form(request)
    aid = path_id(request, "aid", "annotation")
    a = await q.update_annotation(aid, tag=form.get("tag"), note=form.get("note"))
    return changed(request, {"annotation": note_out(a)}, back(form, f"/sessions/{a['session_id']}"))


async def annotation_delete(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    form = await read_form(request) if request.method == "POST" else {}
    a = await q.delete_annotation(path_id(request, "aid", "annotation"))
    return changed(request, {"deleted": note_out(a)}, back(form, f"/sessions/{a['session_id']}"))
