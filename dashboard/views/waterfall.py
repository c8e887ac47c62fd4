"""One session's exchanges as bars on a shared time axis: the waterfall (and its ``.json``).

Each request is a bar from the moment it was sent to its answer; the part before the first
thing that came back (a progress or log notification, an SSE event, the answer itself) is drawn
lighter, as the Network panel's "waiting" part; each notification that belongs to the exchange
is a tick on the bar. It pages like the timeline (``after=SEQ``, ``limit``), and every page's axis
spans the whole session (its start to its end, or to its newest frame while it is live), so a bar
of page 2 sits where it belongs in the session. The bars are server-rendered SVG (its
geometry as attributes, so the page's CSP needs no inline style and no script), each with its
timings as a tooltip (hover) and as text that shows when the row has the keyboard focus.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from aiohttp import web

from dashboard import analysis as an
from dashboard import present
from dashboard.app import ANALYST, QUERIES, render
from dashboard.views._common import SEQ_MAX, int_param, session_out, url
from mcp_proxy.analysis.model import Exchange
from mcp_proxy.limits import (
    WATERFALL_NOTE_BYTES,
    WATERFALL_NOTES,
    WATERFALL_PAGE,
    WATERFALL_TICKS,
)
from mcp_proxy.store.filters import TimelineFilter
from mcp_proxy.store.rows import SessionRow, ViewFrame

#: The SVG's user units across: bars are placed in per-mille of the page's span.
WIDTH = 1000.0
#: The narrowest bar drawn (a 0 ms answer must still be seen), in the same units.
MIN_BAR = 2.0


@dataclass
class Bar:
    """One exchange on the axis: times are seconds since the epoch; ``x``… are SVG units."""

    seq: int
    method: str
    name: str | None
    direction: str
    outcome: str
    outcome_label: str
    style: str
    sent: float
    first: float | None  # the first frame back (a notification or the answer)
    end: float | None  # the answer (None: unanswered on this page)
    latency_ms: float | None
    wait_ms: float | None  # sent → first frame back
    response_seq: int | None
    chain: int | None
    round: int
    ticks: list[dict[str, Any]] = field(default_factory=list)
    ticks_left_out: int = 0
    x: float = 0.0
    w: float = MIN_BAR
    wait_w: float = 0.0
    title: str = ""
    #: A task this request created: its whole life, creation → terminal status (the bar ends
    #: there, not at the handle); None when it never ended or no task.
    task_ms: float | None = None
    #: An MRTR round after the first: where the previous round's answer came (x), joined to
    #: this bar by a line, so a conversation reads as one.
    join_x: float | None = None


def _tick_seqs(ex: Exchange) -> list[int]:
    return sorted({*ex.progress_seqs, *ex.log_seqs, *ex.other_seqs})


async def waterfall_bars(
    request: web.Request, session: SessionRow, after: int, limit: int
) -> tuple[list[Bar], int | None, bool]:
    """The bars of one page of requests, the cursor of the next page, and whether the
    notifications of a session analysed a window at a time were more than were read."""
    q = request.app[QUERIES]
    analyst = request.app[ANALYST]
    sid = session["id"]
    tf = TimelineFilter(kind="request", after=after, limit=limit)
    page, next_after = await q.timeline(sid, tf, after=after)
    whole = await analyst.whole(session)
    notes_left_out = False
    if whole is not None:
        analysis = whole
    else:
        partners = await q.partners(sid, page)
        notes = await _page_notifications(request, sid, page, list(partners.values()))
        notes_left_out = len(notes) > WATERFALL_NOTES
        rows: list[ViewFrame] = [*page, *partners.values(), *notes[:WATERFALL_NOTES]]
        analysis = await analyst.window(session, rows)
    by_request = an.exchange_index(analysis)["request"]
    exchanges = [by_request[f["seq"]] for f in page if f["seq"] in by_request]
    wanted: dict[int, list[int]] = {ex.request_seq: _tick_seqs(ex) for ex in exchanges}
    times = await q.frame_times(
        sid, [s for seqs in wanted.values() for s in seqs[:WATERFALL_TICKS]]
    )
    bars: list[Bar] = []
    for ex in exchanges:
        seqs = wanted[ex.request_seq]
        ticks = [{"seq": s, "ts": times[s]} for s in seqs[:WATERFALL_TICKS] if s in times]
        back = [t["ts"] for t in ticks]
        if ex.response_ts is not None:
            back.append(ex.response_ts)
        first = min(back) if back else None
        task_ms = ex.task.duration_ms if ex.task is not None else None
        end = ex.response_ts
        if task_ms is not None:  # a task's bar covers its whole life, not only the handle
            end = max(end or ex.request_ts, ex.request_ts + task_ms / 1000)
        bars.append(
            Bar(
                seq=ex.request_seq,
                method=ex.method,
                name=ex.name,
                direction=ex.direction,
                outcome=str(ex.outcome),
                outcome_label=an.outcome_label(ex),
                style=an.OUTCOME_STYLE.get(ex.outcome, "err"),
                sent=ex.request_ts,
                first=first,
                end=end,
                latency_ms=ex.latency_ms,
                task_ms=task_ms,
                wait_ms=(first - ex.request_ts) * 1000 if first is not None else None,
                response_seq=ex.response_seq,
                chain=ex.chain,
                round=ex.round,
                ticks=ticks,
                ticks_left_out=max(0, len(seqs) - WATERFALL_TICKS),
            )
        )
    return bars, next_after, notes_left_out


async def _page_notifications(
    request: web.Request, sid: str, page: Sequence[ViewFrame], answers: Sequence[ViewFrame]
) -> list[ViewFrame]:
    """The notifications sent while the page's requests were open (from its first request to
    its last answer), so the window's analysis can put them on their bars: at most
    ``WATERFALL_NOTES`` + 1 (one more says some were left out), bodies up to
    ``WATERFALL_NOTE_BYTES``."""
    if not page:
        return []
    first = min(f["seq"] for f in page)
    last = max([*(a["seq"] for a in answers), *(f["seq"] for f in page)])
    return await request.app[QUERIES].notifications_between(
        sid, first, last, limit=WATERFALL_NOTES + 1, max_bytes=WATERFALL_NOTE_BYTES
    )


def lay_out(
    bars: list[Bar], *, since: float | None = None, until: float | None = None
) -> dict[str, Any]:
    """Place the bars on one axis and say what its ticks are.

    The axis runs from ``since`` to ``until`` (the session's start and end, so that every page
    of a session shares one axis), widened to any bar outside them; without them, it spans the
    bars. An unanswered exchange runs to the end of the axis. Pure: the unit tests call it with
    made-up bars.
    """
    if not bars:
        return {"start": None, "end": None, "span_ms": 0.0, "ticks": []}
    t0 = min(b.sent for b in bars)
    if since is not None:
        t0 = min(t0, since)
    ends = [b.end or b.first or b.sent for b in bars]
    t1 = max([*ends, *(t["ts"] for b in bars for t in b.ticks)])
    if until is not None:
        t1 = max(t1, until)
    span = max(t1 - t0, 1e-6)

    def x(ts: float) -> float:
        return round((ts - t0) / span * WIDTH, 2)

    for b in bars:
        b.x = min(x(b.sent), WIDTH - MIN_BAR)
        stop = b.end if b.end is not None else t1
        b.w = max(round(x(stop) - b.x, 2), MIN_BAR)
        b.wait_w = min(round(x(b.first) - b.x, 2), b.w) if b.first is not None else b.w
        for t in b.ticks:
            t["x"] = x(t["ts"])
        b.title = timings_text(b, t0)
    last_round: dict[int, Bar] = {}
    for b in sorted(bars, key=lambda b: b.seq):
        if b.chain is None:
            continue
        before = last_round.get(b.chain)
        if before is not None:
            b.join_x = min(round(before.x + before.w, 2), b.x)
        last_round[b.chain] = b
    steps = 5
    axis_ticks = [
        {"x": round(WIDTH * i / steps, 2), "label": present.ms(span * i / steps)}
        for i in range(steps + 1)
    ]
    return {"start": t0, "end": t1, "span_ms": span * 1000, "ticks": axis_ticks}


def timings_text(b: Bar, t0: float) -> str:
    """What hover and focus show: when it was sent, the wait, the answer, the notifications."""
    parts = [f"sent at +{present.ms(b.sent - t0)}"]
    if b.wait_ms is not None:
        parts.append(f"first frame back after {present.ms_value(b.wait_ms)}")
    if b.latency_ms is not None:
        parts.append(f"answered after {present.ms_value(b.latency_ms)}")
    else:
        parts.append("no answer")
    if b.task_ms is not None:
        parts.append(f"task ended after {present.ms_value(b.task_ms)}")
    if b.ticks:
        more = f" (+{b.ticks_left_out} more)" if b.ticks_left_out else ""
        parts.append(f"{len(b.ticks)} notification{'s' if len(b.ticks) != 1 else ''}{more}")
    return " · ".join(parts)


async def waterfall_page(request: web.Request) -> web.Response:
    q = request.app[QUERIES]
    s = await q.session(request.match_info["sid"])
    sid = s["id"]
    after = int_param(request, "after", 0, hi=SEQ_MAX)
    limit = int_param(request, "limit", 200, 1, WATERFALL_PAGE)
    bars, next_after, notes_left_out = await waterfall_bars(request, s, after, limit)
    # The whole session's span on every page: its end, or its newest frame while live.
    until = s.get("ended_at")
    end = float(until) if until is not None else await q.last_frame_ts(sid)
    axis = lay_out(bars, since=float(s["started_at"]), until=end)
    data = {
        "session": session_out(s),
        "axis": axis,
        "bars": [asdict(b) for b in bars],
        "after": after,
        "limit": limit,
        "notifications_left_out": notes_left_out,
        "next": next_after,
        "next_url": url(
            f"/sessions/{sid}/waterfall",
            {"after": next_after, "limit": limit if limit != 200 else None},
        )
        if next_after
        else None,
    }
    return render(
        request,
        "waterfall.html",
        data,
        width=WIDTH,
        selected=int_param(request, "x", 0, hi=SEQ_MAX) or None,
    )
