"""The one frame renderer (:class:`FrameRenderer`) prints what ``show`` promises.

``--format json``: one object per frame with the documented fields (the id as its JSON value,
the bytes as ``text`` or ``base64``). Text: a header line, then the body indented as
``json.dumps(indent=2)`` writes it, with terminal escapes neutralised — for every shape of frame:
JSON of every type, ids of every kind, stderr, noise, invalid UTF-8, control and bidi
characters, line separators, deep nesting, cut frames, SSE and HTTP fields.
"""

from __future__ import annotations

import base64
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.frames import plain_float_texts
from mcp_proxy.render import (
    SHAPED_COLUMNS,
    FrameRenderer,
    frame_json,
    frame_oneline,
    safe,
)
from mcp_proxy.store.columns import FRAME_COLUMNS
from mcp_proxy.store.stream import RowShapes


def renderer_of(frames: list[dict]) -> tuple[FrameRenderer, list[tuple]]:
    """Frames held as dicts as the rows the store gives (one shape table), and a renderer."""
    shapes = RowShapes()
    return FrameRenderer(shapes), shapes.rows(frames, SHAPED_COLUMNS)


BODIES = [
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{}}}\n',
    b'{"jsonrpc":"2.0","id":"a\\u00e9","result":{"x":[1,2.5,true,false,null,{},[]],"y":""}}\n',
    b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\\u001b[31mred'
    b' \xe2\x80\xae evil \\u2028 sep \xe2\x80\xa8 raw"}}\n',
    b'{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad","data":1e400}}\n',
    b'{"a":' + b"[" * 1200 + b"]" * 1200 + b"}\n",
    b"\xff\xfe not utf-8\n",
    b"plain noise line\r\n",
    b"[]\n",
    b"5\n",
    b'{"k":"' + b"v" * 25_000 + b'"}\n',
    b'{"k":"' + b"\\n" * 12_000 + b'"}\n',
    # What orjson must not indent (json.dumps writes them differently, or orjson refuses them):
    b'{"big":123456789012345678901234567890,"neg":-9223372036854775809,"u":18446744073709551615}',
    b'{"f":[1e16,1e-05,0.1,-0.0,NaN,Infinity,-Infinity,2.5E+3,1E400]}',
    b'{"lone":"\\ud800","deep":' + b"[" * 300 + b"]" * 300 + b"}",
    b'{"ctl":"\\u0000\\u001f\\u007f\\b\\f\\t \\"q\\" \\\\ \\/","k\\u00e9":{"":[]}}',
]


def rows() -> list[tuple]:
    out = []
    seq = 0
    for raw in BODIES:
        for kind, channel, method, msg_id, extra in (
            ("request", "stdio", "tools/call", "1", {}),
            ("response", "sse", None, '"x\\u00e9"', {"sse_id": "7", "sse_event": "message"}),
            ("error", "http", None, "007", {"error_code": -32602, "http_exchange_id": 9}),
            ("notification", "stdio", "a\u202eb", None, {"complete": 0}),
            ("noise", "stdio", None, None, {}),
            ("stderr", "stderr", None, None, {}),
            ("response", "stdio", None, '"' + "x" * 299, {}),  # an id cut short
        ):
            seq += 1
            f = {
                "seq": seq,
                "ts": 1796058497.331512 + seq,
                "mono_ns": seq,
                "partial_parse": 0,
                "direction": "c2s" if seq % 2 else "s2c",
                "channel": channel,
                "kind": kind,
                "method": method,
                "msg_id": msg_id,
                "error_code": None,
                "size": len(raw),
                "complete": 1,
                "http_exchange_id": None,
                "sse_id": None,
                "sse_event": None,
                "raw": raw,
                **extra,
            }
            out.append(tuple(f[c] for c in FRAME_COLUMNS))
    return out


def _expected_json(f: dict) -> dict:
    """``show --format json``'s object for a frame, as docs and scripts read it."""
    raw = f["raw"]
    try:
        body = {"text": raw.decode("utf-8")}
    except UnicodeDecodeError:
        body = {"base64": base64.b64encode(raw).decode("ascii")}
    try:
        ident = json.loads(f["msg_id"]) if f["msg_id"] else None
    except ValueError:
        ident = f["msg_id"]  # an id the store cut short stays text
    out = {
        "seq": f["seq"], "ts": f["ts"], "direction": f["direction"], "channel": f["channel"],
        "kind": f["kind"], "method": f["method"], "id": ident, "size": f["size"],
        "complete": bool(f["complete"]),
    }  # fmt: skip
    if f["error_code"] is not None:
        out["error_code"] = f["error_code"]
    if f["http_exchange_id"] is not None:
        out["http_exchange_id"] = f["http_exchange_id"]
    if f["sse_id"] is not None or f["sse_event"] is not None:
        out["sse"] = {"id": f["sse_id"], "event": f["sse_event"]}
    return {**out, **body}


def _render(row: tuple, *, body: bool = True) -> str:
    renderer, rows = renderer_of([dict(zip(FRAME_COLUMNS, row, strict=True))])
    return renderer.text(rows, body=body)[0].decode()


@pytest.mark.parametrize("row", rows(), ids=lambda r: f"{r[0]}-{r[4]}")
def test_every_shape_of_frame_prints_as_promised(row: tuple) -> None:
    f = dict(zip(FRAME_COLUMNS, row, strict=True))
    renderer, shaped = renderer_of([f])
    line = renderer.json(shaped)[0].decode()
    assert "\n" not in line
    assert json.loads(line) == _expected_json(f)
    assert frame_json(f) == _expected_json(f)  # the dashboard's adapter: the same object
    head = _render(row, body=False)
    text = _render(row)
    assert text.startswith(head) and head.startswith(f"#{f['seq']:<5} ")
    assert f"({f['size']} B)" in head or "KiB" in head
    assert ("[cut short]" in head) is (not f["complete"])
    # Nothing that could rewrite a terminal, whatever the bytes held.
    for ch in ("\x1b", "\u202e", "\x00", "\x7f", "\ud800"):
        assert ch not in text
    rest = text[len(head) :]
    if f["channel"] == "stderr":
        assert rest.startswith("  ") and "\n" not in rest
        return
    lines = rest.split("\n")[1:]
    assert all(line.startswith("    ") for line in lines)
    body = "\n".join(line[4:] for line in lines)
    raw = f["raw"]
    if raw.startswith(b"\xff"):
        assert body.startswith("(not UTF-8) ")
    elif len(raw) > 20_000:
        assert "more characters; use --format json" in body
    elif f["kind"] not in ("noise", "stderr") and raw.startswith(b'{"jsonrpc'):
        want = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
        assert body == "\n".join(safe(want).splitlines())
    oneline = frame_oneline(f, "s\u202e")
    assert oneline.startswith(head[: len(f"#{f['seq']:<5} ") + 12] + " [s\\u202e] ")


def _random_value(rng: random.Random, depth: int = 0) -> object:
    chars = [chr(c) for c in [*range(0x80), 0x85, 0xA0, 0xE9, 0x2028, 0xFEFF, 0xFFFF, 0x1F600]]
    r = rng.random()
    if depth < 4 and r < 0.2:
        return {
            "".join(rng.choices(chars, k=rng.randint(0, 6))): _random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 4))
        }
    if depth < 4 and r < 0.35:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.55:
        return "".join(rng.choices(chars, k=rng.randint(0, 8)))
    if r < 0.7:
        return rng.randint(-(2**63), 2**64 - 1)
    if r < 0.8:
        return rng.random() * 10 ** rng.randint(-30, 30)
    return rng.choice([True, False, None, 0, -1])


def test_text_bodies_of_random_json_are_indented_as_json_dumps_writes_them() -> None:
    """The C indenter (orjson) is used only where it writes what ``json.dumps`` writes; floats,
    long integers and everything else it writes differently are indented the general way."""
    rng = random.Random(12)
    shapes = RowShapes()
    renderer = FrameRenderer(shapes)
    for i in range(3000):
        value = _random_value(rng)
        raw = json.dumps(value, ensure_ascii=rng.random() < 0.5).encode() + b"\n"
        f = {c: None for c in FRAME_COLUMNS}
        f.update(seq=i, ts=1796058497.25, direction="c2s", channel="stdio", kind="request",
                 method="m", size=len(raw), complete=1, partial_parse=0, raw=raw)  # fmt: skip
        row = tuple(f[c] for c in FRAME_COLUMNS)
        want = json.dumps(value, indent=2, ensure_ascii=False)
        if len(want) < 20_000:
            shaped = shapes.rows([dict(zip(FRAME_COLUMNS, row, strict=True))], SHAPED_COLUMNS)
            head = renderer.text(shaped, body=False)[0].decode()
            body = "\n".join("    " + line for line in safe(want).splitlines())
            assert renderer.text(shaped) == [f"{head}\n{body}".encode()], raw


def test_cli_name_is_what_works_where_the_user_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Newcomer: after ``uv run mcptape demo`` a bare ``mcptape`` is not on the user's PATH."""
    import sys

    from mcp_proxy.render import cli_name

    monkeypatch.setenv("UV", "/usr/bin/uv")
    assert cli_name() == "uv run mcptape"
    monkeypatch.delenv("UV")
    monkeypatch.delenv("UV_RUN_RECURSION_DEPTH", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "argv", [".venv/bin/mcptape", "demo"])
    assert cli_name() == ".venv/bin/mcptape"
    monkeypatch.setattr(sys, "argv", ["-m"])
    assert cli_name() == f"{sys.executable} -m mcp_proxy"


def test_the_unsafe_character_class_matches_exactly_the_unsafe_characters() -> None:
    """The class is written as ranges (fast to compile at start-up); it must match the
    characters :func:`safe` escapes and no other, over every code point."""
    from mcp_proxy.render import _SPECIAL_RE, _UNSAFE, _UNSAFE_RE

    special = {*_UNSAFE, 0x85, 0x2028, 0x2029}
    for c in range(0x110000):
        ch = chr(c)
        assert (_UNSAFE_RE.match(ch) is not None) == (c in _UNSAFE), hex(c)
        assert (_SPECIAL_RE.match(ch) is not None) == (c in special), hex(c)


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from(["2.0", "v1.2", "1e5", "jsonrpc"])
    | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(_values, st.booleans()), min_size=1, max_size=12))
def test_a_page_of_bodies_prints_each_body_as_json_dumps_writes_it(
    bodies: list[tuple[object, bool]],
) -> None:
    """``show`` decides per page which bodies may hold a float (one scan of the page): each
    body of a page with floats, long integers and version members anywhere among them is
    indented as ``json.dumps`` writes it, as if it were printed alone."""
    page = []
    for i, (value, spaced) in enumerate(bodies):
        msg = {"jsonrpc": "2.0", "id": i, "result": value}
        raw = json.dumps(msg, separators=(", ", ": ") if spaced else (",", ":")).encode()
        page.append(
            {
                "seq": i,
                "ts": 1796058497.25,
                "direction": "s2c",
                "channel": "stdio",
                "kind": "response",
                "method": None,
                "msg_id": str(i),
                "size": len(raw),
                "raw": raw + b"\n",
            }
        )
    renderer, shaped = renderer_of(page)
    printed = renderer.text(shaped)
    for row, (value, _spaced), line in zip(shaped, bodies, printed, strict=True):
        text = line.decode()
        want = json.dumps(
            {"jsonrpc": "2.0", "id": row[0], "result": value}, indent=2, ensure_ascii=False
        )
        assert text.split("\n", 1)[1] == "\n".join("    " + x for x in safe(want).splitlines())
        assert renderer.text([row]) == [line]


_stamps = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=1e-4, max_value=2e10)
    | st.integers(min_value=-(2**60), max_value=2**60)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_stamps, max_size=20))
def test_a_page_of_timestamps_is_written_as_repr_writes_each(values: list[float]) -> None:
    """The JSON writers (``show --format json``, ``export``) write a page's timestamps in one
    call to orjson where its digits are ``repr``'s; a page it cannot write so is left to them
    (None), whatever it holds (exponents, NaN, infinities, integers, negative zero)."""
    texts = plain_float_texts(values)
    if texts is not None:
        assert texts == [repr(v) for v in values]
    if values and all(type(v) is float and 1e-4 <= v < 1e16 for v in values):
        assert texts is not None  # the common page takes the one call


def test_timestamps_at_the_edges_of_the_plain_range_are_left_to_repr() -> None:
    """The values where ``repr`` starts or stops writing an exponent, and orjson's ``null``
    for what is not finite, keep a page from the one call; inside the range it is taken."""
    for page in (
        [9.99e-5, 1.0], [1e16, 1.0], [1796058497.25, float("nan")], [float("inf"), 2.0],
        [-0.0, 1.0], [5e-324], [1796058497, 1.0], [],
    ):  # fmt: skip
        assert plain_float_texts(page) is None, page
    for page in ([1e-4, 1796058497.25], [9999999999999998.0, 0.5], [1796058497.0, 0.1]):
        assert plain_float_texts(page) == [repr(v) for v in page], page


def test_show_json_and_export_write_timestamps_outside_the_plain_range_as_before() -> None:
    """A page with one timestamp past the range is written by ``repr`` (``show``) and by the
    export's per-value writer: ``1e-05`` and ``1e+16``, never orjson's ``1e-5``/``1e16``."""
    from mcp_proxy.recording.jsonl import frame_chunks

    renderer, rows = renderer_of([
        {"seq": i, "ts": ts, "direction": "c2s", "channel": "stdio",
         "kind": "request", "method": "ping", "msg_id": "1", "size": 2, "raw": b"{}"}
        for i, ts in enumerate([1e-5, 1e16, 1796058497.25], 1)
    ])  # fmt: skip
    printed = [line.decode() for line in renderer.json(rows)]
    assert [json.loads(line)["ts"] for line in printed] == [1e-5, 1e16, 1796058497.25]
    assert ['"ts": 1e-05,' in printed[0], '"ts": 1e+16,' in printed[1]] == [True, True]
    page = [(r[0], r[1], 0, r[2], r[3], None, True, r[7], None, None, None) for r in rows]
    text = b"".join(frame_chunks("s", [page], renderer.shapes)({"frames": 0}, None))
    assert b'"ts":1e-05,' in text and b'"ts":1e+16,' in text and b'"ts":1796058497.25,' in text


def test_show_json_writes_every_code_point_of_a_body_as_json_dumps_does() -> None:
    """The body's JSON string is orjson's: for each code point (a frame of 4,096 of them at a
    time) exactly what ``json.dumps(text, ensure_ascii=False)`` writes, escapes included."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    renderer, rows = renderer_of([
        {"seq": i, "ts": 1.5, "direction": "s2c", "channel": "stdio", "kind": "noise",
         "size": 1, "raw": "".join(points[at : at + 4096]).encode()}
        for i, at in enumerate(range(0, len(points), 4096), 1)
    ])  # fmt: skip
    for row, line in zip(rows, renderer.json(rows), strict=True):
        expected = json.dumps(row[7].decode(), ensure_ascii=False)
        assert line.decode().endswith(f', "text": {expected}}}'), row[0]
