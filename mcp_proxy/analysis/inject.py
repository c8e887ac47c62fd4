"""Injected faults in a recording: how the host reacted, and what to set aside when ignoring them.

A session recorded with ``mcptape record --fault …`` holds ``inject.*`` findings (one per fired
rule, written by the relay) and frames on the ``inject`` channel. Two questions follow, and
``mcptape check --injected report|ignore`` asks one of them:

- **report** (the default): what did the host do after each fault that denied it an answer
  (drop, corrupt, error, tool-error, http)? It *retried* (sent the same request again: same
  method and params), *cancelled* (``notifications/cancelled`` for the request), *started over*
  (``initialize`` next, as after a 404 for an expired session), *moved on*
  (other requests), or went *silent* (nothing more on the connection: the hang a host without a
  timeout shows a real failing server). One ``inject.reaction`` (info) or ``inject.host_silent``
  (warning) each. After a delay, throttle, duplicate or reorder the answer still came; only a
  cancel (the host gave up first) is reported.
- **ignore**: the recording without the rehearsal: ``inject.*`` findings dropped, and so is any
  analyzer finding whose frames all belong to a request a fault touched (an unanswered request
  whose answer mcptape dropped is no fault of the server's).

Pure functions over frame rows and finding records, plus one loader for the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_proxy.analysis.model import finding_record
from mcp_proxy.frames import id_key
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, named_rows, shaped_pages

__all__ = [
    "Injection",
    "injections",
    "reactions",
    "session_frames",
    "set_aside",
    "with_injected",
]

#: Actions that end the connection: the host cannot react on it any more.
_ENDS_CONNECTION = ("inject.disconnect",)
#: Faults that deny the host its answer: whatever it does next is its reaction. After the other
#: faults (delay, throttle, duplicate, reorder) the answer still comes; only a cancel — the host
#: gave up before it arrived — is worth reporting.
_DENYING = ("inject.drop", "inject.corrupt", "inject.error", "inject.tool_error", "inject.http")
_REAL = ("stdio", "http", "sse")
#: ``inject.*`` codes the analysis writes about faults (not a fired rule of the relay's).
_ANALYZER_CODES = (
    "inject.reaction",
    "inject.host_silent",
    "inject.ended_with_pending",
)  # channels a peer really sent on (not inject, not stderr)


@dataclass(frozen=True, slots=True)
class Injection:
    """One fired fault rule, tied to the request it was about (when it was about one)."""

    code: str
    title: str
    direction: str
    msg_id: str | None  # the request's id, as the ``msg_id`` column holds it
    request_seq: int | None  # the host's request (c2s) that the fault concerned
    fault_seq: int | None  # the frame the fault fired on
    method: str | None
    name: str | None
    params: str | None = None  # the request's params without ``_meta``, as canonical JSON


def _detail(finding: Mapping[str, Any]) -> dict[str, Any]:
    detail = finding.get("detail")
    if isinstance(detail, dict):
        return detail
    try:
        out = json.loads(detail or "{}")
    except (TypeError, ValueError):
        return {}
    return out if isinstance(out, dict) else {}


def _message(frame: Mapping[str, Any]) -> dict[str, Any]:
    try:
        msg = json.loads(bytes(frame.get("raw") or b"{}"))
    except (TypeError, ValueError, RecursionError):
        return {}
    return msg if isinstance(msg, dict) else {}


def _name(frame: Mapping[str, Any]) -> str | None:
    params = _message(frame).get("params")
    if not isinstance(params, dict):
        return None
    value = params.get("uri" if frame.get("method") == "resources/read" else "name")
    return value if isinstance(value, str) else None


def _params(frame: Mapping[str, Any]) -> str | None:
    """The request's params without ``_meta`` (progress tokens, envelopes), comparable text."""
    params = _message(frame).get("params")
    if not isinstance(params, dict):
        return None
    return json.dumps({k: v for k, v in params.items() if k != "_meta"}, sort_keys=True)


def _real(frame: Mapping[str, Any]) -> bool:
    return frame.get("channel") in _REAL


def injections(
    findings: Iterable[Mapping[str, Any]], frames: Sequence[Mapping[str, Any]]
) -> list[Injection]:
    """The fired rules of a session, each located in its frames (in frame order)."""
    out = []
    for f in findings:
        code = str(f.get("code") or "")
        if not code.startswith("inject.") or code in _ANALYZER_CODES:
            continue
        detail = _detail(f)
        direction = str(detail.get("direction") or "")
        raw_id = detail.get("id")
        key = id_key(raw_id) if raw_id is not None else None
        request = _request(frames, key) if key is not None else None
        fault = None
        if request is not None:
            fault = request if direction == "c2s" else _answer(frames, request)
        out.append(
            Injection(
                code,
                str(f.get("title") or code),
                direction,
                key,
                request["seq"] if request is not None else None,
                fault["seq"] if fault is not None else None,
                request.get("method") if request is not None else None,
                _name(request) if request is not None else None,
                _params(request) if request is not None else None,
            )
        )
    return sorted(out, key=lambda i: i.fault_seq or 0)


def _request(frames: Sequence[Mapping[str, Any]], key: str) -> Mapping[str, Any] | None:
    """The last host request with this id (ids may be reused after their answer)."""
    found = None
    for frame in frames:
        if (
            _real(frame)
            and frame.get("msg_id") == key
            and frame.get("direction") == "c2s"
            and frame.get("kind") == "request"
        ):
            found = frame
    return found


def _answer(frames: Sequence[Mapping[str, Any]], request: Mapping[str, Any]) -> Any:
    for frame in frames:
        if (
            frame["seq"] > request["seq"]
            and _real(frame)
            and frame.get("direction") == "s2c"
            and frame.get("msg_id") == request.get("msg_id")
            and frame.get("kind") in ("response", "error")
        ):
            return frame
    return None


def _reaction(inj: Injection, frames: Sequence[Mapping[str, Any]]) -> tuple[str, str, list[int]]:
    """``(code, what the host did, the frames that show it)`` after one fault."""
    assert inj.request_seq is not None and inj.fault_seq is not None
    later = [
        f
        for f in frames
        if f["seq"] > inj.fault_seq
        and _real(f)
        and f.get("direction") == "c2s"
        and f.get("kind") in ("request", "notification")
    ]
    for f in later:
        if f.get("method") == "notifications/cancelled":
            params = _message(f).get("params")
            rid = params.get("requestId") if isinstance(params, dict) else None
            if rid is not None and id_key(rid) == inj.msg_id:
                return "inject.reaction", "cancelled the request", [inj.fault_seq, f["seq"]]
    if inj.code not in _DENYING:
        return "", "", []  # the answer still came: no reaction to report but a cancel
    requests = [f for f in later if f.get("kind") == "request"]
    retry = next(
        (f for f in requests if f.get("method") == inj.method and _params(f) == inj.params),
        None,
    )
    if requests and requests[0].get("method") in ("initialize", "server/discover"):
        # what a client must do after a 404 for its session (an expired session)
        what = f"started over ({requests[0].get('method')})"
        seqs = [inj.fault_seq, requests[0]["seq"]]
        if retry is not None:
            return "inject.reaction", what + " and retried the request", [*seqs, retry["seq"]]
        return "inject.reaction", what, seqs
    if retry is not None:
        return "inject.reaction", "retried the request", [inj.fault_seq, retry["seq"]]
    if requests:
        return "inject.reaction", "moved on to other requests", [inj.fault_seq, requests[0]["seq"]]
    return "inject.host_silent", "sent nothing more", [inj.fault_seq]


def reactions(
    findings: Iterable[Mapping[str, Any]], frames: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """One finding record per fault on a request (or its answer): how the host reacted."""
    out = []
    for inj in injections(findings, frames):
        if inj.request_seq is None or inj.fault_seq is None or inj.code in _ENDS_CONNECTION:
            continue
        code, what, seqs = _reaction(inj, frames)
        if not code:
            continue
        call = inj.method or "request"
        if inj.name:
            call += f" {inj.name}"
        out.append(
            {
                "code": code,
                "severity": "warning" if code == "inject.host_silent" else "info",
                "title": f"after {inj.title}: the host {what} ({call})",
                "detail": json.dumps(
                    {"fault": inj.code, "reaction": what, "id": inj.msg_id}, sort_keys=True
                ),
                "frame_seqs": seqs,
                "source": "inject",
            }
        )
    return out


def _touched(injs: Iterable[Injection], frames: Sequence[Mapping[str, Any]]) -> set[int]:
    """Frames of the requests a fault touched: the request, its answers, inject frames."""
    keys = {i.msg_id for i in injs if i.msg_id is not None}
    return {
        int(f["seq"])
        for f in frames
        if f.get("channel") == "inject" or (f.get("msg_id") in keys and f.get("channel") in _REAL)
    }


def set_aside(
    findings: Sequence[Mapping[str, Any]], frames: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``findings`` without the injected faults: no ``inject.*`` finding, and no finding whose
    frames all belong to a request a fault touched (or are inject frames)."""
    touched = _touched(injections(findings, frames), frames)
    out = []
    for f in findings:
        if str(f.get("code") or "").startswith("inject."):
            continue
        seqs = [int(s) for s in f.get("frame_seqs") or []]
        if seqs and all(s in touched for s in seqs):
            continue
        out.append(dict(f))
    return out


def with_injected(
    findings: Sequence[Mapping[str, Any]], frames: Sequence[Mapping[str, Any]], mode: str
) -> list[dict[str, Any]]:
    """``check --injected MODE``: ``report`` adds the host's reactions, ``ignore`` sets the
    faults aside. A session without injected faults is returned as it is."""
    if not any(str(f.get("code") or "").startswith("inject.") for f in findings):
        return [dict(f) for f in findings]
    if mode == "ignore":
        return set_aside(findings, frames)
    return [dict(f) for f in findings] + [finding_record(r) for r in reactions(findings, frames)]


def session_frames(url: str, session_id: str) -> list[dict[str, Any]]:
    """A session's frames as dicts (the analysis columns), for :func:`with_injected`: read
    through the driver (:func:`~mcp_proxy.store.stream.shaped_pages`), as ``check`` reads."""
    out: list[dict[str, Any]] = []
    shapes, pages = shaped_pages(url, session_id, SHAPED_FRAME_COLUMNS)
    for rows in pages:
        out += [dict(zip(FRAME_COLUMNS, row, strict=True)) for row in named_rows(shapes, rows)]
    return out
