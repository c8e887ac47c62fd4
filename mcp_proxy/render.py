"""Text rendering of sessions and frames for the terminal (``show``, ``tail``, ``sessions``).

Pure functions from store rows to strings; the JSON renderings are what ``--format json``
prints, so scripts see exactly the fields people see.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

from orjson import OPT_INDENT_2 as _INDENT_2
from orjson import dumps as _orjson_dumps

from mcp_proxy.frames import parse_json, strip_line_end, text_or_none
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.queries import duration, session_status

ARROWS = {"c2s": "→", "s2c": "←"}
#: The ``inject`` channel: bytes mcptape put on the wire in a peer's place (fault injection).
INJECT = "inject"
#: How the text views mark an injected frame (beside its arrow: the receiver got it, the peer
#: never sent it).
INJECTED_MARK = "[INJECTED by mcptape]"
#: Control characters that could rewrite the terminal (escape sequences, bidi overrides).
_UNSAFE = {c: f"\\u{c:04x}" for c in [*range(0, 9), *range(11, 32), 127]}
_UNSAFE.update(
    {
        c: f"\\u{c:04x}"
        for c in (0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069)
    }
)


# Lone surrogates (JSON's "\ud800" decodes to one) cannot be written to a terminal or a file:
# shown as their escape.
_UNSAFE.update({c: f"\\u{c:04x}" for c in range(0xD800, 0xE000)})


def _char_class(codes: list[int]) -> str:
    """``[...]`` matching exactly these code points, as ranges: a class of 2,000 single
    characters took ~50 ms to compile at every start of the CLI and searched slower."""
    parts: list[str] = []
    codes = sorted(codes)
    i = 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1] == codes[j] + 1:
            j += 1
        first, last = re.escape(chr(codes[i])), re.escape(chr(codes[j]))
        parts.append(first if i == j else f"{first}-{last}")
        i = j + 1
    return "[" + "".join(parts) + "]"


_UNSAFE_RE = re.compile(_char_class(list(_UNSAFE)))


def parse_json_safely(raw: bytes | bytearray) -> Any:
    """A frame's parsed JSON for display, or None when it is not JSON or nested too deep.

    The recorder stores whatever crossed the wire, including JSON nested thousands of levels
    deep; a viewer then shows the exact text instead of a pretty rendering, never a traceback.
    """
    try:
        return parse_json(raw)
    except RecursionError:
        return None


def pretty_json(msg: Any) -> str | None:
    """``msg`` indented for people, or None when it is nested too deep to indent."""
    try:
        return json.dumps(msg, indent=2, ensure_ascii=False)
    except RecursionError:
        return None


def json_id(msg_id: str | None) -> Any:
    """A stored ``msg_id`` (the id's JSON text) as a value; text that is not JSON stays text.

    Ids are stored as their JSON text; a store that ever cut or mangled one must not make the
    frame unprintable.
    """
    if not msg_id:
        return None
    try:
        return json.loads(msg_id)
    except (ValueError, RecursionError):
        return msg_id


def cli_name() -> str:
    """How the user runs mcptape from where they are, for commands we suggest to them.

    After ``uv run mcptape demo`` the command is not on the user's PATH (uv put the project's
    environment on PATH only for that one run), so suggestions say ``uv run mcptape``; a
    command installed on PATH is just ``mcptape``; one run by its path is that path; otherwise
    ``python -m mcp_proxy``.
    """
    import os
    import shutil
    import sys

    if os.environ.get("UV") or os.environ.get("UV_RUN_RECURSION_DEPTH"):
        return "uv run mcptape"
    if shutil.which("mcptape"):
        return "mcptape"
    invoked = sys.argv[0] if sys.argv else ""
    if os.path.basename(invoked) == "mcptape" and os.sep in invoked:
        return invoked  # run by its path (`.venv/bin/mcptape`): that path works again
    return f"{sys.executable} -m mcp_proxy"


def safe(text: str) -> str:
    """Neutralise terminal escapes and bidi overrides a server may have sent."""
    # (A scan in C first: most text has nothing to replace, and translate is per character.)
    return text.translate(_UNSAFE) if _UNSAFE_RE.search(text) else text


def clock(ts: float | None) -> str:
    if ts is None:
        return "-"
    t = time.localtime(ts)
    return time.strftime("%H:%M:%S", t) + f".{int((ts % 1) * 1000):03d}"


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def session_json(s: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in s.items()}
    out["status"] = session_status(s)
    out["duration"] = duration(s)
    return out


def session_line(s: dict[str, Any]) -> str:
    dur = duration(s)
    who = s.get("server_name") or (
        " ".join(s.get("command") or [])[:40] if s.get("command") else s.get("upstream") or ""
    )
    parts = [
        s["id"][:12],
        when(s.get("started_at")),
        f"{(dur or 0):7.1f}s",
        f"{session_status(s):9}",
        f"{s.get('transport', ''):5}",
        f"{s.get('frame_count') or 0:7} frames",
        (s.get("name") or "-")[:24].ljust(24),
        safe(str(who)),
    ]
    if s.get("gap_count"):
        parts.append(f"GAP:{s['gap_count']}")
    return "  ".join(parts)


def frame_json(f: dict[str, Any]) -> dict[str, Any]:
    """One frame as ``show --format json`` prints it."""
    raw: bytes = f.get("raw") or b""
    text = text_or_none(raw)
    out: dict[str, Any] = {
        "seq": f["seq"],
        "ts": f["ts"],
        "direction": f["direction"],
        "channel": f["channel"],
        "kind": f["kind"],
        "method": f.get("method"),
        "id": json_id(f.get("msg_id")),
        "size": f["size"],
        "complete": bool(f.get("complete", True)),
    }
    if f.get("error_code") is not None:
        out["error_code"] = f["error_code"]
    if f.get("http_exchange_id") is not None:
        out["http_exchange_id"] = f["http_exchange_id"]
    if f.get("sse_id") is not None or f.get("sse_event") is not None:
        out["sse"] = {"id": f.get("sse_id"), "event": f.get("sse_event")}
    if f["channel"] == INJECT:
        out["injected"] = True
    if text is not None:
        out["text"] = text
    else:
        out["base64"] = base64.b64encode(raw).decode("ascii")
    return out


def frame_header(f: dict[str, Any], session_name: str | None = None) -> str:
    arrow = ARROWS.get(f["direction"], "?")
    label = f["kind"]
    if f["channel"] == "stderr":
        label = "stderr"
    bits = [f"#{f['seq']:<5}", clock(f["ts"])]
    if session_name:
        bits.append(f"[{safe(session_name)}]")
    bits.append(arrow)
    if f["channel"] == INJECT:
        bits.append(INJECTED_MARK)
    bits.append(f"{label:12}")
    if f.get("method"):
        bits.append(safe(f["method"]))
    if f.get("msg_id") is not None:
        bits.append(f"id={safe(f['msg_id'])}")
    if f.get("error_code") is not None:
        bits.append(f"code={f['error_code']}")
    bits.append(f"({human_size(int(f['size']))})")
    if not f.get("complete", True):
        bits.append("[cut short]")
    return " ".join(bits)


def frame_body(f: dict[str, Any], *, max_chars: int = 20_000) -> str:
    raw: bytes = f.get("raw") or b""
    if f["channel"] == "stderr":
        text = text_or_none(strip_line_end(raw))
        return safe(text if text is not None else repr(raw))
    msg = parse_json_safely(raw) if f["kind"] not in ("noise", "stderr") else None
    pretty = pretty_json(msg) if msg is not None else None
    if pretty is not None:
        text = pretty
    else:
        t = text_or_none(strip_line_end(raw))
        text = t if t is not None else "(not UTF-8) " + repr(strip_line_end(raw)[:2000])
    if len(text) > max_chars:
        text = (
            text[:max_chars] + f"\n… ({len(text) - max_chars} more characters; use --format json)"
        )
    return safe(text)


def frame_block(f: dict[str, Any], *, body: bool = True) -> str:
    head = frame_header(f)
    if not body:
        return head
    content = frame_body(f)
    if f["channel"] == "stderr":
        return f"{head}  {content}"
    return head + "\n" + "\n".join("    " + line for line in content.splitlines())


def frame_oneline(f: dict[str, Any], session_name: str | None = None, width: int = 160) -> str:
    head = frame_header(f, session_name)
    raw: bytes = f.get("raw") or b""
    text = text_or_none(strip_line_end(raw[:4096])) or repr(raw[:200])
    text = safe(text)
    room = max(20, width - len(head) - 2)
    if len(text) > room:
        text = text[: room - 1] + "…"
    return f"{head}  {text}"


# ---------------------------------------------------------------------------------- analysis

SEVERITY_LABEL = {"error": "ERROR  ", "warning": "WARNING", "info": "info   "}


def finding_text(row: dict[str, Any], *, detail: bool = True) -> str:
    """One finding for the terminal: severity, code, title, proof; detail indented below."""
    seqs = row.get("frame_seqs") or []
    proof = ""
    if seqs:
        shown = ",".join(f"#{s}" for s in seqs[:6])
        proof = f"  [{shown}{'…' if len(seqs) > 6 else ''}]"
    sev = SEVERITY_LABEL.get(str(row.get("severity")), str(row.get("severity")))
    line = f"  {sev} {row.get('code', ''):38} {safe(str(row.get('title') or ''))}{proof}"
    if detail and row.get("detail"):
        for d in str(row["detail"]).splitlines()[:8]:
            line += "\n" + " " * 11 + safe(d)
    return line


OUTCOME_LABEL = {
    "ok": "ok",
    "tool_error": "tool error",
    "input_required": "input req.",
    "error": "error",
    "http_error": "HTTP error",
    "cancelled": "cancelled",
    "aborted": "aborted",
    "lost": "LOST",
    "no_response": "NO RESPONSE",
    "closed": "closed",
    "pending": "pending",
}


def exchange_text(ex: Any) -> str:
    """One exchange for the terminal: frames, direction, method, outcome, latency, extras."""
    frames = f"#{ex.request_seq}" + (f"→#{ex.response_seq}" if ex.response_seq else "")
    arrow = "→" if ex.direction == "c2s" else "←"
    label = ex.method + (f" {ex.name}" if ex.name else "")
    outcome = OUTCOME_LABEL.get(ex.outcome, ex.outcome)
    if ex.outcome == "error" and ex.error_code is not None:
        outcome += f" {ex.error_code}"
    latency = f"{ex.latency_ms:.1f} ms" if ex.latency_ms is not None else "-"
    extras = []
    if ex.progress_seqs:
        extras.append(f"progress×{len(ex.progress_seqs)}")
    if ex.log_seqs:
        extras.append(f"logs×{len(ex.log_seqs)}")
    if ex.children:
        extras.append(f"server requests×{len(ex.children)}")
    if ex.cancel_seq is not None:
        extras.append(f"cancel #{ex.cancel_seq}")
    if ex.chain is not None:
        extras.append(f"MRTR chain {ex.chain} round {ex.round}")
    if ex.error_message and ex.outcome == "error":
        extras.append(repr(ex.error_message[:60]))
    return (
        f"{frames:14} {arrow} {safe(label)[:40]:40} {outcome:14} {latency:>11}  id={ex.msg_id}"
        + ("  " + "  ".join(extras) if extras else "")
    )


def injected_text(item: Any) -> str:
    """An injected frame among the exchanges of ``show -x``: its own line, marked, so a
    rehearsal's fake answer is never read as the server's."""
    arrow = "→" if item.direction == "c2s" else "←"
    label = item.method or item.kind
    return f"{'#' + str(item.seq):14} {arrow} {INJECTED_MARK} {safe(label)[:40]}" + (
        f"  id={safe(item.msg_id)}" if item.msg_id is not None else ""
    )


# ---------------------------------------------------------------------------------- streaming
# `show` prints every frame of sessions of a million frames: the functions below take the
# tuples of mcp_proxy.store.columns.FRAME_COLUMNS and produce exactly what frame_json (as JSON
# text) and frame_block produce for the same row, without building dictionaries or running the
# pure-Python indenting JSON encoder (tests/test_render.py holds them equal).

_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, ensure_ascii=False
_LINE_BREAKS_RE = re.compile("[\x85\u2028\u2029]")
_SPECIAL_RE = re.compile(_UNSAFE_RE.pattern[:-1] + "\x85\u2028\u2029]")
_clock_cache: dict[int, str] = {}


def _clock_fast(ts: float) -> str:
    second = int(ts)
    base = _clock_cache.get(second)
    if base is None:
        if len(_clock_cache) > 4096:
            _clock_cache.clear()
        base = _clock_cache[second] = time.strftime("%H:%M:%S", time.localtime(ts))
    return f"{base}.{int((ts % 1) * 1000):03d}"


def _json_value(value: Any) -> str:
    if isinstance(value, str):
        return _encode_str(value)
    return json.dumps(value, ensure_ascii=False)


def _id_text(msg_id: str | None) -> str:
    if not msg_id:
        return "null"
    if msg_id.isdigit() and msg_id.isascii() and (msg_id[0] != "0" or msg_id == "0"):
        return msg_id  # the common case: a small integer id, stored as its JSON text
    return _json_value(json_id(msg_id))


#: ``"direction": …, "channel": …, "kind": …, "method": …, `` per combination: a session has
#: a few dozen, and encoding four strings per frame was a third of a JSON line's cost.
_MIDDLES: dict[tuple[Any, ...], str] = {}


def _middle(key: tuple[Any, ...]) -> str:
    direction, channel, kind, method = key
    text = (
        f'"direction": {_encode_str(direction)}, "channel": {_encode_str(channel)}, '
        f'"kind": {_encode_str(kind)}, "method": '
        f"{_encode_str(method) if method is not None else 'null'}, "
    )
    if len(_MIDDLES) < 4096:
        _MIDDLES[key] = text
    return text


def frame_json_line(row: tuple[Any, ...]) -> str:
    """``json.dumps(frame_json(f), ensure_ascii=False)`` for a row of ``FRAME_COLUMNS``."""
    (seq, ts, _mono, direction, channel, kind, method, msg_id, error_code, size, complete, _partial,
     raw, hx, sse_id, sse_event) = row  # fmt: skip
    key = (direction, channel, kind, method)
    middle = _MIDDLES.get(key) or _middle(key)
    if msg_id is None:
        ident = "null"
    elif msg_id.isdigit() and msg_id.isascii() and (msg_id[0] != "0" or msg_id == "0"):
        ident = msg_id  # the common case: a small integer id, stored as its JSON text
    else:
        ident = _id_text(msg_id)
    head = (
        f'{{"seq": {seq}, "ts": {ts if type(ts) is float else float(ts)!r}, {middle}"id": {ident},'
        f' "size": {size}, "complete": {"true" if complete or complete is None else "false"}'
    )
    if error_code is not None or hx is not None or sse_id is not None or sse_event is not None:
        head += _extras(error_code, hx, sse_id, sse_event)
    if channel == INJECT:
        head += ', "injected": true'
    data = raw if type(raw) is bytes else bytes(raw or b"")
    try:
        return f'{head}, "text": {_encode_str(data.decode("utf-8"))}}}'
    except UnicodeDecodeError:
        return f'{head}, "base64": "{base64.b64encode(data).decode("ascii")}"}}'


def _extras(error_code: Any, hx: Any, sse_id: Any, sse_event: Any) -> str:
    parts = []
    if error_code is not None:
        parts.append(f', "error_code": {error_code}')
    if hx is not None:
        parts.append(f', "http_exchange_id": {hx}')
    if sse_id is not None or sse_event is not None:
        parts.append(f', "sse": {{"id": {_json_value(sse_id)}, "event": {_json_value(sse_event)}}}')
    return "".join(parts)


def _scalar(value: Any) -> str:
    if type(value) is str:
        return _encode_str(value)
    if type(value) is int:
        return int.__repr__(value)
    return json.dumps(value)  # floats (NaN, Infinity as json writes them), true/false/null


def _pretty(value: Any, pad: str, out: list[str]) -> None:
    """``json.dumps(value, indent=2, ensure_ascii=False)``, each line after the first prefixed
    with ``pad`` (the block's indent), appended to ``out``.

    Scalars are written inline by their container (most values are scalars): one call per
    object or array instead of one per value.
    """
    t = type(value)
    if t is not dict and t is not list:
        out.append(_scalar(value))
        return
    if not value:
        out.append("{}" if t is dict else "[]")
        return
    inner = pad + "  "
    sep = ("{\n" if t is dict else "[\n") + inner
    nxt = ",\n" + inner
    items = value.items() if t is dict else ((None, v) for v in value)
    for key, item in items:
        label = sep if key is None else f"{sep}{_encode_str(key)}: "
        sep = nxt
        kind = type(item)
        if kind is str:
            out.append(label + _encode_str(item))
        elif (kind is dict or kind is list) and item:
            out.append(label)
            _pretty(item, inner, out)
        else:
            out.append(label + _scalar(item))
    out.append("\n" + pad + ("}" if t is dict else "]"))


#: Set while decoding a body when it holds a float (or NaN/Infinity): orjson writes some floats
#: differently from ``json.dumps`` (``1e16``, not ``1e+16``), so such a body is indented by
#: :func:`_pretty` instead.
_FLOATS: list[bool] = []


def _saw_float(text: str) -> float:
    _FLOATS.append(True)
    return float(text)


def _saw_constant(text: str) -> float:
    _FLOATS.append(True)
    return float(text)  # "NaN", "Infinity", "-Infinity", as json.loads reads them


_decode_flagged = json.JSONDecoder(parse_float=_saw_float, parse_constant=_saw_constant).decode


def _indent_c(msg: Any) -> str | None:
    """``json.dumps(msg, indent=2, ensure_ascii=False)`` with every line after the first
    indented by four more spaces, in C (orjson); None for what orjson writes differently or
    refuses (floats are kept away by the caller; integers past 64 bits, lone surrogates and
    nesting past orjson's limit raise here).

    The same bytes for every value without floats (tests/test_render.py compares them on
    random values): the same separators, key order and string escapes (``"``, ``\\`` and
    controls; everything else written as is, as ``ensure_ascii=False`` does).
    """
    try:
        data = _orjson_dumps(msg, option=_INDENT_2)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None
    return data.decode("utf-8").replace("\n", "\n    ")


def frame_text(row: tuple[Any, ...], *, body: bool = True) -> str:
    """``frame_block(f, body=body)`` for a row of ``FRAME_COLUMNS``."""
    (seq, ts, _mono, direction, channel, kind, method, msg_id, error_code, size, complete, _partial,
     raw, _hx, _sid, _sev) = row  # fmt: skip
    label = "stderr" if channel == "stderr" else kind
    head = f"#{seq:<5} {_clock_fast(ts)} {ARROWS.get(direction, '?')} {label:12}"
    if channel == INJECT:
        head = (
            f"#{seq:<5} {_clock_fast(ts)} {ARROWS.get(direction, '?')} {INJECTED_MARK} {label:12}"
        )
    if method:
        head += " " + safe(method)
    if msg_id is not None:
        head += f" id={safe(msg_id)}"
    if error_code is not None:
        head += f" code={error_code}"
    head += f" ({human_size(int(size))})"
    if not (complete or complete is None):
        head += " [cut short]"
    if not body:
        return head
    data = bytes(raw or b"")
    if channel == "stderr" or kind in ("noise", "stderr") or len(data) > 20_000:
        # Rare shapes (and frames that may be cut at 20,000 characters): the general path.
        f = dict(zip(FRAME_COLUMNS, row, strict=True))
        return frame_block(f, body=True)
    _FLOATS.clear()
    try:  # (parse_json without its checks: small, and not noise)
        msg = _decode_flagged(data.decode("utf-8"))
    except (ValueError, RecursionError):
        msg = None
    if msg is None or not isinstance(msg, (dict, list)):
        return frame_block(dict(zip(FRAME_COLUMNS, row, strict=True)), body=True)
    text = _indent_c(msg) if not _FLOATS else None
    if text is None:
        out: list[str] = []
        try:
            _pretty(msg, "    ", out)
        except RecursionError:
            return frame_block(dict(zip(FRAME_COLUMNS, row, strict=True)), body=True)
        text = "".join(out)
    if len(text) > 20_000:  # cut at 20,000 characters: the general path
        return frame_block(dict(zip(FRAME_COLUMNS, row, strict=True)), body=True)
    if _SPECIAL_RE.search(text):  # rare: one scan for both kinds of special characters
        if _LINE_BREAKS_RE.search(text):  # str.splitlines() breaks there: the general path
            return frame_block(dict(zip(FRAME_COLUMNS, row, strict=True)), body=True)
        text = safe(text)
    return f"{head}\n    {text}"


# ----------------------------------------------------------------------------- shaped batches
# ``show`` on SQLite reads ``frame_rows`` as stored (mcp_proxy.store.stream.shaped_batches):
# direction, channel, kind and method come as one integer, the frame's *shape*, and what a
# shape prints (the JSON keys and strings, the text header's arrow, label and method) is built
# once per shape. Each batch becomes one list of lines. The output is the one frame_json_line
# and frame_text give for the same frame (tests/test_render.py, tests/analysis/test_fast_readers.py).

#: The columns a :class:`ShapedRenderer` reads, in this order (``show`` asks for them).
SHAPED_COLUMNS: tuple[str, ...] = (
    "seq", "ts", "shape", "msg_id", "error_code", "size", "complete", "raw", "http_exchange_id",
    "sse_id", "sse_event",
)  # fmt: skip

#: A digit before ``.``/``e``/``E``: every JSON float has one (a fraction or an exponent follows
#: its digits). A body without one holds no float, so orjson reads it as ``json.loads`` does (and
#: ``_indent_c`` writes it as ``json.dumps``); one with a match (a float, or a string such as
#: ``"v1.2"``) takes the general path. The JSON-RPC version member, in every message, is
#: removed before the scan (its ``"2.0"`` is a string). Invalid JSON fails in orjson and takes
#: the general path too. So do integers of 19 digits or more: orjson reads one past 64 bits as
#: a float, where ``json.loads`` keeps it exact.
_FLOAT_DIGIT = re.compile(rb"[0-9][.eE]|[0-9]{19}").search
_VERSION_MEMBERS = (b'"jsonrpc":"2.0"', b'"jsonrpc": "2.0"')


def _floatish(data: bytes) -> bool:
    """Whether ``data`` may hold a JSON float or a long integer (see :data:`_FLOAT_DIGIT`)."""
    v1, v2 = _VERSION_MEMBERS
    return _FLOAT_DIGIT(data.replace(v1, b"").replace(v2, b"")) is not None


_orjson_loads = __import__("orjson").loads
_sizes: dict[int, str] = {}


def _size_text(size: int) -> str:
    text = _sizes.get(size)
    if text is None:
        if len(_sizes) > 65536:
            _sizes.clear()
        text = _sizes[size] = f" ({human_size(int(size))})"
    return text


class ShapedRenderer:
    """Renders batches of :data:`SHAPED_COLUMNS` rows; ``shapes`` decodes a shape into
    ``(direction, channel, kind, method)`` (:class:`mcp_proxy.store.stream.Shapes`)."""

    def __init__(self, shapes: Any) -> None:
        self.shapes = shapes
        self._json: dict[int, tuple[str, bool]] = {}
        #: shape → (header after the clock, general path needed, channel)
        self._text: dict[int, tuple[str, bool, Any]] = {}

    def full_row(self, row: tuple[Any, ...]) -> tuple[Any, ...]:
        """The row as a :data:`FRAME_COLUMNS` tuple (mono_ns and partial_parse not read: None)."""
        seq, ts, shape, msg_id, error_code, size, complete, raw, hx, sse_id, sse_event = row
        direction, channel, kind, method = self.shapes(shape)
        return (seq, ts, None, direction, channel, kind, method, msg_id, error_code, size,
                complete, None, raw, hx, sse_id, sse_event)  # fmt: skip

    def _json_shape(self, shape: int) -> tuple[str, bool]:
        direction, channel, kind, method = self.shapes(shape)
        middle = (
            f'"direction": {_json_value(direction)}, "channel": {_json_value(channel)}, '
            f'"kind": {_json_value(kind)}, "method": {_json_value(method)}, '
        )
        found = self._json[shape] = (middle, channel == INJECT)
        return found

    def json(self, rows: list[tuple[Any, ...]]) -> list[str]:
        """``frame_json_line`` of each row."""
        cache = self._json
        out: list[str] = []
        append = out.append
        for seq, ts, shape, msg_id, error_code, size, complete, raw, hx, sse_id, sse_event in rows:
            middle, inject = cache.get(shape) or self._json_shape(shape)
            if msg_id is None:
                ident = "null"
            elif msg_id.isdigit() and msg_id.isascii() and (msg_id[0] != "0" or msg_id == "0"):
                ident = msg_id
            else:
                ident = _id_text(msg_id)
            head = (
                f'{{"seq": {seq}, "ts": {ts if type(ts) is float else float(ts)!r}, {middle}'
                f'"id": {ident}, "size": {size}, "complete": '
                f"{'true' if complete or complete is None else 'false'}"
            )
            if (
                error_code is not None
                or hx is not None
                or sse_id is not None
                or sse_event is not None
            ):
                head += _extras(error_code, hx, sse_id, sse_event)
            if inject:
                head += ', "injected": true'
            data = raw if type(raw) is bytes else bytes(raw or b"")
            try:
                append(f'{head}, "text": {_encode_str(data.decode("utf-8"))}}}')
            except UnicodeDecodeError:
                append(f'{head}, "base64": "{base64.b64encode(data).decode("ascii")}"}}')
        return out

    def _text_shape(self, shape: int) -> tuple[str, bool, Any]:
        direction, channel, kind, method = self.shapes(shape)
        label = "stderr" if channel == "stderr" else kind
        mark = f" {INJECTED_MARK}" if channel == INJECT else ""
        mid = f" {ARROWS.get(direction, '?')}{mark} {label:12}"  # type: ignore[arg-type]
        if method:
            mid += " " + safe(method)
        general = channel == "stderr" or kind in ("noise", "stderr")
        found = self._text[shape] = (mid, general, channel)
        return found

    def text(self, rows: list[tuple[Any, ...]], *, body: bool = True) -> list[str]:
        """``frame_text(row, body=body)`` of each row (``no_stderr``: without the stderr channel)."""
        cache = self._text
        out: list[str] = []
        append = out.append
        clocks, loads, dumps, floatish = _clock_cache, _orjson_loads, _orjson_dumps, _floatish
        for row in rows:
            seq, ts, shape, msg_id, error_code, size, complete, raw = row[:8]
            mid, general, _channel = cache.get(shape) or self._text_shape(shape)
            base = clocks.get(int(ts))
            if base is None:
                head = f"#{seq:<5} {_clock_fast(ts)}{mid}"
            else:
                head = f"#{seq:<5} {base}.{int((ts % 1) * 1000):03d}{mid}"
            if msg_id is not None:
                head += (
                    f" id={msg_id}"
                    if msg_id.isdigit() and msg_id.isascii()
                    else f" id={safe(msg_id)}"
                )
            if error_code is not None:
                head += f" code={error_code}"
            head += _sizes.get(size) or _size_text(size)
            if not (complete or complete is None):
                head += " [cut short]"
            if not body:
                append(head)
                continue
            data = raw if type(raw) is bytes else bytes(raw or b"")
            text = None
            if not general and len(data) <= 20_000 and not floatish(data):
                try:
                    msg = loads(data)
                    pretty = dumps(msg, option=_INDENT_2)
                except (TypeError, ValueError):  # the general path decides (as _indent_c)
                    msg = pretty = None
                if (type(msg) is dict or type(msg) is list) and pretty is not None:
                    # orjson escapes every control character but DEL; a body in plain ASCII
                    # without DEL has nothing safe() would change (no regex scan then).
                    if pretty.isascii() and b"\x7f" not in pretty:
                        text = pretty.decode("ascii").replace("\n", "\n    ")
                    else:
                        text = pretty.decode("utf-8").replace("\n", "\n    ")
                        if _SPECIAL_RE.search(text):
                            text = None
            if text is None or len(text) > 20_000:
                append(frame_text(self.full_row(row), body=True))
                continue
            append(f"{head}\n    {text}")
        return out
