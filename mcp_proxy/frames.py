"""Frames and the one JSON-RPC classifier.

A *frame* is one unit seen on the wire, in one direction, with its exact bytes. The bytes are the
source of truth; everything here is derived from them and can be recomputed at any time. This is
the only module that decides what a frame *is* (request, response, error, notification, invalid,
noise, stderr line, batch); the recorder, analysis, dashboard and replay all call it.

Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mcp_proxy.limits import FULL_PARSE_LIMIT, MAX_ID_TEXT


class Direction(StrEnum):
    C2S = "c2s"  # host (client) → server
    S2C = "s2c"  # server → host (client)


class Channel(StrEnum):
    STDIO = "stdio"  # newline-delimited JSON-RPC on the server's stdin/stdout
    STDERR = "stderr"  # a line the server wrote on stderr
    HTTP = "http"  # a JSON-RPC message in an HTTP request or JSON response body
    SSE = "sse"  # one SSE event's data
    #: Bytes mcptape itself put on the wire in a peer's place (fault injection, docs/faults.md):
    #: the frame the receiver really got, beside the frame the sender really sent.
    INJECT = "inject"


class Kind(StrEnum):
    REQUEST = "request"
    RESPONSE = "response"
    ERROR = "error"
    NOTIFICATION = "notification"
    BATCH = "batch"  # a JSON array (JSON-RPC batch, allowed up to 2025-03-26)
    INVALID = "invalid"  # JSON, but not a JSON-RPC message
    NOISE = "noise"  # not JSON at all (stray print(), invalid UTF-8, a partial line)
    STDERR = "stderr"  # a server stderr line
    EMPTY = "empty"  # a blank line or an empty body/event (keep-alives, priming events)
    #: Looks like JSON but could not be decoded here (nested deeper than the parser allows, or
    #: the classifier itself failed): the bytes are kept, nothing is derived from them.
    UNDECODABLE = "undecodable"


@dataclass(slots=True)
class Classified:
    """What the bytes of a frame say, as far as JSON-RPC goes."""

    kind: Kind
    method: str | None = None
    #: The JSON-RPC id as canonical JSON text (``1`` and ``"1"`` stay distinct), or None.
    msg_id: str | None = None
    #: The parsed message (dict or list) when it was parsed in full; None for noise/huge frames.
    message: Any = None
    error_code: int | None = None
    #: True when the frame was too large to parse fully and was classified from head/tail.
    partial: bool = False
    #: Why the frame is invalid/noise (for humans), if it is.
    problem: str | None = None


def id_key(value: Any) -> str | None:
    """Canonical text for a JSON-RPC id: ``1`` → ``'1'``, ``"1"`` → ``'"1"'``, None stays None.

    Keeping ids as JSON text keeps string and number ids in separate spaces, as JSON-RPC requires.
    """
    if value is None:
        return None
    kind = type(value)
    if kind is int:
        return str(value)  # what json.dumps writes for an int (bool is not ``int`` here)
    if (
        kind is str
        and value.isascii()
        and value.isprintable()
        and '"' not in value
        and "\\" not in value
    ):
        return f'"{value}"'  # nothing json.dumps would escape: the common id, without the call
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate ("\ud800") cannot be stored as text: keep its JSON escape instead.
        return json.dumps(value, separators=(",", ":"))
    return text


def column_id(key: str | None) -> str | None:
    """The ``msg_id`` column value for an id key: itself, or a short stand-in that is valid JSON.

    An id whose JSON text is longer than :data:`MAX_ID_TEXT` is stored as a JSON *string*:
    its first characters, an ellipsis and a digest of the whole id. The stand-in is the same
    for every frame carrying that id (requests still pair with their responses) and always
    parses; the frame's raw bytes keep the whole id.
    """
    if key is None or len(key) <= MAX_ID_TEXT:
        return key
    import hashlib  # rare: not on every relay's start-up path

    digest = hashlib.sha256(key.encode("utf-8", "backslashreplace")).hexdigest()[:16]
    head = key[1:] if key.startswith('"') else key
    keep = 200
    while True:
        text = json.dumps(f"{head[:keep]}…#{digest}", ensure_ascii=False)
        if len(text) <= MAX_ID_TEXT or keep == 0:
            return text
        keep //= 2


def strip_line_end(raw: bytes | bytearray) -> bytes:
    """The frame's content without its line terminator (``\\n`` or ``\\r\\n``)."""
    end = len(raw)
    if raw.endswith(b"\n"):
        end -= 1
        if raw[:end].endswith(b"\r"):
            end -= 1
    return bytes(raw[:end])


#: The kinds the common messages get, bound once (an enum class's attribute is a lookup).
_NOTIFICATION, _REQUEST, _RESPONSE = Kind.NOTIFICATION, Kind.REQUEST, Kind.RESPONSE


#: What ``dict.get`` gives for an absent ``id`` in :func:`classify_message` (one lookup for
#: "is there an id" and "what is it").
_ABSENT: Any = object()


def classify_message(msg: Any) -> Classified:
    """Classify an already-parsed JSON value as JSON-RPC 2.0."""
    if type(msg) is dict and msg.get("jsonrpc") == "2.0":
        # The common messages — a notification, a request or a response with an integer or
        # string id — decided in a few lookups; the same answers as the general path below.
        # An integer id's key is ``str`` of it (id_key's first case, without the call).
        method = msg.get("method")
        raw_id = msg.get("id", _ABSENT)
        if raw_id is _ABSENT:
            if type(method) is str:
                return Classified(_NOTIFICATION, method, None, msg)
        elif type(raw_id) is int:
            if type(method) is str:
                return Classified(_REQUEST, method, str(raw_id), msg)
            if method is None and "result" in msg and "error" not in msg:
                return Classified(_RESPONSE, None, str(raw_id), msg)
        elif type(raw_id) is str:
            if type(method) is str:
                return Classified(_REQUEST, method, id_key(raw_id), msg)
            if method is None and "result" in msg and "error" not in msg:
                return Classified(_RESPONSE, None, id_key(raw_id), msg)
    if isinstance(msg, list):
        return Classified(Kind.BATCH, message=msg, problem=None if msg else "empty batch")
    if not isinstance(msg, dict):
        return Classified(Kind.INVALID, message=msg, problem="JSON value is not an object")
    if msg.get("jsonrpc") != "2.0":
        return Classified(Kind.INVALID, message=msg, problem='missing "jsonrpc": "2.0"')
    method = msg.get("method")
    has_id = "id" in msg
    raw_id = msg.get("id")
    if has_id and raw_id is not None and not isinstance(raw_id, (str, int, float)):
        return Classified(Kind.INVALID, message=msg, problem="id is neither string nor number")
    if isinstance(raw_id, bool):
        return Classified(Kind.INVALID, message=msg, problem="id is a boolean")
    mid = id_key(raw_id) if has_id else None
    if isinstance(method, str):
        if has_id and raw_id is not None:
            return Classified(Kind.REQUEST, method=method, msg_id=mid, message=msg)
        if has_id:
            return Classified(
                Kind.INVALID, method=method, message=msg, problem="request with a null id"
            )
        return Classified(Kind.NOTIFICATION, method=method, message=msg)
    if method is not None:
        return Classified(Kind.INVALID, message=msg, problem="method is not a string")
    if "error" in msg and "result" not in msg:
        err = msg.get("error")
        code = err.get("code") if isinstance(err, dict) else None
        if not isinstance(err, dict) or not isinstance(code, int) or isinstance(code, bool):
            return Classified(
                Kind.INVALID, msg_id=mid, message=msg, problem="error is not {code, message}"
            )
        return Classified(Kind.ERROR, msg_id=mid, message=msg, error_code=code)
    if "result" in msg and "error" not in msg:
        if not has_id:
            return Classified(Kind.INVALID, message=msg, problem="response without an id")
        return Classified(Kind.RESPONSE, msg_id=mid, message=msg)
    if "result" in msg and "error" in msg:
        return Classified(Kind.INVALID, msg_id=mid, message=msg, problem="both result and error")
    return Classified(Kind.INVALID, msg_id=mid, message=msg, problem="neither method nor result")


_HEAD = 64 * 1024
_METHOD_RE = re.compile(rb'"method"\s*:\s*"((?:[^"\\]|\\.){1,256})"')
_ID_RE = re.compile(rb'"id"\s*:\s*(-?\d+(?:\.\d+)?|"(?:[^"\\]|\\.){0,256}"|null)')
_CODE_RE = re.compile(rb'"error"\s*:\s*\{[^{}]*?"code"\s*:\s*(-?\d+)')


def _classify_huge(content: bytes) -> Classified:
    """Bounded classification of a frame too large to parse: look at head and tail only.

    The SDKs put ``jsonrpc``, ``id`` and ``method`` before ``params``/``result``, so the head
    is enough to tell what the message is; the tail tells whether it is at least closed.
    """
    head = content[:_HEAD].lstrip()
    tail = content[-16:].rstrip()
    if not head.startswith((b"{", b"[")) or not tail.endswith((b"}", b"]")):
        return Classified(Kind.NOISE, partial=True, problem="large frame that is not JSON")
    if head.startswith(b"["):
        return Classified(Kind.BATCH, partial=True)
    if b'"jsonrpc"' not in head:
        return Classified(Kind.INVALID, partial=True, problem='missing "jsonrpc": "2.0"')
    # Only look before the first large value: keys of nested objects must not be mistaken.
    m_method = _METHOD_RE.search(head)
    m_id = _ID_RE.search(head)
    msg_id = None
    if m_id:
        try:
            msg_id = id_key(json.loads(m_id.group(1)))
        except ValueError:
            msg_id = None
    m_res = head.find(b'"result"')
    m_err = head.find(b'"error"')
    first_key = min((p for p in (m_res, m_err) if p >= 0), default=-1)
    if m_method and (first_key < 0 or m_method.start() < first_key):
        method = json.loads(b'"' + m_method.group(1) + b'"')
        kind = Kind.REQUEST if msg_id not in (None, "null") else Kind.NOTIFICATION
        return Classified(kind, method=method, msg_id=msg_id, partial=True)
    if m_err >= 0 and (m_res < 0 or m_err < m_res):
        m_code = _CODE_RE.search(head)
        return Classified(
            Kind.ERROR,
            msg_id=msg_id,
            error_code=int(m_code.group(1)) if m_code else None,
            partial=True,
        )
    if m_res >= 0:
        return Classified(Kind.RESPONSE, msg_id=msg_id, partial=True)
    return Classified(Kind.INVALID, msg_id=msg_id, partial=True, problem="unrecognised shape")


def _first_orjson_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """orjson's ``loads``, imported on first use: it costs a relay ~10 ms of start-up (orjson
    loads dataclasses, uuid, datetime… at import), and a relay without fault rules never
    parses a frame. The first call rebinds :data:`_orjson_loads` to orjson's own function."""
    global _orjson_loads
    from orjson import loads

    _orjson_loads = loads
    return loads(data)


_orjson_loads: Callable[[bytes | bytearray | memoryview | str], Any] = _first_orjson_loads


#: The floats :func:`plain_float_texts` writes in one call: where ``repr`` writes them without
#: an exponent (orjson's digits are ``repr``'s there; its exponents, ``1e-05`` as ``1e-5``, and
#: its ``null`` for NaN and the infinities are not).
_PLAIN_FLOATS = (1e-4, 1e16)


def plain_float_texts(values: list[Any]) -> list[str] | None:
    """``repr(v)`` of each value of a page (its timestamps, for the JSON writers) in one call
    to orjson, when every value is a float in :data:`_PLAIN_FLOATS`; None otherwise (the
    caller writes each value its own way). One ``repr`` per frame took ~0.5 µs, a quarter of
    ``show --format json``'s rendering."""
    if not values or set(map(type, values)) != {float}:
        return None
    from orjson import dumps  # (imported on first use, as _first_orjson_loads)

    text = dumps(values)
    low, high = _PLAIN_FLOATS
    if 110 in text or not low <= min(values) or not max(values) < high:  # 110: "null"
        return None
    return text[1:-1].decode("ascii").split(",")


#: A run of this many digits may be an integer beyond 64 bits, which orjson turns into a float
#: (``json`` keeps it exact): bytes with such a run are parsed by ``json`` alone.
LONG_DIGITS = b"0" * 19
#: Every digit as ``0``: a run of 19+ digits becomes :data:`LONG_DIGITS` (for a caller that
#: inlines :func:`has_long_number` where a call per message shows, the analysis's body parse).
FOLD_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def has_long_number(data: bytes | bytearray) -> bool:
    """True when ``data`` holds a run of 19+ digits (possibly an integer past 64 bits).

    A run never crosses a line end, so a relay's read of many lines that has none has no line
    that has one: the recorder asks once per read and tells :func:`classify` (``checked``).
    ``find`` rather than ``in``: on CPython 3.12 ``in`` took 0.49 µs on a 350-byte message,
    ``find`` 0.19 µs (this look ran once per message body ``check`` parsed).
    """
    return data.translate(FOLD_DIGITS).find(LONG_DIGITS) >= 0


def classify(
    raw: bytes | bytearray | memoryview,
    channel: Channel | str = Channel.STDIO,
    *,
    checked: bool = False,
) -> Classified:
    """Classify one frame's bytes. Never raises, whatever the bytes.

    JSON nested deeper than the parser allows (``RecursionError``), or any other failure of the
    classifier, gives :attr:`Kind.UNDECODABLE` with the reason in ``problem``. ``checked`` says
    the caller made sure :func:`has_long_number` is False for these bytes (it saves the look).
    """
    try:
        if channel == "stderr":  # Channel.STDERR is this str
            return Classified(Kind.STDERR)
        if len(raw) > FULL_PARSE_LIMIT:
            return _classify_huge(bytes(raw[:_HEAD]) + bytes(raw[-32:]))
        data = raw if type(raw) is bytes else bytes(raw)
        # Fast path: parse the UTF-8 bytes directly (no decode copy, no newline strip). A frame
        # that starts with "{" or "[" is UTF-8 to both parsers here: json is given decoded
        # text, so nothing is sniffed as UTF-16/32 (a NUL is JSON nowhere, so bytes with one
        # fail both parsers and end where the strict path below puts them).
        if data[:1] in _OPENERS:
            # orjson first (~5× json's speed on small frames). What it refuses — lone
            # surrogates, NaN, infinities, nesting past 1024, invalid UTF-8 — falls through to
            # the json path below, and so do long digit runs (orjson reads an integer past 64
            # bits as a float), so the outcome is json's whatever the bytes
            # (tests/test_frames.py compares them).
            if checked or not has_long_number(data):
                try:
                    return classify_message(_orjson_loads(data))
                except ValueError:
                    pass
            try:
                # What json.loads(bytes) does for UTF-8, minus its encoding sniffing.
                return classify_message(json.loads(data.decode("utf-8", "surrogatepass")))
            except UnicodeDecodeError:
                return Classified(Kind.NOISE, problem="not valid UTF-8")
            except ValueError:
                pass
        content = strip_line_end(data)
        if not content.strip():
            return Classified(Kind.EMPTY)
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            return Classified(Kind.NOISE, problem="not valid UTF-8")
        try:
            msg = json.loads(text)
        except ValueError:
            return Classified(Kind.NOISE, problem="not JSON")
        return classify_message(msg)
    except RecursionError:
        return Classified(Kind.UNDECODABLE, problem="JSON nested deeper than the parser allows")
    except Exception as exc:  # the promise is "never raises": say why instead
        return Classified(Kind.UNDECODABLE, problem=f"classifier failed: {type(exc).__name__}")


#: The first bytes of a frame :func:`classify` parses on its fast path (single bytes are
#: interned: ``in`` finds them by identity).
_OPENERS = (b"{", b"[")


def parse_json(raw: bytes | bytearray) -> Any:
    """Parse a frame's JSON, or return None when it is not JSON (noise, stderr, huge)."""
    if len(raw) > FULL_PARSE_LIMIT:
        return None
    try:
        return json.loads(strip_line_end(raw).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def text_or_none(raw: bytes | bytearray) -> str | None:
    """The bytes as text when they are valid UTF-8; None otherwise (callers then use base64)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(slots=True)
class Frame:
    """One frame as handed to the recorder by a transport.

    Transports fill in only what they know (bytes, direction, channel, times, HTTP context); the
    recorder classifies and numbers frames off the relay's path.
    """

    direction: Direction
    channel: Channel
    raw: bytes | bytearray  # bytearray for lines that grew past LineFramer.BIG
    mono_ns: int
    wall: float
    #: False when the frame was cut short (a last line without its newline at EOF).
    complete: bool = True
    http_exchange: int | None = None  # local id of the HTTP exchange it rode on (HTTP relay)
    sse_id: str | None = None
    sse_event: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_DIRECTIONS = {d.value: d for d in Direction}
_CHANNELS = {c.value: c for c in Channel}


def _frame(
    direction: str,
    channel: str,
    raw: bytes | bytearray,
    mono_ns: int,
    wall: float,
    complete: bool,
    http_exchange: int | None,
    sse_id: str | None,
    sse_event: str | None,
    extra: dict[str, Any] | None,
) -> Frame:
    """Rebuild a pickled :class:`Frame` (see ``Frame.__reduce__``)."""
    return Frame(
        _DIRECTIONS[direction],
        _CHANNELS[channel],
        raw,
        mono_ns,
        wall,
        complete,
        http_exchange,
        sse_id,
        sse_event,
        extra or {},
    )


def _reduce_frame(self: Frame) -> tuple[Any, tuple[Any, ...]]:
    """Pickle a frame as ``_frame(*plain values)``: a slotted dataclass with enum fields
    pickles through ``copyreg`` (state dicts, a call to the enum class per member) at several
    microseconds a frame. The relays hand frames of long exchanges and event streams to their
    recorder process pickled, on their own time."""
    return (
        _frame,
        (
            self.direction._value_,  # the plain attribute: ``.value`` is a property
            self.channel._value_,
            self.raw,
            self.mono_ns,
            self.wall,
            self.complete,
            self.http_exchange,
            self.sse_id,
            self.sse_event,
            self.extra or None,
        ),
    )


Frame.__reduce__ = _reduce_frame  # type: ignore[method-assign,assignment]


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
