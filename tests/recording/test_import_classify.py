"""An import classifies every frame from its bytes, as ``frames.classify`` does (issue #24).

The reader skips :func:`~mcp_proxy.frames.classify`'s own look for a run of 19+ digits (an
integer orjson would read as a float) when the block of the file it read holds none
(``jsonl_read.BlockScan``). A frame's text is a JSON string in the file: its digits appear
as themselves unless written ``\\u003X``, so a block with such an escape is looked at frame by
frame. These tests hold the reader to that: a long id spelled with escapes keeps its exact
value through ``mcptape import``, and any frame text, however written, gets the row
``classify`` gives its bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_proxy.frames import classify, column_id
from mcp_proxy.recording.jsonl_read import loads_rows
from tests.helpers import db as rdb
from tests.recording.conftest import run_cli

SID = "c" * 32
BIG_ID = 12345678901234567890123  # past 64 bits: orjson would make it 1.2345678901234568e+22


def _file(texts: list[str], *, ascii_only: bool = True) -> bytes:
    header = {"format": "mcptape-recording", "version": 2, "generator": "a test"}
    session = {
        "type": "session", "id": SID, "name": "t", "transport": "stdio", "status": "ended",
        "started_at": 1_750_000_000.0, "command": ["server"], "frame_count": len(texts),
        "gap_count": 0,
    }  # fmt: skip
    recs: list[dict[str, object]] = [header, session]
    for seq, text in enumerate(texts, start=1):
        recs.append(
            {"type": "frame", "session": SID, "seq": seq, "ts": 1_750_000_000.0 + seq,
             "mono_ns": seq, "dir": "c2s", "channel": "stdio", "text": text}
        )  # fmt: skip
    recs.append({"type": "end", "sessions": 1, "http_exchanges": 0, "frames": len(texts)})
    return b"".join(
        json.dumps(r, separators=(",", ":"), ensure_ascii=ascii_only).encode() + b"\n" for r in recs
    )


def _escaped_digits(data: bytes, digits: str) -> bytes:
    """``data`` with each digit of ``digits`` (where it appears) written as a ``\\u`` escape:
    the same JSON strings, and no run of digits in the file's bytes."""
    spelled = "".join(f"\\u{ord(c):04x}" for c in digits).encode()
    assert digits.encode() in data
    return data.replace(digits.encode(), spelled)


def test_a_long_id_spelled_with_escapes_keeps_its_value_through_import(tmp_path: Path) -> None:
    request = json.dumps({"jsonrpc": "2.0", "id": BIG_ID, "method": "tools/list"}) + "\n"
    path = tmp_path / "escaped.jsonl"
    path.write_bytes(_escaped_digits(_file([request]), str(BIG_ID)))
    db = tmp_path / "t.db"
    result = run_cli("import", str(path), "--db", str(db))
    assert result.returncode == 0, result.stderr
    (frame,) = rdb.frames(db)
    assert frame["raw"] == request.encode()
    assert frame["kind"] == "request"
    assert frame["msg_id"] == str(BIG_ID)  # json's exact integer, not orjson's float


_IDS = st.one_of(
    st.integers(min_value=-(2**80), max_value=2**80),
    st.text(max_size=30),
    st.floats(allow_nan=False),
    st.none(),
)
_MESSAGES = st.one_of(
    st.builds(lambda i, m: {"jsonrpc": "2.0", "id": i, "method": m}, _IDS, st.text(max_size=20)),
    st.builds(lambda i: {"jsonrpc": "2.0", "id": i, "result": {}}, _IDS),
    st.builds(
        lambda i, c: {"jsonrpc": "2.0", "id": i, "error": {"code": c, "message": "x"}},
        _IDS,
        st.integers(min_value=-(2**70), max_value=2**70),
    ),
    st.builds(lambda m: {"jsonrpc": "2.0", "method": m}, st.text(max_size=20)),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(_MESSAGES.map(json.dumps), st.text(max_size=40)), min_size=1, max_size=8),
    st.booleans(),
    st.booleans(),
)
def test_every_frame_gets_the_row_its_bytes_give(
    texts: list[str], ascii_only: bool, escape_digits: bool
) -> None:
    data = _file(texts, ascii_only=ascii_only)
    if escape_digits:
        for text in texts:
            for run in {w for w in "".join(c if c.isdigit() else " " for c in text).split()}:
                if len(run) >= 19 and run.encode() in data:
                    data = _escaped_digits(data, run)
    _recording, (rows,) = loads_rows(data, "t")
    assert len(rows) == len(texts)
    for row, text in zip(rows, texts, strict=True):
        raw = text.encode("utf-8", "surrogatepass")
        c = classify(raw, "stdio")
        assert row[5:9] == (c.kind.value, c.method, c.msg_id, c.error_code), text
        assert column_id(row[7]) == column_id(c.msg_id)
