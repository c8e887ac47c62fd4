"""What every page family shares: reading query values, the JSON shapes of rows, forms, SSE.

Each view builds one JSON-able dictionary — the page's ``.json`` twin — and hands it to
:func:`dashboard.app.render`; the helpers here give the pieces of those dictionaries one shape
everywhere (a session, a finding, an exchange, an annotation look the same on every page).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import JINJA, STREAMS
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.errors import BadValueError, NotFoundError
from mcp_proxy.render import frame_json, session_json
from mcp_proxy.store.filters import check_id, parse_time
from mcp_proxy.store.pages import SessionCounts
from mcp_proxy.store.rows import AnnotationRow, HttpExchangeRow, SessionRow, ViewFrame

#: Bad input from a page: HTTP 400 (the library's error for a value it cannot use).
BadRequest = BadValueError

EXT = r"{ext:(\.json)?}"
SID = r"{sid:[0-9a-f]{1,32}}"
KINDS = (
    "request",
    "response",
    "error",
    "notification",
    "stderr",
    "noise",
    "invalid",
    "batch",
    "undecodable",
)
SESSION_FILTERS = ("q", "method", "text", "transport", "era", "status", "severity", "tag")


def error_response(request: web.Request, status: int, message: str) -> web.Response:
    if request.match_info.get("ext") == ".json" or wants_json(request):
        return web.json_response({"error": {"status": status, "message": message}}, status=status)
    html = request.app[JINJA].get_template("error.html").render(status=status, message=message)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def wants_json(request: web.Request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def path_id(request: web.Request, name: str, what: str) -> int:
    """A number from the URL path (a frame, an HTTP exchange, an annotation); 404 if absurd.

    The routes accept any digits; a number SQL cannot hold (≥ 2^63) names nothing that exists.
    """
    try:
        return check_id(request.match_info[name], what)
    except BadValueError as exc:
        raise NotFoundError(str(exc)) from exc


def opt(request: web.Request, name: str, allowed: tuple[str, ...] | None = None) -> str | None:
    value = request.query.get(name, "").strip()
    if not value:
        return None
    if allowed is not None and value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}")
    return value


def time_param(request: web.Request, name: str) -> float | None:
    value = opt(request, name)
    if value is None:
        return None
    return parse_time(value)


#: The largest frame number a query may carry: ``frames.seq`` is a 32-bit INTEGER on PostgreSQL
#: (a larger bound parameter is an "integer out of range" error there, not an empty result).
SEQ_MAX = 2**31 - 1


def int_param(request: web.Request, name: str, default: int, lo: int = 0, hi: int = 10**12) -> int:
    value = request.query.get(name, "").strip()
    if not value:
        return default
    try:
        n = int(value)
    except ValueError as exc:
        raise BadRequest(f"{name} must be a number") from exc
    return min(max(n, lo), hi)


def int_or(text: str, default: int, hi: int = 10**12) -> int:
    """``text`` as a number between 0 and ``hi`` (a header a client sends), else ``default``."""
    try:
        return min(max(int(text), 0), hi)
    except ValueError:
        return default


def url(path: str, params: dict[str, Any]) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "", False)}
    return path + ("?" + urlencode(clean) if clean else "")


def session_out(
    s: SessionRow, counts: SessionCounts | None = None, *, analysed: bool | None = None
) -> dict[str, Any]:
    """A session as the pages and their ``.json`` twins show it (a JSON and template edge):
    with its ``counts`` and, on the sessions page, whether its findings are current."""
    out = session_json(s)
    out.pop("meta", None)
    out["exit"] = present.exit_text(s.get("exit_code"), s.get("exit_signal"))
    if counts is not None:
        out.update(counts)
    if analysed is not None:
        out["analysed"] = analysed
    return out


def exchange_out(ex: Exchange) -> dict[str, Any]:
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
        # a task this request created (its lifecycle and whole duration), or the creating
        # request of the task this one is about
        "task": ex.task.as_dict() | {"lifecycle_text": ex.task.lifecycle_text()}
        if ex.task is not None
        else None,
        "task_of": ex.task_of,
    }


def note_out(a: AnnotationRow) -> dict[str, Any]:
    return {
        "id": a["id"],
        "session_id": a["session_id"],
        "frame_seq": a["frame_seq"],
        "tag": a["tag"],
        "note": a["note"],
        "created_at": a["created_at"],
        "updated_at": a["updated_at"],
    }


def finding_out(f: dict[str, Any]) -> dict[str, Any]:
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


def frame_detail(f: ViewFrame) -> dict[str, Any]:
    out = frame_json(f)
    out["partial_parse"] = bool(f.get("partial_parse"))
    return out


def http_out(h: HttpExchangeRow) -> dict[str, Any]:
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


async def read_form(request: web.Request) -> dict[str, str]:
    """The fields of a form post, or of its JSON twin: a flat object of text (or numbers).

    A JSON body nested deeper than the parser follows is refused for what it is (not blamed
    on a recorded frame by the RecursionError fallback), and so is a field that is not text.
    """
    what = _form_name(request)
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except RecursionError as exc:
            raise BadRequest(
                f"the {what} body is nested too deeply: send a flat JSON object of text fields"
            ) from exc
        except ValueError as exc:
            raise BadRequest("the body is not JSON") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        for key, value in body.items():
            if isinstance(value, dict | list):
                raise BadRequest(f"{key!r} must be text in the {what} body, not a JSON value")
        return {k: str(v) for k, v in body.items() if v is not None}
    form = await request.post()
    return {k: v for k, v in form.items() if isinstance(v, str)}


def _form_name(request: web.Request) -> str:
    """What a form post is about, for its error messages ("annotation", "replay", …)."""
    parts = [p for p in request.path.split("/") if p and not p.isdigit()]
    if any(p.startswith("annotations") for p in parts):
        return "annotation"
    return parts[-1].removesuffix(".json") if parts else "request"


def back(form: dict[str, str], default: str) -> str:
    """Where to go after a form post: a local path only (no open redirect)."""
    nxt = form.get("next", "")
    if nxt.startswith("/") and not nxt.startswith("//") and "\\" not in nxt:
        return nxt
    return default


def changed(request: web.Request, payload: dict[str, Any], back: str, status: int = 200):
    if request.match_info.get("ext") == ".json" or wants_json(request):
        return web.json_response(payload, status=status, dumps=present.dumps)
    return web.Response(status=303, headers={"Location": back})


async def sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, event: str, data: Any) -> None:
    payload = present.dumps(data)
    await response.write(f"event: {event}\ndata: {payload}\n\n".encode())


def client_gone(request: web.Request) -> bool:
    """Whether the browser that opened this request has left (its connection is closing)."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def follow(
    request: web.Request, body: Callable[[web.StreamResponse], Awaitable[None]]
) -> web.StreamResponse:
    """Open a live stream and run its loop (``body``) as a tracked task so shutdown can end it.

    A browser that leaves the page (closes the tab, navigates away, drops the connection) ends
    the stream quietly: the loop stops at its next turn (``client_gone``), or at the write
    that finds the connection reset — never a traceback on the dashboard's stderr.
    """
    task = asyncio.current_task()
    streams = request.app[STREAMS]
    if task is not None:
        streams.add(task)
    response = await sse(request)
    try:
        await body(response)
    except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
        pass
    finally:
        if task is not None:
            streams.discard(task)
    return response
