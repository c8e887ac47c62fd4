"""JSON Lines: the one frame writer round-trips odd frames, the bytes decide a frame's
classification whoever wrote the file, and records are read as json reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy import __version__
from mcp_proxy.recording.jsonl import dumps_jsonl, loads_recording
from mcp_proxy.recording.model import Recording, SessionRecording
from tests.recording.conftest import RECORDINGS, db_frames, run_cli

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
def test_the_one_writer_round_trips_odd_frames(extra: dict[str, object]) -> None:
    """Each frame, written by the one frame writer and read back, keeps its bytes and every
    field the file carries (kind, method and id are the bytes' own, read back from them)."""
    f = {**BASE, **extra}
    sid = "0123456789abcdef0123456789abcdef"
    session = {"id": sid, "transport": "http", "started_at": 1796002460.0}
    exchange = {"id": 3, "method": "POST", "url": "http://127.0.0.1/mcp", "started_at": 1.0}
    data = dumps_jsonl(Recording([SessionRecording(session, [exchange], [f])]))
    line = data.split(b"\n")[3]
    assert json.loads(line)["ts"] == f["ts"]
    back = loads_recording(data, "x").one().frames[0]
    assert back["raw"] == f["raw"]
    for name in ("seq", "ts", "mono_ns", "direction", "channel", "sse_id", "sse_event"):
        assert back[name] == f[name], name
    assert back["complete"] is bool(f["complete"])
    assert back["http_exchange_id"] == f["http_exchange_id"]
    again = dumps_jsonl(Recording([SessionRecording(session, [exchange], [back])]))
    assert loads_recording(again, "x").one().frames == [back]


def _with(generator: str, edit: bytes = b"", to: bytes = b"") -> bytes:
    data = (RECORDINGS / "basic-legacy.mcptape.jsonl").read_bytes()
    head, rest = data.split(b"\n", 1)
    header = json.loads(head)
    header["generator"] = generator
    return json.dumps(header, separators=(",", ":")).encode() + b"\n" + rest.replace(edit, to, 1)


@pytest.mark.parametrize("generator", [f"mcptape {__version__}", "mcptape 0.0.1"])
def test_the_bytes_decide_a_frames_kind_whoever_wrote_the_file(
    tmp_path: Path, generator: str
) -> None:
    """Issue #24: an import once believed the kind, method and id a file's frame records said
    when the header named this very mcptape as the writer; a file that says so (any file can)
    and lies about a frame got the lie stored. Now the bytes are classified, always."""
    edit = b'"kind":"request","method":"tools/list"'
    to = b'"kind":"notification","method":"tools/lost"'
    path = tmp_path / "lying.mcptape.jsonl"
    path.write_bytes(_with(generator, edit, to))
    db = tmp_path / "x.db"
    done = run_cli("import", str(path), "--db", str(db))
    assert done.returncode == 0, done.stderr
    frames = db_frames(db)
    asked = [f for f in frames if f["msg_id"] == "2" and f["direction"] == "c2s"]
    assert [(f["kind"], f["method"]) for f in asked] == [("request", "tools/list")]
    # A request record without its method (the database could not hold it): from the bytes too.
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


def test_a_record_with_json_whitespace_around_it_reads_as_without_and_a_bom_is_refused() -> None:
    """Every line goes to orjson as it is: JSON's whitespace around a record changes nothing,
    and what JSON does not allow there (a BOM, a form feed) is refused naming the line."""
    from mcp_proxy.recording.jsonl_read import loads_rows
    from mcp_proxy.recording.model import RecordingFormatError

    sid = "c" * 32
    frame = (
        '{"type":"frame","session":"%s","seq":%d,"ts":1.5,"mono_ns":1,"dir":"c2s",'
        '"channel":"stdio","text":"{\\"jsonrpc\\":\\"2.0\\",\\"method\\":\\"ping\\",\\"id\\":1}"}'
    )
    lines = [
        b'{"format":"mcptape-recording","version":2}',
        b'{"type":"session","id":"%s","transport":"stdio","started_at":1.0}' % sid.encode(),
        *[(frame % (sid, n)).encode() for n in (1, 2, 3)],
        b'{"type":"end","sessions":1,"frames":3}',
    ]
    plain = loads_rows(b"\n".join(lines))[1]
    spaced = [lines[0], b" \t" + lines[1], lines[2] + b" \r", b"\t" + lines[3] + b"\r", *lines[4:]]
    assert loads_rows(b"\n".join(spaced))[1] == plain
    for bad in (b"\xef\xbb\xbf" + lines[3], b"\x0c" + lines[3], lines[3] + b"\x0b"):
        with pytest.raises(RecordingFormatError, match="line 4: not valid JSON"):
            loads_rows(b"\n".join([*lines[:3], bad, *lines[4:]]))
