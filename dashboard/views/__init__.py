"""The dashboard's pages, one module per page family (Datasette's ``views/`` is the model).

URLs (each page also answers with ``.json`` appended to its path):

- ``/sessions`` — search, filters, sort, keyset pages (:mod:`.sessions`)
- ``/sessions/{id}`` — the timeline (``?after=SEQ`` pages, filters on method/direction/kind)
  (:mod:`.session`)
- ``/sessions/{id}/exchanges/{seq}`` — a request with its answer and what belongs to it
- ``/sessions/{id}/frames/{seq}`` — one frame; ``…/raw`` for its exact bytes
- ``/sessions/{id}/http/{hid}`` — one HTTP request/response with headers and timings
  (``hid``: the exchange's database-wide id)
  (those three: :mod:`.details`)
- ``/sessions/{id}/waterfall`` — the exchanges as bars on a time axis (:mod:`.waterfall`)
- ``/timeline`` — one host's servers in one view, a lane per server (:mod:`.host`)
- ``/stats``, ``/sessions/{id}/stats`` — latency distribution and error counts (:mod:`.stats`)
- ``/sessions/live``, ``/sessions/{id}/live`` — Server-Sent Events for pages that follow a recording
- ``/annotations/…`` — tags and notes (:mod:`.notes`)
- ``/intercepts`` — messages held by ``record --intercept``, decided here (:mod:`.intercepts`)

Shared helpers are in :mod:`._common`. The export, diff and replay pages are
:mod:`dashboard.travel`'s.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from dashboard.views import (
    details,
    host,
    intercepts,
    notes,
    session,
    sessions,
    stats,
    waterfall,
)
from dashboard.views._common import EXT, SID, BadRequest, error_response
from mcp_proxy.errors import NotFoundError, StoreError, UserError


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get("/", sessions.index)
    r.add_get("/sessions/live", sessions.sessions_live)
    r.add_get("/sessions" + EXT, sessions.sessions_page)
    r.add_get("/stats" + EXT, stats.stats_page)
    r.add_get("/timeline" + EXT, host.host_timeline)
    r.add_get(f"/sessions/{SID}/live", session.session_live)
    r.add_get(f"/sessions/{SID}/stats" + EXT, stats.stats_page)
    r.add_get(f"/sessions/{SID}/frames/{{seq:\\d+}}/raw", details.frame_raw)
    r.add_get(f"/sessions/{SID}/frames/{{seq:\\d+}}" + EXT, details.frame_page)
    r.add_get(f"/sessions/{SID}/exchanges/{{seq:\\d+}}" + EXT, details.exchange_page)
    r.add_get(f"/sessions/{SID}/http/{{hid:\\d+}}" + EXT, details.http_page)
    r.add_get(f"/sessions/{SID}/waterfall" + EXT, waterfall.waterfall_page)
    r.add_get(f"/sessions/{SID}" + EXT, session.session_page)
    r.add_post(f"/sessions/{SID}/annotations" + EXT, notes.annotation_add)
    r.add_post(f"/sessions/{SID}/analyse" + EXT, session.session_analyse)
    r.add_post(r"/annotations/{aid:\d+}" + EXT, notes.annotation_edit)
    r.add_post(r"/annotations/{aid:\d+}/delete" + EXT, notes.annotation_delete)
    r.add_delete(r"/annotations/{aid:\d+}" + EXT, notes.annotation_delete)
    r.add_get("/intercepts" + EXT, intercepts.intercepts_page)
    r.add_post(r"/intercepts/{iid:\d+}" + EXT, intercepts.intercept_resolve)
    from dashboard import travel

    travel.add_routes(app)


@web.middleware
async def errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Map our exceptions to HTTP statuses with one clear line (no tracebacks in pages)."""
    try:
        return await handler(request)
    except NotFoundError as exc:
        return error_response(request, 404, str(exc))
    except (BadRequest, UserError) as exc:
        return error_response(request, 400, str(exc))
    except StoreError as exc:
        return error_response(request, 503, f"database error: {exc}")
    except RecursionError:
        # A recorded frame nested deeper than a view's code can follow (JSON 1,000+ levels
        # deep is recordable). One clear line instead of a 500; the frame's own page and its
        # raw bytes stay viewable.
        return error_response(
            request,
            422,
            "a frame in this session is nested too deeply for this view;"
            " open the frame itself to see its exact bytes",
        )
