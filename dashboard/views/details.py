"""One frame, one exchange (a request with everything that belongs to it), one HTTP exchange."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dashboard import analysis as an
from dashboard import copies, present
from dashboard.app import ANALYST, QUERIES, STORE, render
from dashboard.views._common import (
    exchange_out,
    finding_out,
    frame_detail,
    http_out,
    note_out,
    path_id,
    session_out,
)
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.errors import NotFoundError
from mcp_proxy.limits import SPAN_LIMIT
from mcp_proxy.render import frame_json
from mcp_proxy.store.rows import SessionRow, ViewFrame


async def _session_and_frame(request: web.Request) -> tuple[SessionRow, ViewFrame]:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    seq = path_id(request, "seq", "frame")
    f = await request.app[STORE].frame(s["id"], seq)
    if f is None:
        raise NotFoundError(f"no frame #{seq} in session {s['id'][:12]}")
    return s, f


async def _exchange_context(
    request: web.Request, s: SessionRow, request_frame: ViewFrame
) -> tuple[Any, Exchange | None, list[ViewFrame]]:
    """The analysis that covers one request, its exchange, and the rows it was made from.

    Small sessions: the whole-session analysis (chains, parents and children are complete).
    Larger ones: the span from the request to its answer (at most 5,000 frames), which holds
    everything that can belong to it.
    """
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = s["id"]
    analysis = await analyst.whole(s)
    rows: list[ViewFrame] = []
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
        http = http_out(await q.http_exchange(sid, f["http_exchange_id"]))
    prev_seq, next_seq = await q.neighbours(sid, seq)
    analysis = await request.app[ANALYST].whole(s)
    if analysis is None:
        partners = await q.partners(sid, [f])
        analysis = await request.app[ANALYST].window(s, [f, *partners.values()])
    idx = an.exchange_index(analysis)
    ex = idx["request"].get(seq) if f["kind"] == "request" else idx["owner"].get(seq)
    found, _fresh = await request.app[ANALYST].findings(s)
    data = {
        "session": session_out(s),
        "frame": frame_detail(f),
        "exchange": exchange_out(ex) if ex else None,
        "http": http,
        "prev": prev_seq,
        "next": next_seq,
        "annotations": [note_out(a) for a in await q.annotations_for(sid, [seq]) if a["frame_seq"]],
        "findings": [finding_out(x) for x in found if seq in (x.get("frame_seqs") or [])],
    }
    return render(
        request,
        "frame.html",
        data,
        body=present.frame_body(f),
        copies=copies.frame_copies(f, f"copy-{seq}"),
    )


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
    shown = sorted(belongs)[:500]
    found = {f["seq"]: f for f in await store.frames_by_seq(sid, [seq for seq, _ in shown])}
    related = [{**frame_json(found[seq]), "why": why} for seq, why in shown if seq in found]
    chain = None
    if ex.chain is not None and ex.chain < len(analysis.chains):
        c = analysis.chains[ex.chain]
        chain = {
            **c.as_dict(),
            "rounds": [
                exchange_out(analysis.exchanges[i])
                for i in c.exchanges
                if i < len(analysis.exchanges)
            ],
        }
    parent = (
        exchange_out(analysis.exchanges[ex.parent])
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
    by_id = await q.http_exchanges_by_id(http_ids)
    https = [http_out(by_id[i]) for i in sorted(by_id) if by_id[i]["session_id"] == sid]
    seqs = [req["seq"]] + ([answer["seq"]] if answer else [])
    curl = None
    if req["http_exchange_id"] in by_id:
        curl = copies.curl_command(by_id[req["http_exchange_id"]], bytes(req["raw"] or b""))
    snippet = copies.jsonl_snippet(s, [req, answer] if answer else [req])
    data = {
        "session": session_out(s),
        "exchange": exchange_out(ex),
        "method": ex.method,
        "request": frame_detail(req),
        "response": frame_detail(answer) if answer else None,
        "related": related,
        "chain": chain,
        "parent": parent,
        "http": https,
        "findings": [finding_out(f) for f in findings],
        "annotations": [
            note_out(a) for a in await q.annotations_for(sid, seqs) if a["frame_seq"] is not None
        ],
    }
    return render(
        request,
        "exchange.html",
        data,
        req_body=present.frame_body(req),
        resp_body=present.frame_body(answer) if answer else None,
        req_copies=copies.frame_copies(req, f"copy-{req['seq']}"),
        resp_copies=copies.frame_copies(answer, f"copy-{answer['seq']}") if answer else [],
        curl=curl,
        snippet=snippet,
    )


async def http_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    h = await q.http_exchange(s["id"], path_id(request, "hid", "HTTP exchange"))
    frames = await q.frames_of_http_exchange(h["id"])
    data = {
        "session": session_out(s),
        "http": http_out(h),
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
