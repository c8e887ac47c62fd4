"""One host's servers in one view: ``/timeline`` (and ``.json``), a lane per server.

A host (Claude Desktop, an IDE) runs many servers at once, each its own session. The sessions of
one host are those with the host's ``clientInfo.name`` (``client=``, the "client" column of the
sessions list), within a time window (``since``/``until``, as on the sessions list; by default
the hour before the newest session started, to now). A lane is a server: the session's name —
what ``mcptape install`` pins with ``record --name`` — or, for a session recorded without one,
the server's own ``serverInfo.name``. Each session is a span on its lane and each of its
requests a bar on the span (sent → answered), so "which server was slow when the host hung" is
one look. Bounded: :data:`~mcp_proxy.limits.HOST_SESSIONS` sessions,
:data:`~mcp_proxy.limits.HOST_REQUESTS` requests each; the page says what it left out.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from dashboard import present
from dashboard.app import QUERIES, render
from dashboard.views._common import url
from mcp_proxy.analysis.model import latency_ms
from mcp_proxy.errors import BadValueError
from mcp_proxy.limits import HOST_REQUESTS, HOST_SESSIONS
from mcp_proxy.render import session_status
from mcp_proxy.store.filters import parse_time
from mcp_proxy.store.rows import SessionRow

#: SVG user units across a lane.
WIDTH = 1000.0
MIN_BAR = 1.5
#: A request at least this slow is marked on its lane (and counted in the lane's summary).
SLOW_MS = 1000.0


@dataclass
class LaneRequest:
    seq: int
    method: str | None
    sent: float
    answered: float | None
    latency_ms: float | None
    slow: bool
    x: float = 0.0
    w: float = MIN_BAR
    title: str = ""


@dataclass
class LaneSession:
    id: str
    name: str | None
    server_name: str | None
    client_name: str | None
    status: str
    started_at: float
    ended_at: float | None
    requests: list[LaneRequest] = field(default_factory=list)
    requests_left_out: bool = False
    x: float = 0.0
    w: float = MIN_BAR


@dataclass
class Lane:
    name: str
    sessions: list[LaneSession] = field(default_factory=list)
    requests: int = 0
    slow: int = 0
    slowest_ms: float | None = None


def lane_name(s: SessionRow) -> str:
    """The server a session is a lane of: its pinned name, else its serverInfo name."""
    return str(s.get("name") or s.get("server_name") or s["id"][:12])


def _window(request: web.Request, newest: float | None) -> tuple[float, float]:
    since = parse_time(request.query.get("since") or None)
    until = parse_time(request.query.get("until") or None)
    now = time.time()
    until = until if until is not None else now
    if since is None:
        since = (newest if newest is not None else now) - 3600
    if since >= until:
        raise BadValueError("since must be before until")
    return since, until


async def host_timeline(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    client = request.query.get("client") or None
    newest = None if request.query.get("since") else await q.newest_start(client)
    since, until = _window(request, newest)
    rows = await q.sessions_in_window(since, until, client, HOST_SESSIONS + 1)
    sessions_left_out = len(rows) > HOST_SESSIONS
    rows = rows[:HOST_SESSIONS]
    lanes: dict[str, Lane] = {}
    for s in rows:
        ls = LaneSession(
            id=s["id"],
            name=s.get("name"),
            server_name=s.get("server_name"),
            client_name=s.get("client_name"),
            status=session_status(s),
            started_at=float(s["started_at"]),
            ended_at=float(end) if (end := s.get("ended_at")) is not None else None,
        )
        page = await q.requests_in_window(s, since, until, HOST_REQUESTS + 1)
        ls.requests_left_out = len(page) > HOST_REQUESTS
        page = page[:HOST_REQUESTS]
        answers = await q.partners(s["id"], page)
        for f in page:
            a = answers.get(f["seq"])
            answered = float(a["ts"]) if a is not None and a["seq"] > f["seq"] else None
            lat = (
                latency_ms(int(f["mono_ns"]), int(a["mono_ns"]))
                if a is not None and answered is not None
                else None
            )
            ls.requests.append(
                LaneRequest(
                    seq=f["seq"],
                    method=f["method"],
                    sent=float(f["ts"]),
                    answered=answered,
                    latency_ms=lat,
                    slow=lat is not None and lat >= SLOW_MS,
                )
            )
        lane = lanes.setdefault(lane_name(s), Lane(name=lane_name(s)))
        lane.sessions.append(ls)
    out = sorted(lanes.values(), key=lambda lane: lane.name)
    axis = lay_out(out, since, until)
    data = {
        "client": client,
        "since": since,
        "until": until,
        "axis": axis,
        "lanes": [asdict(lane) for lane in out],
        "sessions_left_out": sessions_left_out,
        "clients": sorted({c for s in rows if (c := s.get("client_name"))}),
        "earlier_url": url(
            "/timeline",
            {"client": client, "since": str(since - (until - since)), "until": str(since)},
        ),
    }
    return render(request, "host_timeline.html", data, width=WIDTH, slow_ms=SLOW_MS)


def lay_out(lanes: list[Lane], since: float, until: float) -> dict[str, Any]:
    """Place sessions and requests on the window's axis (clipped to it); fill the lane sums."""
    # The axis spans what is shown: the window, narrowed to its sessions' first and last moments
    # (a window "since 0" is not drawn from 1970).
    starts = [s.started_at for lane in lanes for s in lane.sessions]
    ends = [
        max([s.ended_at or s.started_at, *(r.answered or r.sent for r in s.requests)])
        for lane in lanes
        for s in lane.sessions
    ]
    open_ended = any(s.ended_at is None for lane in lanes for s in lane.sessions)
    t0 = max(since, min(starts)) if starts else since
    t1 = until if open_ended or not ends else min(until, max(ends))
    t1 = max(t1, t0 + 1e-3)
    span = max(t1 - t0, 1e-6)

    def x(ts: float) -> float:
        return round(min(max((ts - t0) / span, 0.0), 1.0) * WIDTH, 2)

    for lane in lanes:
        for s in lane.sessions:
            s.x = min(x(s.started_at), WIDTH - MIN_BAR)
            s.w = max(x(s.ended_at if s.ended_at is not None else t1) - s.x, MIN_BAR)
            for r in s.requests:
                r.x = min(x(r.sent), WIDTH - MIN_BAR)
                r.w = max(x(r.answered if r.answered is not None else t1) - r.x, MIN_BAR)
                lat = present.ms_value(r.latency_ms) if r.latency_ms is not None else "no answer"
                r.title = f"{r.method} #{r.seq} at {present.ms(r.sent - t0)}: {lat}"
                lane.requests += 1
                if r.slow:
                    lane.slow += 1
                if r.latency_ms is not None:
                    lane.slowest_ms = max(lane.slowest_ms or 0.0, r.latency_ms)
    steps = 6
    ticks = [
        {"x": round(WIDTH * i / steps, 2), "at": t0 + span * i / steps} for i in range(steps + 1)
    ]
    return {"start": t0, "end": t1, "ticks": ticks}
