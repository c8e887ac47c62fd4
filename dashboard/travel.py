"""Recordings leaving the dashboard and coming back: export downloads, the diff page, replay.

- ``GET /sessions/{id}/export.{format}``: what ``mcptape export --format`` writes, as a
  download, for every writable format of the registry (``mcptape formats``); a format that
  cannot hold the session's transport (HAR and a stdio session) answers 409 with the reason.
- ``GET /diff?a=ID&b=ID`` (+ ``.json``): two sessions aligned exchange by exchange.
- ``GET /sessions/{id}/replay`` shows the exact command a replay would run (stdio) or the URL
  it would POST to (HTTP: the recorded upstream, editable on the page);
  ``POST /sessions/{id}/replay`` (token in the request *and* ``confirm=yes``; ``upstream=URL``
  for HTTP sessions) re-runs the recorded host traffic against that command or server, records
  it as a new session and redirects to the diff between the original and the replay. Replay
  starts processes and sends requests from this machine, so it is off (403) when the dashboard
  is bound beyond loopback.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import socket
from typing import Any

from aiohttp import web

from dashboard import present
from dashboard.app import JINJA, QUERIES, SETTINGS, STORE, render
from dashboard.views._common import BadRequest
from mcp_proxy.errors import UserError
from mcp_proxy.recording.registry import Format, downloads, get_format
from mcp_proxy.store.filters import SessionFilter
from mcp_proxy.store.rows import SessionRow

SID = r"{sid:[0-9a-f]{1,32}}"
EXT = r"{ext:(\.json)?}"
#: Seconds a replay may take as a whole (the replay's own per-response timeout is shorter).
REPLAY_TIMEOUT = 60.0
#: Seconds to wait for one response during a replay.
REPLAY_STEP_TIMEOUT = 15.0
REPLAY_OFF = (
    "Replay is disabled: this dashboard is bound beyond loopback, and a replay starts"
    " processes on this machine. Run `mcptape replay` locally, or serve the dashboard on"
    " 127.0.0.1."
)


def add_routes(app: web.Application) -> None:
    r = app.router
    r.add_get(f"/sessions/{SID}/export.{{fmt:[a-z0-9]+}}", export_download)
    r.add_get("/diff" + EXT, diff_page)
    r.add_get(f"/sessions/{SID}/replay" + EXT, replay_confirm)
    r.add_post(f"/sessions/{SID}/replay" + EXT, replay_run)


def _error(request: web.Request, status: int, message: str) -> web.Response:
    if request.match_info.get("ext") == ".json" or "application/json" in request.headers.get(
        "Accept", ""
    ):
        return web.json_response({"error": {"status": status, "message": message}}, status=status)
    html = request.app[JINJA].get_template("error.html").render(status=status, message=message)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def replay_enabled(app: web.Application) -> bool:
    return bool(app[SETTINGS].get("replay", False))


def replay_upstream(session: SessionRow) -> str | None:
    """The URL an HTTP session was recorded against (the default target of its replay)."""
    url = session.get("upstream")
    if session.get("transport") == "stdio" or not isinstance(url, str):
        return None
    return url if url.startswith(("http://", "https://")) else None


def _check_url(url: str) -> str | None:
    """Why ``url`` cannot be replayed to (None when it can)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f"{url!r} is not a URL."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL of an MCP server."
    return None


def replay_argv(session: SessionRow) -> list[str] | None:
    """The argv a replay of ``session`` runs: the command it was recorded with (stdio only)."""
    cmd = session.get("command")
    if session.get("transport") != "stdio" or not isinstance(cmd, list) or not cmd:
        return None
    if not all(isinstance(part, str) for part in cmd):
        return None
    return list(cmd)


# ---------------------------------------------------------------------------------- export


def _filename(s: SessionRow, fmt: Format) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", str(s.get("name") or "")).strip("-.")[:40]
    stem = f"{name}-{s['id'][:8]}" if name else str(s["id"][:12])
    return f"mcptape-{stem}{fmt.suffixes[0]}"


def _refusal(fmt: Format, transport: str | None) -> str:
    return (
        f"{fmt.short} holds {' and '.join(t.upper() for t in fmt.transports)} traffic;"
        f" this session was recorded over {transport}. Download it as JSON Lines instead."
    )


def export_links(s: SessionRow) -> list[dict[str, Any]]:
    """One download per writable format (the registry decides), disabled where it cannot apply."""
    out = []
    for fmt in downloads():
        ok = fmt.holds(s.get("transport"))
        out.append(
            {
                "name": fmt.name,
                "label": fmt.short,
                "title": fmt.title if ok else _refusal(fmt, s.get("transport")),
                "href": f"/sessions/{s['id']}/export.{fmt.name}" if ok else None,
            }
        )
    return out


async def export_download(request: web.Request) -> web.Response:
    from mcp_proxy.recording.database import export_bytes

    s = await request.app[QUERIES].session(request.match_info["sid"])
    try:
        fmt = get_format(request.match_info["fmt"])
        fmt.need_writer()
    except UserError as exc:
        return _error(request, 404, str(exc))
    if not fmt.holds(s.get("transport")):
        return _error(request, 409, _refusal(fmt, s.get("transport")))
    try:
        body = await export_bytes(request.app[STORE], [s["id"]], fmt.name)
    except UserError as exc:
        return _error(request, 409, str(exc))
    return web.Response(
        body=body,
        headers={
            "Content-Type": fmt.media_type + "; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{_filename(s, fmt)}"',
        },
    )


# ---------------------------------------------------------------------------------- diff


def _side(sid: str, step: Any) -> dict[str, Any] | None:
    if step is None:
        return None
    seqs = list(step.seqs)
    return {
        "seqs": seqs,
        "id": step.request_id,
        "outcome": step.outcome,
        "url": f"/sessions/{sid}/exchanges/{seqs[0]}" if seqs else None,
    }


def _value(v: Any) -> str:
    return present.dumps(v)


async def _recent(request: web.Request, limit: int = 20) -> list[dict[str, Any]]:
    rows, _ = await request.app[QUERIES].search_sessions(SessionFilter(limit=limit))
    return [{"id": r["id"], "name": r.get("name"), "started_at": r.get("started_at")} for r in rows]


async def diff_page(request: web.Request) -> web.Response:
    from mcp_proxy.diff import diff_sessions
    from mcp_proxy.recording.database import load_session

    a_ref = request.query.get("a", "").strip()
    b_ref = request.query.get("b", "").strip()
    if not a_ref or not b_ref:
        raise BadRequest("the diff needs two sessions: /diff?a=ID&b=ID (id prefixes or names)")
    store = request.app[STORE]
    a = await load_session(store, a_ref)
    b = await load_session(store, b_ref)
    # Aligning big conversations is CPU work: off the event loop.
    result = await asyncio.to_thread(diff_sessions, a, b)
    out = result.to_json()
    for row, pair in zip(out["exchanges"], result.pairs, strict=True):
        row["a"] = _side(a.id, pair.a)
        row["b"] = _side(b.id, pair.b)
    notes = request.app[SETTINGS].get("replay_notes", {}).get(b.id)
    data = {
        **out,
        "sessions": {
            "a": {"id": a.id, "name": a.session.get("name"), "label": a.label},
            "b": {"id": b.id, "name": b.session.get("name"), "label": b.label},
        },
        "replay_notes": notes or [],
    }
    return render(request, "diff.html", data, value=_value)


# ---------------------------------------------------------------------------------- replay


async def replay_confirm(request: web.Request) -> web.Response:
    s = await request.app[QUERIES].session(request.match_info["sid"])
    if not replay_enabled(request.app):
        return _error(request, 403, REPLAY_OFF)
    argv = replay_argv(s)
    upstream = replay_upstream(s)
    here = os.getcwd()
    recorded_cwd = s.get("cwd")
    data = {
        "imported_from": imported_from(s),
        "session": {"id": s["id"], "name": s.get("name"), "transport": s.get("transport")},
        "command": argv,
        "upstream": upstream,
        "http": s.get("transport") != "stdio",
        "shell": shlex.join(argv) if argv else None,
        "cwd": here,
        "recorded_cwd": recorded_cwd,
        "cwd_differs": bool(recorded_cwd) and recorded_cwd != here,
        "recorded_host": s.get("hostname"),
        "host_differs": bool(s.get("hostname")) and s.get("hostname") != socket.gethostname(),
        "possible": argv is not None or s.get("transport") != "stdio",
        "reason": None if argv or s.get("transport") != "stdio" else _why_not(s),
    }
    return render(request, "replay.html", data)


def imported_from(session: SessionRow) -> str | None:
    """The file an imported session came from (``mcptape import``), None for a local recording.

    Its command and cwd are whatever that file says: the replay page says so before it offers
    to run them.
    """
    meta = session.get("meta")
    found = meta.get("imported_from") if isinstance(meta, dict) else None
    if not isinstance(found, dict):
        return None
    return str(found.get("origin") or "a recording file")


def _why_not(s: SessionRow) -> str:
    return "This session has no recorded server command to run."


async def replay_run(request: web.Request) -> web.Response:
    from mcp_proxy.recording.database import load_session
    from mcp_proxy.replay import replay_http, replay_stdio

    if not replay_enabled(request.app):
        return _error(request, 403, REPLAY_OFF)
    s = await request.app[QUERIES].session(request.match_info["sid"])
    form = await _form(request)
    if form.get("confirm") != "yes":
        return _error(
            request,
            400,
            "A replay runs the session's recorded command; confirm it on the replay page"
            " (confirm=yes).",
        )
    runner: Any
    target: Any
    if s.get("transport") == "stdio":
        runner, target = replay_stdio, replay_argv(s)
        if target is None:
            return _error(request, 409, _why_not(s))
    else:
        runner, target = replay_http, (form.get("upstream") or "").strip() or replay_upstream(s)
        why = _check_url(target) if target else "Give the URL of the server to replay against."
        if why:
            return _error(request, 400, why)
    settings = request.app[SETTINGS]
    if settings.get("replay_busy"):
        return _error(request, 409, "A replay is already running; try again when it ends.")
    settings["replay_busy"] = True  # set before any await: one replay at a time
    try:
        session = await load_session(request.app[STORE], s["id"])
        work = asyncio.ensure_future(
            asyncio.to_thread(
                runner,
                session,
                target,
                settings["db_url"],
                timeout=settings.get("replay_step_timeout", REPLAY_STEP_TIMEOUT),
                origin="dashboard",
            )
        )
    except BaseException:
        settings["replay_busy"] = False
        raise
    # The thread cannot be interrupted: "busy" lasts until it really ends, even past the timeout.
    work.add_done_callback(lambda f: _replay_done(settings, f))
    limit = settings.get("replay_timeout", REPLAY_TIMEOUT)
    done, _ = await asyncio.wait({work}, timeout=limit)
    if not done:
        return _error(
            request,
            504,
            f"The replay did not finish within {limit:g} s; the server is stopped when its own"
            " timeouts run out, and what was replayed is recorded as a new session.",
        )
    try:
        result = work.result()
    except UserError as exc:
        return _error(request, 409, f"The replay failed: {exc}")
    except OSError as exc:
        return _error(request, 409, f"The replay could not start the server: {exc}")
    if result.session_id is None:
        return _error(request, 500, "The replay was not recorded.")
    settings.setdefault("replay_notes", {})[result.session_id] = list(result.notes)
    location = f"/diff?a={s['id']}&b={result.session_id}"
    if request.match_info.get("ext") == ".json" or "application/json" in request.headers.get(
        "Accept", ""
    ):
        return web.json_response({**result.to_json(), "diff_url": location}, dumps=present.dumps)
    return web.Response(status=303, headers={"Location": location})


def _replay_done(settings: dict[str, Any], future: asyncio.Future[Any]) -> None:
    settings["replay_busy"] = False
    if not future.cancelled():
        future.exception()  # retrieved here so a late failure is not logged as "never retrieved"


async def _form(request: web.Request) -> dict[str, str]:
    from dashboard.views._common import read_form

    return await read_form(request)
