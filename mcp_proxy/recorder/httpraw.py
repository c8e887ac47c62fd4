"""A finished HTTP exchange handed over raw: head bytes in, the recording's description made here.

Describing an exchange for the recording — header values decoded to text, credentials
redacted, ``Mcp-*`` headers picked out and decoded, query credentials cut from both URLs — is
interpreter work per header that the HTTP relay used to do on its event loop for every request.
None of it decides anything about forwarding, so a quick exchange (the common case: handed over
once, complete) carries the host's and the upstream's header pairs as the bytes that crossed the
wire (:class:`RawHttp`), and the recorder process describes them (:func:`describe`) with the
recording's redaction policy (``MCPTAPE_REDACT``, the relay's own, set before the process
starts) before anything is written. An exchange that goes to the recorder while it runs (a long
call, an event stream) is described by the relay with the same function, so both routes give the
same row.

The record (``T_HTTP`` in :mod:`mcp_proxy.recorder.wire`) is one marshalled tuple of plain
values — no dataclass, enum or frame object in it: ``(session_id, local_id, fields, meta, raw,
frames)`` with each frame a tuple of its values (:func:`pack`). ``marshal`` writes and reads
such values in C without pickle's memo and opcode dispatch (a typical exchange's record: dumps
37k → 23k instructions on the relay, loads 46k → 39k in the recorder). It takes only the exact
built-in types: a subclass (a ``StrEnum`` member, say) in a value the relay set makes
:func:`pack` write the record again with such values as their base type (:func:`_plain`), which
is what the JSON columns store for them anyway. A bytearray arrives as bytes. The record is only
ever read from our own relay through an anonymous pipe.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterator
from typing import Any

from mcp_proxy.frames import Channel, Direction, Frame
from mcp_proxy.headers import mcp_headers
from mcp_proxy.limits import HEADER_MEMO, HEADER_MEMO_SET_BYTES
from mcp_proxy.recorder.contract import HttpExchange
from mcp_proxy.redact import Redactor, policy_from_env

__all__ = ["RawHttp", "decode_pairs", "describe", "pack", "unpack"]

_DIRECTIONS = {d.value: d for d in Direction}
_CHANNELS = {c.value: c for c in Channel}

#: Header pairs as sent: ``(name bytes, value bytes)``.
Pairs = list[tuple[bytes, bytes]] | tuple[tuple[bytes, bytes], ...]
#: ``(upstream origin, local origin, raw path, request header pairs, any Mcp-* request header,
#: response header pairs or None)``.
RawHttp = tuple[str, str, str, Pairs, bool, Pairs | None]


def decode_pairs(pairs: Pairs) -> Iterator[tuple[str, str]]:
    """Header pairs as text for the recording (never fails; non-UTF-8 bytes escaped), one at a
    time: the redactor makes the column's lists (``Redactor.headers``), no list in between."""
    for k, v in pairs:
        yield (
            k.decode("latin-1"),
            v.decode("ascii") if v.isascii() else v.decode("utf-8", "backslashreplace"),
        )


def describe(raw: RawHttp, fields: dict[str, Any], meta: dict[str, Any], red: Redactor) -> None:
    """Fill the exchange's URL, header columns and ``meta`` (local URL, MCP headers) from ``raw``.

    A column already set is kept where the relay decided it (``response_headers`` of an answer
    the relay wrote itself comes with ``raw`` holding no response pairs).
    """
    origin, local_origin, raw_path, req, has_mcp, resp = raw
    meta["local_url"] = red.url(local_origin + raw_path)
    headers = _headers(req, red)
    if has_mcp:
        meta["mcp_headers"] = mcp_headers(headers)
    fields["url"] = red.url(origin + raw_path)
    fields["request_headers"] = headers
    if resp is not None:
        fields["response_headers"] = _headers(resp, red)


#: Described header columns by the pairs as sent: ``{pairs: (redactor, column)}``
#: (bounded by :data:`~mcp_proxy.limits.HEADER_MEMO` sets of at most
#: :data:`~mcp_proxy.limits.HEADER_MEMO_SET_BYTES` each: a peer's headers are not trusted to be
#: small). A column is shared by every exchange that sent the same pairs; nothing changes a
#: column once it is made.
_memo: dict[tuple[tuple[bytes, bytes], ...], tuple[Redactor, list[list[str]]]] = {}


def _headers(pairs: Pairs, red: Redactor) -> list[list[str]]:
    """``red.headers(decode_pairs(pairs))``, made once per distinct header set and policy."""
    key = pairs if type(pairs) is tuple else tuple(pairs)
    hit = _memo.get(key)
    if hit is not None and hit[0] is red:
        return hit[1]
    column = red.headers(decode_pairs(key))
    if sum(len(n) + len(v) for n, v in key) <= HEADER_MEMO_SET_BYTES:
        if len(_memo) >= HEADER_MEMO:
            _memo.clear()
        _memo[key] = (red, column)
    return column


def memo_sets() -> int:
    """How many header sets the memo holds (bounded: see :data:`_memo`)."""
    return len(_memo)


def pack(
    session_id: str,
    local_id: int,
    fields: dict[str, Any],
    meta: dict[str, Any],
    raw: RawHttp,
    frames: list[Frame],
) -> bytes:
    """The record's payload (the relay's side)."""
    # Each frame as plain values, its direction and channel by value (``_value_``, the plain
    # attribute: ``.value`` is a property); built inline, not by a call per frame.
    ftuples = [
        (
            f.direction._value_,
            f.channel._value_,
            f.raw,
            f.mono_ns,
            f.wall,
            f.complete,
            f.sse_id,
            f.sse_event,
            f.extra or None,
        )
        for f in frames
    ]
    record = (session_id, local_id, fields, meta, raw, ftuples)
    try:
        return marshal.dumps(record)
    except ValueError:  # a value of a subclass of a built-in type (marshal takes exact types)
        return marshal.dumps(_plain(record))


#: The built-in types whose subclasses :func:`_plain` turns into them (``bool`` before ``int``:
#: it is one).
_BASES: tuple[type, ...] = (bool, str, int, float, bytes, bytearray)


def _plain(value: Any) -> Any:
    """``value`` with every container rebuilt and every subclass of a built-in scalar type made
    that type (``str(StrEnum member)`` is its value); anything else becomes its ``str``."""
    kind = type(value)
    if value is None or kind in _BASES:
        return value
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_plain(v) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    for base in _BASES:
        if isinstance(value, base):
            return base(value)
    return str(value)


_policy: Redactor | None = None


def _redactor() -> Redactor:
    """The recording's policy, read once from the environment the relay gave this process."""
    global _policy
    if _policy is None:
        _policy = policy_from_env()
    return _policy


def unpack(payload: bytes | bytearray | memoryview, red: Redactor | None = None) -> HttpExchange:
    """The record as a described :class:`HttpExchange` (the recorder's side)."""
    sid, local_id, fields, meta, raw, ftuples = marshal.loads(payload)
    describe(raw, fields, meta, red if red is not None else _redactor())
    fields["meta"] = meta
    frames = [
        Frame(
            _DIRECTIONS[d],
            _CHANNELS[c],
            data,
            mono,
            wall,
            complete,
            local_id,
            sse_id,
            sse_event,
            extra or {},
        )
        for d, c, data, mono, wall, complete, sse_id, sse_event, extra in ftuples
    ]
    return HttpExchange(sid, local_id, fields, frames)
