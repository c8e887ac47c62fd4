"""The replay plan: what the replaying host sends, and what it waits for first (pure).

A host frame waits for every host request whose response the recording shows *before* that
frame: that is the causality the host obeyed (it sent ``tools/call`` after it read the
``tools/list`` result), and all a replay may rely on. Server requests (sampling, elicitation,
roots) are answered with the recorded answers, re-addressed to the live request's id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from mcp_proxy.diff import parsable_frames
from mcp_proxy.frames import id_key, strip_line_end
from mcp_proxy.normalize import safe_loads
from mcp_proxy.recording.model import SessionRecording
from mcp_proxy.redact import REDACTED

#: Frame kinds that carry a JSON-RPC message.
MESSAGE_KINDS = ("request", "response", "error", "notification", "batch")


@dataclass
class Action:
    """One thing the replaying host does, in order.

    ``send``: write ``raw`` (or ``message`` re-serialised when it must be rewritten) after the
    live responses to ``wait_for`` (recorded c2s request ids) have arrived.
    ``answer``: wait for the live server's next ``method`` request, then send ``message`` (the
    recorded answer) with the live id.
    """

    kind: str  # send | answer
    raw: bytes
    message: dict[str, Any] | None
    seq: int
    ts: float
    wait_for: list[str] = field(default_factory=list)
    method: str | None = None  # answer: the server request's method
    request_state: str | None = None  # send: the recorded requestState to replace


def messages(session: SessionRecording) -> Iterator[tuple[dict[str, Any], Any]]:
    """Each JSON-RPC frame with its parsed message; a frame too deep to parse is sent as bytes.

    (Frames nested beyond the JSON parser's reach come back with ``None`` as the message, so
    the plan sends their recorded bytes as they are, like any frame it cannot read.)
    """
    frames, unparsable = parsable_frames(session.frames)
    deep = set(unparsable)
    originals = {f["seq"]: f for f in session.frames} if deep else {}
    for f in frames:
        if f["seq"] in deep:
            yield originals[f["seq"]], None
            continue
        if f["kind"] not in MESSAGE_KINDS:
            continue
        msg = safe_loads(strip_line_end(bytes(f["raw"])))
        if msg is not None:
            yield f, msg


def _request_state(msg: dict[str, Any]) -> str | None:
    params = msg.get("params")
    value = params.get("requestState") if isinstance(params, dict) else None
    return value if isinstance(value, str) else None


def plan(session: SessionRecording) -> list[Action]:
    """What to send and what to wait for, from the recorded frames (pure)."""
    actions: list[Action] = []
    answered: list[str] = []  # c2s request ids answered so far and not yet waited for
    s2c_methods: dict[str, str] = {}  # s2c request id → method
    for f, msg in messages(session):
        if not isinstance(msg, dict):
            if f["direction"] == "c2s":
                actions.append(Action("send", bytes(f["raw"]), None, f["seq"], f["ts"], answered))
                answered = []
            continue
        rid = (id_key(msg["id"]) or "") if msg.get("id") is not None else None
        if f["direction"] == "s2c":
            if rid is not None and "method" in msg:
                s2c_methods[rid] = str(msg["method"])
            elif rid is not None:
                answered.append(rid)
            continue
        if rid is not None and "method" not in msg:  # the host answering a server request
            method = s2c_methods.get(rid)
            act = Action("answer", bytes(f["raw"]), msg, f["seq"], f["ts"], answered, method)
        else:
            act = Action("send", bytes(f["raw"]), msg, f["seq"], f["ts"], answered)
            act.request_state = _request_state(msg)
        actions.append(act)
        answered = []
    return actions


def outstanding_requests(session: SessionRecording) -> list[str]:
    """Host request ids the recording shows answered (a replay waits for them before EOF)."""
    out = []
    for f, msg in messages(session):
        if f["direction"] == "s2c" and isinstance(msg, dict) and "method" not in msg:
            if msg.get("id") is not None:
                out.append(id_key(msg["id"]) or "")
    return out


def recorded_states(session: SessionRecording) -> Iterator[tuple[str, str]]:
    """(request id, requestState) for every recorded result that carried one (MRTR rounds)."""
    for f, msg in messages(session):
        if f["direction"] != "s2c" or not isinstance(msg, dict):
            continue
        res = msg.get("result")
        state = res.get("requestState") if isinstance(res, dict) else None
        if isinstance(state, str) and msg.get("id") is not None:
            yield id_key(msg["id"]) or "", state


def redacted_paths(value: Any, path: str = "$") -> list[str]:
    """JSONPaths of the values the recorder replaced with ``[REDACTED]`` (iterative)."""
    out: list[str] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if node == REDACTED or (isinstance(node, str) and node.endswith(" " + REDACTED)):
            out.append(where)
        elif isinstance(node, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
    return out


def redaction_warnings(session: SessionRecording) -> list[str]:
    """Which host→server fields a replay cannot reproduce because the recording redacted them."""
    out = []
    for f, msg in messages(session):
        if f["direction"] != "c2s" or not isinstance(msg, dict):
            continue
        paths = redacted_paths({k: v for k, v in msg.items() if k != "id"})
        if paths:
            what = msg.get("method") or f"answer to id {msg.get('id')}"
            out.append(
                f"frame #{f['seq']} {what}: {', '.join(paths)} redacted in the recording;"
                f" sent as {REDACTED!r}"
            )
    return out


__all__ = [
    "Action",
    "messages",
    "outstanding_requests",
    "plan",
    "recorded_states",
    "redacted_paths",
    "redaction_warnings",
]
