"""Hostile frames: the inputs the hardening issue lists, as hypothesis strategies.

Each strategy draws one *line* of bytes without its line end (it may contain anything but
``\\n``); :func:`streams` joins lines with LF or CRLF and sometimes leaves the last one without
a line end. :data:`EVERY_KIND` is one line of each kind, the example every run starts with.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

JSONRPC = {"jsonrpc": "2.0"}


def _j(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def deep(depth: int, *, request: bool = True) -> bytes:
    """A message whose params nest ``depth`` arrays deep (valid JSON, hostile to recursion)."""
    inner = b"[" * depth + b"]" * depth
    if request:
        return b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"x":' + inner + b"}}"
    return inner


def huge_int(sign: int, bits: int) -> bytes:
    n = sign * (2**bits + 12345)
    return b'{"jsonrpc":"2.0","id":%d,"error":{"code":%d,"message":"big"}}' % (n, n)


def lone_surrogate(where: str) -> bytes:
    if where == "id":
        return b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'
    return b'{"jsonrpc":"2.0","id":3,"method":"tools/\\udfff"}'


def long_id(n: int) -> bytes:
    return _j({**JSONRPC, "id": "i" * n, "method": "ping"})


INVALID_UTF8 = [
    b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\xff\xfe"}}',
    b"\xc3\x28\xa0\xa1 not json at all \xf0\x28\x8c\x28",
    b'{"jsonrpc":"2.0","id":1,"method":"\xed\xa0\x80"}',  # an encoded surrogate
]
CONTROL_AND_BIDI = [
    _j({**JSONRPC, "method": "notifications/message", "params": {"data": "a\u202eb\u2066c\u200f"}}),
    b'{"jsonrpc":"2.0","id":4,"method":"ping\x00\x07\x1b[31m"}',  # raw controls: not JSON
    _j({**JSONRPC, "id": "\u0000\u001f\u007f", "method": "ping"}),
    b"\x1b]0;title\x07\x1b[2J",
]
WRONG_TYPES = [
    b'{"jsonrpc":2,"id":{},"method":5,"params":"x"}',
    b'{"jsonrpc":"2.0","id":[1],"result":null}',
    b'{"jsonrpc":"2.0","id":true,"error":"nope"}',
    b'{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":[]}',
    b"[]",
    b"[1,2,3]",
    b"null",
    b'"just a string"',
    b"",
]
VALID = [
    _j({**JSONRPC, "id": 1, "method": "ping"}),
    _j({**JSONRPC, "id": 1, "result": {}}),
    _j({**JSONRPC, "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {}}}),
    _j({**JSONRPC, "method": "notifications/progress", "params": {"progressToken": 2}}),
    _j({**JSONRPC, "method": "notifications/cancelled", "params": {"requestId": 99}}),
]

#: One line of every hostile kind (duplicate ids: the first VALID line twice).
EVERY_KIND: list[bytes] = [
    deep(1500),
    deep(200, request=False),
    huge_int(1, 70),
    huge_int(-1, 70),
    lone_surrogate("id"),
    lone_surrogate("method"),
    long_id(5000),
    *INVALID_UTF8,
    *CONTROL_AND_BIDI,
    *WRONG_TYPES,
    VALID[0],
    VALID[0],
    VALID[2],
    VALID[2][: len(VALID[2]) // 2],  # truncated
]


def _truncate(data: bytes, cut: int) -> bytes:
    return data[: max(1, min(cut, len(data) - 1))]


lines: st.SearchStrategy[bytes] = st.one_of(
    st.integers(1, 2500).map(deep),
    st.tuples(st.sampled_from([1, -1]), st.integers(60, 200)).map(lambda t: huge_int(*t)),
    st.integers(250, 20_000).map(long_id),
    st.sampled_from(["id", "method"]).map(lone_surrogate),
    st.sampled_from(INVALID_UTF8 + CONTROL_AND_BIDI + WRONG_TYPES + VALID),
    st.tuples(st.sampled_from(VALID + EVERY_KIND[:3]), st.integers(1, 200)).map(
        lambda t: _truncate(*t)
    ),
    st.binary(max_size=300).map(lambda b: b.replace(b"\n", b" ")),
)


@st.composite
def streams(draw: st.DrawFn, max_lines: int = 40) -> bytes:
    """Lines joined by LF or CRLF (drawn per line); sometimes no final line end."""
    body = draw(st.lists(lines, min_size=1, max_size=max_lines))
    out = b"".join(line + draw(st.sampled_from([b"\n", b"\r\n"])) for line in body)
    if draw(st.booleans()):
        out = out.rstrip(b"\n")
    return out


def every_kind_stream() -> bytes:
    """:data:`EVERY_KIND` with CRLF on every third line and no final line end."""
    parts = [line + (b"\r\n" if i % 3 == 2 else b"\n") for i, line in enumerate(EVERY_KIND)]
    return b"".join(parts).rstrip(b"\n")
