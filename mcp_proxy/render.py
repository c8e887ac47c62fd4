"""Text rendering of sessions and frames for the terminal (``show``, ``tail``, ``sessions``).

Pure functions from store rows to strings; the JSON renderings are what ``--format json``
prints, so scripts see exactly the fields people see. Frames have one renderer,
:class:`FrameRenderer`, over row tuples; the dict entry points (:func:`frame_json`,
:func:`frame_header`) are thin adapters over it.
"""

from __future__ import annotations

import base64
import json
import re
import time
from bisect import bisect_right
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from orjson import OPT_INDENT_2 as _INDENT_2
from orjson import dumps as _orjson_dumps
from orjson import loads as _orjson_loads

from mcp_proxy.bounded import depth_exceeds
from mcp_proxy.frames import (
    json_id,
    parse_json,
    plain_float_texts,
    strip_line_end,
    text_or_none,
)
from mcp_proxy.limits import CLOCK_CACHE, PRETTY_DEPTH, SHAPE_CACHE, SIZE_TEXT_CACHE
from mcp_proxy.store.liveness import duration, session_status
from mcp_proxy.store.rows import SessionRow, ViewFrame
from mcp_proxy.store.stream import RowShapes

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


def session_json(s: SessionRow) -> dict[str, Any]:
    """A session row as ``--format json`` prints it (a JSON edge), status and duration added."""
    out = {k: v for k, v in s.items()}
    out["status"] = session_status(s)
    out["duration"] = duration(s)
    return out


def session_line(s: SessionRow) -> str:
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


def frame_json(f: ViewFrame) -> dict[str, Any]:
    """One frame (a row as a dict: the dashboard's, ``tail``'s) as ``show --format json``
    prints it: a thin adapter over :class:`FrameRenderer`, the one renderer."""
    renderer, row = _one_row(f)
    return json.loads(renderer.json([row])[0])  # type: ignore[no-any-return]


def frame_header(f: ViewFrame, session_name: str | None = None) -> str:
    """The text header ``show`` prints for a frame (a row as a dict), the session's name after
    the clock when given: a thin adapter over :class:`FrameRenderer`."""
    renderer, row = _one_row(f)
    head = renderer.text([row], body=False)[0].decode()
    if not session_name:
        return head
    at = len(f"#{row[0]:<5} ") + len(_clock_base(row[1])) + 4  # the clock and its milliseconds
    return f"{head[:at]} [{safe(session_name)}]{head[at:]}"


def frame_oneline(f: ViewFrame, session_name: str | None = None, width: int = 160) -> str:
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
    task = getattr(ex, "task", None)
    if task is not None:
        ms = task.duration_ms
        took = "" if ms is None else f" in {ms:.1f} ms" if ms < 1000 else f" in {ms / 1000:.2f} s"
        polls = f", {task.polls} poll(s)" if task.polls else ""
        notes = getattr(task, "notifications", 0)
        polls += f", {notes} status notification(s)" if notes else ""
        extras.append(safe(f"task {task.id[:40]}: {task.lifecycle_text()[:200]}{took}{polls}"))
    task_of = getattr(ex, "task_of", None)
    if task_of is not None:
        extras.append(f"task of #{task_of}")
    if ex.error_message and ex.outcome == "error":
        extras.append(repr(ex.error_message[:60]))
    return (
        f"{frames:14} {arrow} {safe(label)[:40]:40} {outcome:14} {latency:>11}  id={ex.msg_id}"
        + ("  " + "  ".join(extras) if extras else "")
    )


def folded_poll(ex: Any) -> bool:
    """A task's ``tasks/get`` that answered plainly: ``show -x`` folds it into the line of the
    call that created the task ("N poll(s)", the statuses in its lifecycle), as it folds
    progress and log notifications; a poll that failed or carried more stays on its own line.
    ``--format json`` keeps every exchange."""
    return (
        ex.method == "tasks/get"
        and getattr(ex, "task_of", None) is not None
        and ex.outcome == "ok"
        and not ex.children
        and not ex.progress_seqs
        and not ex.log_seqs
        and ex.cancel_seq is None
    )


def injected_text(item: Any) -> str:
    """An injected frame among the exchanges of ``show -x``: its own line, marked, so a
    rehearsal's fake answer is never read as the server's."""
    arrow = "→" if item.direction == "c2s" else "←"
    label = item.method or item.kind
    return f"{'#' + str(item.seq):14} {arrow} {INJECTED_MARK} {safe(label)[:40]}" + (
        f"  id={safe(item.msg_id)}" if item.msg_id is not None else ""
    )


# ------------------------------------------------------------------------------- the renderer
# ``show`` prints every frame of sessions of a million frames. One renderer, over rows of
# SHAPED_COLUMNS: direction, channel, kind and method come as one key, the frame's *shape*, and
# what a shape prints (the JSON keys and strings, the text header's arrow, label and method) is
# built once per shape. From the store the shape is the stored integer
# (mcp_proxy.store.stream.shaped_pages); a frame held as a dict (the dashboard's, tail's) is
# made the same row with a shape of its own table (store.stream.RowShapes, _one_row).

#: The columns a :class:`FrameRenderer` reads, in this order (``show`` asks for them).
SHAPED_COLUMNS: tuple[str, ...] = (
    "seq", "ts", "shape", "msg_id", "error_code", "size", "complete", "raw", "http_exchange_id",
    "sse_id", "sse_event",
)  # fmt: skip
#: What the text view prints of them (the first eight): ``show`` text leaves the HTTP exchange
#: and the SSE id and event in the database (each column read costs ~0.1 µs a frame).
TEXT_COLUMNS = SHAPED_COLUMNS[:8]

#: Decodes a shape into ``(direction, channel, kind, method)``.
type ShapeNames = Callable[[Any], tuple[Any, Any, Any, Any]]

_encode_str = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C, ensure_ascii=False
_LINE_BREAKS_RE = re.compile("[\x85\u2028\u2029]")
_SPECIAL_RE = re.compile(_UNSAFE_RE.pattern[:-1] + "\x85\u2028\u2029]")
#: A second's ``HH:MM:SS`` (local time) by the second, for the text header.
_clock_cache: dict[int, bytes] = {}
#: Characters of a body shown in text; past them it is cut, pointing at ``--format json``.
BODY_CHARS = 20_000


def _one_row(f: ViewFrame) -> tuple[FrameRenderer, tuple[Any, ...]]:
    """A frame held as a dict (the async store's) as the row of :data:`SHAPED_COLUMNS` the
    store would give, and a renderer that decodes its shape (the one row shape:
    :class:`~mcp_proxy.store.stream.RowShapes`)."""
    shapes = RowShapes()
    return FrameRenderer(shapes), shapes.rows((f,), SHAPED_COLUMNS)[0]


def _clock_base(ts: float) -> bytes:
    """``HH:MM:SS`` of ``ts`` (local time), cached by the second (the milliseconds are
    :data:`_MILLIS`)."""
    second = int(ts)
    base = _clock_cache.get(second)
    if base is None:
        if len(_clock_cache) >= CLOCK_CACHE:
            _clock_cache.clear()
        base = _clock_cache[second] = time.strftime("%H:%M:%S", time.localtime(ts)).encode()
    return base


def _utf8(text: str) -> bytes:
    """JSON text in UTF-8; a lone surrogate (a stored id's ``"\\ud800"``, read back) as the
    JSON escape it came from (``\\ud800``): it cannot be written to a pipe as it is."""
    return text.encode("utf-8", "backslashreplace")


def _json_value(value: Any) -> str:
    if isinstance(value, str):
        return _encode_str(value)
    return json.dumps(value, ensure_ascii=False)


def _id_text(msg_id: str) -> str:
    """A stored id as JSON text (the common case, a small integer, as it is)."""
    if msg_id.isdigit() and msg_id.isascii() and (msg_id[0] != "0" or msg_id == "0"):
        return msg_id
    value = json_id(msg_id)
    return "null" if value is None else _json_value(value)


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


#: A digit before ``.``/``e``/``E``: every JSON float has one (a fraction or an exponent follows
#: its digits). A body without one holds no float, so orjson reads it as ``json.loads`` does (and
#: writes it indented as ``json.dumps``); one with a match (a float, or a string such as
#: ``"v1.2"``) takes the general path. The JSON-RPC version member, in every message, is
#: passed over (its ``"2.0"`` is a string). Invalid JSON fails in orjson and takes the general
#: path too. So do integers of 19 digits or more: orjson reads one past 64 bits as a float,
#: where ``json.loads`` keeps it exact. Searched in C without a regex: the page's bodies are
#: translated (every digit to ``0``, ``e``/``E`` to ``.``), then searched for ``0.`` and for
#: nineteen ``0``.
_FLOAT_FOLD = bytes.maketrans(b"0123456789eE", b"0000000000..")
_FLOAT_MARKS = (b"0.", b"0" * 19)
#: The version member folded, and the same length with its dot gone (offsets are kept).
_VERSIONS = ((b'"jsonrpc":"0.0"', b'"jsonrpc":"0_0"'), (b'"jsonrpc": "0.0"', b'"jsonrpc": "0_0"'))


def _floaty(raws: list[bytes]) -> set[int]:
    """The indexes of the bodies in ``raws`` that may hold a JSON float or a long integer (see
    :data:`_FLOAT_FOLD`): the page's bodies joined by line ends (no mark spans one) and folded
    once, searched once; only a page with a mark has its marks placed in their bodies."""
    folded = b"\n".join(raws).translate(_FLOAT_FOLD)
    for version, kept in _VERSIONS:
        folded = folded.replace(version, kept)
    found: set[int] = set()
    ends: list[int] | None = None
    for mark in _FLOAT_MARKS:
        at = folded.find(mark)
        while at >= 0:
            if ends is None:
                ends = list(accumulate(len(r) + 1 for r in raws))  # past each body's line end
            i = bisect_right(ends, at)
            found.add(i)
            at = folded.find(mark, ends[i])  # the next body
    return found


#: The first byte of an object or an array as orjson writes them.
_OPENERS = (ord("{"), ord("["))
#: ``.000`` … ``.999``: a timestamp's milliseconds as the text header prints them.
_MILLIS = [f".{i:03d}".encode() for i in range(1000)]
#: The text header's line, in one ``%`` (bytes, C): the frame's number padded to five (``%-5a``
#: writes an int or a float as ``f"{seq:<5}"`` does), the clock, its milliseconds, the shape's
#: arrow, label and method, the id part, the size part; then the indented body.
_LINE = b"#%-5a %s%s%s%s%s\n    %s"
_HEAD = b"#%-5a %s%s%s%s%s"
#: ``show --format json``'s line and, for a body that is not UTF-8, its base64 form (``%a``:
#: ``str()`` of an int or a float).
_JSON_LINE = b'{"seq": %a, "ts": %s, %s"id": %s, "size": %a, "complete": %s%s, "text": %s}'
_JSON_B64 = b'{"seq": %a, "ts": %s, %s"id": %s, "size": %a, "complete": %s%s, "base64": "%s"}'


_sizes: dict[int, bytes] = {}


def _size_text(size: int) -> bytes:
    text = _sizes.get(size)
    if text is None:
        if len(_sizes) >= SIZE_TEXT_CACHE:
            _sizes.clear()
        text = _sizes[size] = f" ({human_size(int(size))})".encode()
    return text


def _indent_c(msg: Any) -> str | None:
    """``json.dumps(msg, indent=2, ensure_ascii=False)`` with every line after the first
    indented by four more spaces, in C (orjson); None for what orjson writes differently or
    refuses (floats are kept away by the caller; integers past 64 bits, lone surrogates and
    nesting past orjson's limit raise here)."""
    try:
        data = _orjson_dumps(msg, option=_INDENT_2)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return None
    return data.decode("utf-8").replace("\n", "\n    ")


def _block(head: str, channel: Any, kind: Any, data: bytes) -> str:
    """A frame's header and body as text, the general way: any bytes (stderr, noise, not UTF-8,
    too deep to parse), a body cut at :data:`BODY_CHARS`, line separators."""
    if channel == "stderr":
        text = text_or_none(strip_line_end(data))
        return f"{head}  {safe(text if text is not None else repr(data))}"
    msg = parse_json_safely(data) if kind not in ("noise", "stderr") else None
    text = None
    if msg is not None and not depth_exceeds(msg, PRETTY_DEPTH):
        out: list[str] = []
        try:
            _pretty(msg, "", out)
            text = "".join(out)
        except RecursionError:
            text = None
    if text is None:
        t = text_or_none(strip_line_end(data))
        text = t if t is not None else "(not UTF-8) " + repr(strip_line_end(data)[:2000])
    if len(text) > BODY_CHARS:
        text = (
            text[:BODY_CHARS] + f"\n… ({len(text) - BODY_CHARS} more characters; use --format json)"
        )
    return head + "\n" + "\n".join("    " + line for line in safe(text).splitlines())


class FrameRenderer:
    """The one renderer of frames, for ``show`` (text and ``--format json``), ``tail`` and the
    dashboard's JSON: batches of :data:`SHAPED_COLUMNS` rows in, one line (or block) per row
    out. ``shapes`` decodes a row's shape into ``(direction, channel, kind, method)``
    (:class:`mcp_proxy.store.stream.Shapes` for stored integers,
    :class:`~mcp_proxy.store.stream.RowShapes` for frames held in memory)."""

    def __init__(self, shapes: ShapeNames) -> None:
        self.shapes = shapes
        self._json: dict[Any, tuple[bytes, bool]] = {}
        #: shape → (header after the clock, general path needed)
        self._text: dict[Any, tuple[bytes, bool]] = {}
        #: Set while a body is decoded when it holds a float (or NaN/Infinity): orjson writes
        #: some floats differently from ``json.dumps`` (``1e16``, not ``1e+16``).
        self._floats: list[bool] = []
        #: ``json``'s decoder that sets the flag, made when a body first needs it.
        self._decode: Callable[[str], Any] | None = None

    def _saw_float(self, text: str) -> float:
        self._floats.append(True)
        return float(text)  # also "NaN", "Infinity", "-Infinity", as json.loads reads them

    def _json_shape(self, shape: Any) -> tuple[bytes, bool]:
        direction, channel, kind, method = self.shapes(shape)
        middle = (
            f'"direction": {_json_value(direction)}, "channel": {_json_value(channel)}, '
            f'"kind": {_json_value(kind)}, "method": {_json_value(method)}, '
        )
        if len(self._json) >= SHAPE_CACHE:
            self._json.clear()
        found = self._json[shape] = (_utf8(middle), channel == INJECT)
        return found

    def json(self, rows: list[tuple[Any, ...]]) -> list[bytes]:
        """Each row as ``show --format json`` prints it: one JSON object per line, in UTF-8
        (one ``%`` of bytes a row: the body's JSON string stays orjson's bytes to the pipe)."""
        if not rows:
            return []
        cache = self._json
        out: list[bytes] = []
        append = out.append
        dumps = _orjson_dumps
        times = [r[1] for r in rows]
        stamps = plain_float_texts(times) or [repr(float(ts)) for ts in times]
        for stamp, (seq, _ts, shape, msg_id, error_code, size, complete, raw, hx, sse_id,
                sse_event) in zip("\n".join(stamps).encode().split(b"\n"), rows, strict=True):  # fmt: skip
            middle, inject = cache.get(shape) or self._json_shape(shape)
            if msg_id is None:
                ident = b"null"
            elif msg_id.isdigit() and msg_id.isascii() and (msg_id[0] != "0" or msg_id == "0"):
                ident = msg_id.encode()
            else:
                ident = _utf8(_id_text(msg_id))
            if (
                error_code is not None
                or hx is not None
                or sse_id is not None
                or sse_event is not None
                or inject
            ):
                extra = _utf8(
                    _extras(error_code, hx, sse_id, sse_event)
                    + (', "injected": true' if inject else "")
                )
            else:
                extra = b""
            done = b"true" if complete or complete is None else b"false"
            data = raw if type(raw) is bytes else bytes(raw or b"")
            try:
                # The body as a JSON string: orjson writes what ``json.dumps(...,
                # ensure_ascii=False)`` writes for every code point (the same escapes, none past
                # U+001F but the quote and backslash; tests/test_render.py checks each one), in
                # half the time; text decoded strictly from UTF-8 holds no lone surrogate, the
                # one thing orjson refuses.
                text = dumps(data.decode("utf-8"))
            except UnicodeDecodeError:
                append(_JSON_B64 % (seq, stamp, middle, ident, size, done, extra,
                                    base64.b64encode(data)))  # fmt: skip
                continue
            append(_JSON_LINE % (seq, stamp, middle, ident, size, done, extra, text))
        return out

    def _text_shape(self, shape: Any) -> tuple[bytes, bool]:
        direction, channel, kind, method = self.shapes(shape)
        label = "stderr" if channel == "stderr" else kind
        mark = f" {INJECTED_MARK}" if channel == INJECT else ""
        mid = f" {ARROWS.get(direction, '?')}{mark} {label:12}"
        if method:
            mid += " " + safe(method)
        general = channel == "stderr" or kind in ("noise", "stderr")
        if len(self._text) >= SHAPE_CACHE:
            self._text.clear()
        found = self._text[shape] = (mid.encode(), general)
        return found

    def text(self, rows: list[tuple[Any, ...]], *, body: bool = True) -> list[bytes]:
        """Each row (of :data:`TEXT_COLUMNS`, or of :data:`SHAPED_COLUMNS`, which begin with
        them) as ``show`` prints it, in UTF-8: its header line and (``body``) its indented body.

        Bytes, not text: the header's arrow made every line a two-byte-per-character string,
        and a page's join and encoding to the pipe took a fifth of ``show``'s rendering; the
        body stays orjson's bytes from its pretty-printing to the pipe, and a line is one
        ``%`` of bytes (:data:`_LINE`) from pieces made once per shape, second, millisecond
        and size."""
        if rows and len(rows[0]) != len(TEXT_COLUMNS):
            rows = [r[: len(TEXT_COLUMNS)] for r in rows]
        cache = self._text
        out: list[bytes] = []
        append = out.append
        clocks, loads, dumps, millis = _clock_cache, _orjson_loads, _orjson_dumps, _MILLIS
        sizes = _sizes
        datas = [raw if type(raw) is bytes else bytes(raw or b"") for raw in (r[7] for r in rows)]
        floaty = _floaty(datas) if body else ()
        i = -1
        for seq, ts, shape, msg_id, error_code, size, complete, _raw in rows:
            i += 1
            mid, general = cache.get(shape) or self._text_shape(shape)
            base = clocks.get(int(ts)) or _clock_base(ts)
            if msg_id is None:
                ident = b""
            elif msg_id.isdigit() and msg_id.isascii():
                ident = b" id=" + msg_id.encode()
            else:
                ident = (" id=" + safe(msg_id)).encode()
            tail = sizes.get(size) or _size_text(size)
            if error_code is not None:
                tail = f" code={error_code}".encode() + tail
            if not (complete or complete is None):
                tail += b" [cut short]"
            clock = millis[int((ts % 1) * 1000)]
            if not body:
                append(_HEAD % (seq, base, clock, mid, ident, tail))
                continue
            data = datas[i]
            pretty = None
            if not general and len(data) <= BODY_CHARS and i not in floaty:
                try:
                    pretty = dumps(loads(data), option=_INDENT_2)
                except (TypeError, ValueError):  # the general path decides (as _indent_c)
                    pass
            # Only an object or an array is printed here (orjson writes them starting with
            # ``{`` or ``[``); orjson escapes every control character but DEL, so a body in
            # plain ASCII without DEL has nothing safe() would change (no regex scan then).
            indented = None
            if pretty is not None and pretty[0] in _OPENERS:
                if pretty.isascii() and 127 not in pretty:
                    indented = pretty.replace(b"\n", b"\n    ")
                    if len(indented) > BODY_CHARS:
                        indented = None
                else:
                    text = pretty.decode("utf-8").replace("\n", "\n    ")
                    if len(text) <= BODY_CHARS and not _SPECIAL_RE.search(text):
                        indented = text.encode()
            if indented is None:
                head = (_HEAD % (seq, base, clock, mid, ident, tail)).decode()
                append(self._slow(head, general, shape, data).encode())
                continue
            append(_LINE % (seq, base, clock, mid, ident, tail, indented))
        return out

    def _slow(self, head: str, general: bool, shape: Any, data: bytes) -> str:
        """A body the C path did not take: floats (read with ``json``, so they print as
        ``json.dumps`` writes them), then anything else by :func:`_block`."""
        _direction, channel, kind, _method = self.shapes(shape)
        if general or len(data) > BODY_CHARS:
            return _block(head, channel, kind, data)
        if self._decode is None:
            self._decode = json.JSONDecoder(
                parse_float=self._saw_float, parse_constant=self._saw_float
            ).decode
        self._floats.clear()
        try:  # (parse_json without its checks: small, and not noise)
            msg = self._decode(data.decode("utf-8"))
        except (ValueError, RecursionError):
            msg = None
        if msg is None or not isinstance(msg, (dict, list)):
            return _block(head, channel, kind, data)
        text = _indent_c(msg) if not self._floats else None
        if text is None:
            if depth_exceeds(msg, PRETTY_DEPTH):
                return _block(head, channel, kind, data)
            out: list[str] = []
            try:
                _pretty(msg, "    ", out)
            except RecursionError:
                return _block(head, channel, kind, data)
            text = "".join(out)
        if len(text) > BODY_CHARS:
            return _block(head, channel, kind, data)
        if _SPECIAL_RE.search(text):  # rare: one scan for both kinds of special characters
            if _LINE_BREAKS_RE.search(text):  # str.splitlines() breaks there
                return _block(head, channel, kind, data)
            text = safe(text)
        return f"{head}\n    {text}"
