"""The dashboard application: app factory, template environment and the server loop.

One :class:`~aiohttp.web.Application` per run, holding one :class:`Store` (async engine) and the
run's token. Pages are rendered on the server with Jinja2 (autoescape on); every page has a
``.json`` twin built from the same dictionary, so what a script reads is what a person sees.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from dashboard import present
from dashboard.analysis import Analyst
from dashboard.security import TOKEN_FIELD, new_token, security_middleware
from mcp_proxy import render as render_text
from mcp_proxy import tokens
from mcp_proxy.netutil import is_loopback
from mcp_proxy.store.queries import Store

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"

STORE = web.AppKey("store", Store)
#: The same store: the pages' queries are its public methods (kept as a name for page modules).
QUERIES = STORE
ANALYST = web.AppKey("analyst", Analyst)
TOKEN = web.AppKey("token", str)
JINJA = web.AppKey("jinja", jinja2.Environment)
SETTINGS = web.AppKey("settings", dict)
STREAMS: web.AppKey[set[asyncio.Task[Any]]] = web.AppKey("streams")


def make_env() -> jinja2.Environment:
    """Jinja2 with autoescape everywhere (not only for ``.html``) and strict undefineds."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        vis=present.vis,
        plain=present.plain,
        ms=present.ms,
        msv=present.ms_value,
        clock=render_text.clock,
        when=render_text.when,
        dur=present.duration,
        size=present.human_size,
        era=present.era_label,
        charrefs=present.charrefs,
        tokens=tokens.estimate,
        era_title=present.era_title,
    )
    return env


@web.middleware
async def timing_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """``Server-Timing: app;dur=…`` on every page: what the benchmark reports, and what a
    browser's network panel shows, so slowness is attributable to the server or not."""
    start = time.perf_counter()
    response = await handler(request)
    if not response.prepared:  # streamed responses (SSE) have sent their headers already
        dur = (time.perf_counter() - start) * 1000
        response.headers["Server-Timing"] = f"app;dur={dur:.1f}"
    return response


def create_app(
    db_url: str,
    *,
    token: str | None = None,
    extra_hosts: frozenset[str] = frozenset(),
    poll_interval: float = 0.25,
    bind_host: str = "127.0.0.1",
    allow_remote: bool = False,
) -> web.Application:
    """Build the app. The store opens (and migrates) on startup and closes on cleanup.

    ``bind_host`` is the address the server listens on: replay (which starts processes) is
    only offered when it is a loopback address.
    """
    from dashboard import views

    token = token or new_token()
    app = web.Application(
        middlewares=[
            timing_middleware,
            security_middleware(token, extra_hosts),
            views.errors_middleware,
        ],
        client_max_size=256 * 1024,
    )
    app[TOKEN] = token
    app[JINJA] = make_env()
    app[SETTINGS] = {
        "db_url": db_url,
        "poll_interval": poll_interval,
        "token_field": TOKEN_FIELD,
        "replay": is_loopback(bind_host),
        # Held messages are decided here only on loopback, or when --allow-remote was given.
        "intercept": is_loopback(bind_host) or allow_remote,
    }
    app[STREAMS] = set()

    async def open_store(app: web.Application) -> None:
        from dashboard.views.intercepts import TABLE
        from mcp_proxy.store.intercepts import InterceptTable

        store = await Store.open(db_url)
        app[STORE] = store
        app[ANALYST] = Analyst(store)
        app[TABLE] = InterceptTable(db_url, create=False)  # Store.open migrated it

    async def stop_streams(app: web.Application) -> None:
        # Live streams would otherwise keep the server from shutting down.
        streams: set[asyncio.Task[Any]] = app[STREAMS]
        for task in list(streams):
            task.cancel()

    async def close_store(app: web.Application) -> None:
        from dashboard.views.intercepts import TABLE

        await app[ANALYST].close()
        await app[STORE].close()
        app[TABLE].close()

    app.on_startup.append(open_store)
    app.on_shutdown.append(stop_streams)
    app.on_cleanup.append(close_store)
    views.add_routes(app)
    app.router.add_static("/static/", STATIC, name="static")
    return app


async def serve(
    db_url: str,
    *,
    host: str = "127.0.0.1",
    port: int = 6280,
    extra_hosts: frozenset[str] = frozenset(),
    announce: Callable[[str], None] = print,
    stop: asyncio.Event | None = None,
    allow_remote: bool = False,
) -> None:
    """Run until ``stop`` is set or SIGINT/SIGTERM; announce the URL (with token) once bound."""
    app = create_app(db_url, extra_hosts=extra_hosts, bind_host=host, allow_remote=allow_remote)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        bound = _bound_port(runner) or port
        shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        if ":" in shown:
            shown = f"[{shown}]"
        announce(f"http://{shown}:{bound}/?token={app[TOKEN]}")
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
                pass
        await stop.wait()
    finally:
        await runner.cleanup()


def _bound_port(runner: web.AppRunner) -> int | None:
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return None


def render(request: web.Request, template: str, data: dict[str, Any], **view: Any) -> web.Response:
    """The page, or its ``.json`` twin: ``data`` is the twin; ``view`` adds presentation only."""
    if request.match_info.get("ext") == ".json":
        return web.Response(body=_utf8(present.dumps(data)), content_type="application/json")
    env = request.app[JINJA]
    html = env.get_template(template).render(
        **data,
        **view,
        token=request.app[TOKEN],
        token_field=TOKEN_FIELD,
        request_path=request.path_qs,
        json_url=_json_twin(request),
    )
    return web.Response(body=_utf8(html), content_type="text/html", charset="utf-8")


def _utf8(text: str) -> bytes:
    """The page as UTF-8; a lone surrogate from a recording (JSON's ``"\\ud800"``) becomes its
    escape instead of failing the whole page."""
    return text.encode("utf-8", "backslashreplace")


def _json_twin(request: web.Request) -> str:
    path = request.path
    qs = request.query_string
    return path + ".json" + ("?" + qs if qs else "")
