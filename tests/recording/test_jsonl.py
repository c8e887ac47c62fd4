"""JSON Lines internals that the speed work relies on: the hand-assembled frame line equals the
general encoder's, and a file keeps its classification only when this mcptape wrote it."""

from __future__ import annotations

import json

import pytest

from mcp_proxy import __version__
from mcp_proxy.recording.jsonl import _dump, _frame_line, frame_record, loads_recording
from tests.recording.conftest import RECORDINGS

BASE = {
    "seq": 7,
    "ts": 1796002461.780347,
    "mono_ns": 1072046971044,
    "direction": "s2c",
    "channel": "sse",
    "kind": "response",
    "method": None,
    "msg_id": None,
    "error_code": None,
    "http_exchange_id": None,
    "sse_id": None,
    "sse_event": None,
    "complete": True,
    "raw": b"{}",
}
CASES = [
    {},
    {"raw": b"\xff\xfe not utf-8\n", "kind": "noise"},
    {"raw": 'caf\u00e9 \u2028 \x01 "q" \\ \U0001f600\n'.encode(), "method": "t\u00e9st/\u2603"},
    {"msg_id": '"abc"', "error_code": -32602, "http_exchange_id": 3},
    {"sse_id": "42", "sse_event": "message", "complete": False},
    {"ts": 1796002461, "complete": 0, "kind": None},
    {"ts": 1e-7, "mono_ns": 0, "seq": 1},
]


@pytest.mark.parametrize("extra", CASES, ids=range(len(CASES)))
def test_fast_frame_line_equals_the_general_encoder(extra: dict[str, object]) -> None:
    f = {**BASE, **extra}
    sid = "0123456789abcdef0123456789abcdef"
    prefix = '{"type":"frame","session":"' + sid + '","seq":'
    assert _frame_line(prefix, f) == _dump(frame_record(sid, f))


def _with(generator: str, edit: bytes = b"", to: bytes = b"") -> bytes:
    data = (RECORDINGS / "basic-legacy.mcptape.jsonl").read_bytes()
    head, rest = data.split(b"\n", 1)
    header = json.loads(head)
    header["generator"] = generator
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + rest.replace(edit, to, 1)


def test_a_file_from_this_mcptape_keeps_its_kinds_and_others_are_reclassified() -> None:
    # A (contrived) hand edit of an informative field shows which path was taken.
    edit = b'"kind":"request","method":"tools/list"'
    to = b'"kind":"notification","method":"tools/list"'
    ours = loads_recording(_with(f"mcptape {__version__}", edit, to), "x").one()
    theirs = loads_recording(_with("mcptape 0.0.1", edit, to), "x").one()
    kinds = [f["kind"] for f in ours.frames if f["method"] == "tools/list"]
    assert kinds == ["notification"]
    assert [f["kind"] for f in theirs.frames if f["method"] == "tools/list"] == ["request"]
    forced = loads_recording(_with(f"mcptape {__version__}", edit, to), "x", reclassify=True)
    assert [f["kind"] for f in forced.one().frames if f["method"] == "tools/list"] == ["request"]
    # A request record without its method (the database could not hold it) is reclassified.
    gap = loads_recording(
        _with(f"mcptape {__version__}", b',"method":"tools/list"', b""), "x"
    ).one()
    assert next(f["method"] for f in gap.frames if f["msg_id"] == "2") == "tools/list"


LINES = [
    b'{"a":1,"b":[1.5,-0.0,1e400,5e-324],"c":"caf\xc3\xa9 \\u2028 \\ud83d\\ude00","a":2}',
    b' \t{"nan":NaN,"inf":-Infinity}\r',
    b'{"lone":"\\ud800"}',
    b'{"deep":' + b"[" * 1100 + b"]" * 1100 + b"}",
    b'{"esc":"\\u0000\\t\\"\\\\\\/"}',
    b"",
    b"   ",
]


@pytest.mark.parametrize("long_number", [False, True])
def test_records_read_as_json_reads_them(long_number: bool) -> None:
    """orjson reads the lines it can; every record is the one json reads, line numbers kept."""
    from mcp_proxy.recording.jsonl import line_records

    lines = [*LINES, b'{"big":12345678901234567890123}' if long_number else b'{"n":1}']
    data = b"\n".join(lines) + b"\n"
    got = list(line_records(data, "x"))
    want = [(n, json.loads(line)) for n, line in enumerate(lines, start=1) if line.strip()]
    assert repr(got) == repr(want)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"{} {}", "line 2: not valid JSON"),
        (b'{"a":01}', "line 2: not valid JSON"),
        (b"[1]", "line 2: a record must be a JSON object"),
    ],
)
def test_bad_lines_still_name_their_problem(line: bytes, why: str) -> None:
    from mcp_proxy.recording.jsonl import line_records
    from mcp_proxy.recording.model import RecordingFormatError

    with pytest.raises(RecordingFormatError, match=why):
        list(line_records(b'{"ok":1}\n' + line + b"\n", "f.jsonl"))
