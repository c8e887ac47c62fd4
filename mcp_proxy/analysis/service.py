"""Load a session, analyse it, keep its findings: the thin I/O layer around :func:`analyze`.

Findings are derived data, stored so that reading them is one indexed query even for a
100,000-frame session. Next to a session's analyzer findings sits one ``analysis.summary`` row
whose ``detail`` records what they were computed from (analyzer version, the session's frame
count and status). They are recomputed — transparently, on the next read — when any of those
changed: a new analyzer version, new frames, or the session ending.

Other parts of mcptape call:

- :func:`session_findings` — findings of a session (recorder + analyzer), fresh;
- :func:`session_analysis` — the full :class:`~mcp_proxy.analysis.Analysis` (exchanges,
  chains, findings, facts), computed now; stores its findings on the way;
- :func:`refresh` — force a recomputation.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mcp_proxy.analysis.catalogue import CATALOGUE, SUMMARY_CODE
from mcp_proxy.analysis.core import Analysis, analyze
from mcp_proxy.analysis.version import ANALYZER_VERSION
from mcp_proxy.store.queries import Store, session_status


def _status(session: dict[str, Any]) -> str:
    """live | ended | crashed | abandoned (a 'live' row whose recorder is gone)."""
    return session_status(session)


def fingerprint(session: dict[str, Any]) -> dict[str, Any]:
    """What stored findings depend on besides the analyzer itself."""
    return {
        "analyzer_version": ANALYZER_VERSION,
        "frames": int(session.get("frame_count") or 0),
        "status": _status(session),
        "exit_code": session.get("exit_code"),
        "exit_signal": session.get("exit_signal"),
    }


def summary_fingerprint(summary: dict[str, Any] | None) -> dict[str, Any] | None:
    if summary is None or summary.get("analyzer_version") != ANALYZER_VERSION:
        return None
    try:
        detail = json.loads(summary.get("detail") or "")
    except ValueError:
        return None
    fp = detail.get("fingerprint") if isinstance(detail, dict) else None
    return fp if isinstance(fp, dict) else None


def is_fresh(session: dict[str, Any], summary: dict[str, Any] | None) -> bool:
    """True when the stored findings were computed from this session as it is now."""
    return summary_fingerprint(summary) == fingerprint(session)


def finding_rows(
    analysis: Analysis, session: dict[str, Any], *, now: float | None = None
) -> list[dict[str, Any]]:
    """The rows to store: every finding plus the summary row that makes them checkable."""
    now = time.time() if now is None else now
    sid = session["id"]
    rows = [
        {
            "session_id": sid,
            "code": f.code,
            "severity": f.severity,
            "title": f.title[:2000],
            "detail": f.detail,
            "frame_seqs": f.frame_seqs,
            "source": "analyzer",
            "analyzer_version": ANALYZER_VERSION,
            "created_at": now,
        }
        for f in analysis.findings
    ]
    counts = analysis.counts()
    summary = {
        "fingerprint": fingerprint(session),
        "exchanges": len(analysis.exchanges),
        "chains": len(analysis.chains),
        "counts": counts,
        "era": analysis.facts.era,
        "protocol_version": analysis.facts.version,
    }
    rows.append(
        {
            "session_id": sid,
            "code": SUMMARY_CODE,
            "severity": "info",
            "title": (
                f"analysed {analysis.frame_count} frames, {len(analysis.exchanges)} exchanges:"
                f" {counts['error']} errors, {counts['warning']} warnings, {counts['info']} info"
            ),
            "detail": json.dumps(summary, sort_keys=True),
            "frame_seqs": [],
            "source": "analyzer",
            "analyzer_version": ANALYZER_VERSION,
            "created_at": now,
        }
    )
    return rows


async def session_analysis(store: Store, session: dict[str, Any], *, save: bool = True) -> Analysis:
    """Analyse a session now (exchanges are not stored; they are cheap to recompute).

    With ``save`` the findings are stored when the stored ones are stale, so that the next
    :func:`session_findings` is a plain read.
    """
    frames = await store.analysis_frames(session["id"])
    http = await store.http_exchanges(session["id"])
    view = dict(session)
    view["status"] = _status(session)
    analysis = analyze(frames, session=view, http_exchanges=http)
    if save:
        summary = await store.analysis_summary(session["id"])
        if not is_fresh(session, summary):
            await store.replace_analyzer_findings(session["id"], finding_rows(analysis, session))
    return analysis


async def refresh(store: Store, session: dict[str, Any]) -> Analysis:
    """Recompute and store a session's findings whatever the stored state."""
    analysis = await session_analysis(store, session, save=False)
    await store.replace_analyzer_findings(session["id"], finding_rows(analysis, session))
    return analysis


async def session_findings(
    store: Store, session: dict[str, Any], *, recompute: bool = False
) -> list[dict[str, Any]]:
    """A session's findings (recorder and analyzer), recomputed first only when stale.

    Rows are the ``findings`` table's columns plus ``spec`` and ``explanation`` from the
    catalogue, worst first, then in frame order.
    """
    summary = await store.analysis_summary(session["id"])
    if recompute or not is_fresh(session, summary):
        await refresh(store, session)
    rows = await store.session_findings(session["id"])
    return sort_rows([enrich(r) for r in rows])


def enrich(row: dict[str, Any]) -> dict[str, Any]:
    out = dict(row)
    entry = CATALOGUE.get(str(row.get("code")))
    out["spec"] = entry.spec if entry else ""
    out["explanation"] = entry.explanation if entry else ""
    return out


def sort_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rank = {"error": 0, "warning": 1, "info": 2}

    def key(r: dict[str, Any]) -> tuple[int, int, int]:
        seqs = r.get("frame_seqs") or [0]
        return (
            rank.get(str(r.get("severity")), 3),
            int(seqs[0]) if seqs else 0,
            int(r.get("id") or 0),
        )

    return sorted(rows, key=key)
