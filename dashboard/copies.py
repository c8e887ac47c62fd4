"""What the Copy buttons copy: a frame's JSON, its exact bytes, an HTTP exchange as a ``curl``
command, an exchange as a JSON Lines recording ``mcptape import``, ``mock`` and ``replay`` read.

Pure functions over stored rows. Frames above :data:`~mcp_proxy.limits.COPY_LIMIT` are not
put on the page a second time: the button is left out and the download stays.
"""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from mcp_proxy.headers import decode_header_value
from mcp_proxy.limits import COPY_LIMIT
from mcp_proxy.recording.jsonl import dumps_jsonl
from mcp_proxy.recording.model import Recording, SessionRecording
from mcp_proxy.render import parse_json_safely
from mcp_proxy.store.rows import HttpExchangeRow, SessionRow, ViewFrame

#: Request headers a ``curl`` command leaves to curl (it sets them itself, or they belong to the
#: one connection the recording was made on).
_CURL_SKIPS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}
)


@dataclass(frozen=True)
class Copy:
    """One Copy button: its element id, its label, the exact text it copies."""

    id: str
    label: str
    text: str


def _raw(f: ViewFrame) -> bytes:
    return bytes(f.get("raw") or b"")


def frame_copies(f: ViewFrame, prefix: str) -> list[Copy]:
    """A frame's JSON (pretty) and its exact bytes (as text, or base64 when not UTF-8)."""
    raw = _raw(f)
    if len(raw) > COPY_LIMIT:
        return []
    out: list[Copy] = []
    msg = parse_json_safely(raw) if f.get("kind") not in ("noise", "stderr", "empty") else None
    if msg is not None:
        try:
            out.append(Copy(f"{prefix}-json", "Copy JSON", json.dumps(msg, indent=2)))
        except (ValueError, RecursionError):  # a NaN or a nesting json cannot write back
            pass
    try:
        out.append(Copy(f"{prefix}-raw", "Copy raw bytes", raw.decode("utf-8")))
    except UnicodeDecodeError:
        out.append(Copy(f"{prefix}-raw", "Copy raw bytes (base64)", base64.b64encode(raw).decode()))
    return out


def _header_value(value: str) -> str:
    try:
        return decode_header_value(value) or value
    except Exception:  # a malformed sentinel is copied as recorded
        return value


def curl_command(http: HttpExchangeRow, body: bytes) -> str:
    """The HTTP request as a ``curl`` command: method, URL, the recorded headers in wire order
    (sentinel-encoded values decoded; credentials as redacted when recorded), the exact body."""
    parts = ["curl", "-X", shlex.quote(str(http["method"])), shlex.quote(str(http["url"]))]
    for item in http.get("request_headers") or []:
        if not (isinstance(item, (list, tuple)) and len(item) == 2):
            continue
        name, value = str(item[0]), str(item[1])
        if name.lower() in _CURL_SKIPS:
            continue
        parts += ["-H", shlex.quote(f"{name}: {_header_value(value)}")]
    if body:
        parts += ["--data-binary", shlex.quote(body.decode("utf-8", "replace"))]
    return " \\\n  ".join([" ".join(parts[:4]), *_pairs(parts[4:])])


def _pairs(flags: list[str]) -> list[str]:
    return [f"{flags[i]} {flags[i + 1]}" for i in range(0, len(flags), 2)]


def jsonl_snippet(session: SessionRow, frames: Sequence[ViewFrame]) -> str | None:
    """The exchange as a recording of its own: the session's facts and these frames, in
    mcptape's JSON Lines (``mcptape import``/``mock``/``replay`` take it). None when a frame
    is above the copy limit. HTTP exchange numbers are dropped: the snippet holds none."""
    if any(len(_raw(f)) > COPY_LIMIT for f in frames):
        return None
    own = [{**f, "raw": _raw(f), "http_exchange_id": None} for f in frames]
    rec = Recording(sessions=[SessionRecording(session=dict(session), frames=own)])
    return dumps_jsonl(rec).decode("utf-8")
