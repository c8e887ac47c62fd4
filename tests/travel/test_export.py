"""Recording files: deterministic bytes, upgrades of old versions, bad input, HAR, import."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import jsonschema
import pytest

from mcp_proxy.diff import diff_sessions
from mcp_proxy.recording.database import import_recording, load_sessions
from mcp_proxy.recording.har import dumps_har, to_har
from mcp_proxy.recording.jsonl import FORMAT_VERSION, dumps_jsonl, loads_recording
from mcp_proxy.recording.model import Recording, RecordingFormatError
from mcp_proxy.recording.registry import read_recording
from mcp_proxy.store.queries import Store
from tests.travel.conftest import GOLDEN, RECORDINGS, run_cli

ALL = sorted(RECORDINGS.glob("*.mcptape.jsonl"))


def _body(data: bytes) -> list[bytes]:
    """The records after the header line (the header names the generator's version)."""
    return data.splitlines()[1:]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_committed_recordings_reexport_to_identical_bytes(path: Path) -> None:
    data = path.read_bytes()
    rec = loads_recording(data, path.name)
    assert rec.version == FORMAT_VERSION
    assert _body(dumps_jsonl(rec)) == _body(data)
    assert dumps_jsonl(rec) == dumps_jsonl(loads_recording(dumps_jsonl(rec)))


def test_v1_golden_upgrades_to_the_v2_golden() -> None:
    old = read_recording(GOLDEN / "v1-http.jsonl")
    assert old.version == 1
    assert _body(dumps_jsonl(old)) == _body((GOLDEN / "v2-http.jsonl").read_bytes())
    s = old.one()
    # Exact bytes survive the upgrade, including a stderr line that is not UTF-8.
    assert s.frames[-1]["raw"] == b"\xff\xfe not utf-8\n"
    assert [f["http_exchange_id"] for f in s.frames] == [1, 1, 1, 2, None]
    assert s.frames[2]["kind"] == "response" and s.frames[0]["method"] == "tools/call"


def test_v2_golden_still_loads() -> None:
    rec = read_recording(GOLDEN / "v2-http.jsonl")
    assert rec.version == 2
    assert rec.one().session["name"] == "golden"
    assert rec.one().findings[0]["code"] == "protocol.initialize_missing"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


BAD = {
    "truncated": (lambda ls: b"".join(ls[:-3]), "truncated: no end record"),
    "cut mid-line": (lambda ls: b"".join(ls[:-1])[:-40], "not valid JSON"),
    "a frame removed": (lambda ls: b"".join(ls[:5] + ls[6:]), "end record says"),
    "future version": (
        lambda ls: b"".join([ls[0].replace(b'"version":2', b'"version":99'), *ls[1:]]),
        "format version 99, newer than this mcptape reads",
    ),
    "not a recording": (lambda ls: b'{"hello": 1}\n', "not an mcptape recording"),
    "a HAR file": (lambda ls: b'{"log": {"version": "1.2"}}\n', "looks like a HAR file"),
    "empty": (lambda ls: b"", "is empty"),
    "bad direction": (lambda ls: b"".join(ls).replace(b'"dir":"c2s"', b'"dir":"up"', 1), "'dir'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_give_one_clear_error(case: str) -> None:
    edit, expected = BAD[case]
    data = edit(_lines(RECORDINGS / "basic-legacy.mcptape.jsonl"))
    with pytest.raises(RecordingFormatError) as err:
        loads_recording(data, "x.jsonl")
    assert expected in str(err.value)
    assert "\n" not in str(err.value)


def test_import_of_a_truncated_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "cut.jsonl"
    bad.write_bytes(b"".join(_lines(RECORDINGS / "basic-legacy.mcptape.jsonl")[:-4]))
    proc = run_cli("import", str(bad), "--db", str(tmp_path / "x.db"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("mcptape: ") and "truncated" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    missing = run_cli("import", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "x.db"))
    assert missing.returncode == 4 and "no such recording file" in missing.stderr


async def test_import_then_export_round_trips_every_frame(any_db_url: str) -> None:
    """On SQLite and on PostgreSQL: the store gives back every frame's bytes and times."""
    url = any_db_url
    source = read_recording(RECORDINGS / "basic-2026.mcptape.jsonl")
    result = await asyncio.to_thread(import_recording, source, url)
    ((old_id, new_id),) = result.sessions
    assert old_id == source.one().id and new_id != old_id
    store = await Store.open(url)
    try:
        back = await load_sessions(store, [new_id])
    finally:
        await store.close()
    s, orig = back.one(), source.one()
    assert [f["raw"] for f in s.frames] == [f["raw"] for f in orig.frames]
    assert [(f["ts"], f["direction"], f["channel"]) for f in s.frames] == [
        (f["ts"], f["direction"], f["channel"]) for f in orig.frames
    ]
    assert s.session["meta"]["imported_from"]["session_id"] == old_id
    assert s.session["era"] == orig.session["era"] and s.session["status"] == "ended"
    assert diff_sessions(orig, s).equal
    # The imported copy exports to the same records apart from the new session id.
    again = dumps_jsonl(Recording([s])).replace(new_id.encode(), old_id.encode())
    assert _body(again)[1:] == _body(dumps_jsonl(source))[1:]


# ---------------------------------------------------------------------------- HAR 1.2

#: The parts of HAR 1.2 (W3C draft, "HTTP Archive 1.2") that viewers rely on, as JSON Schema.
_NV = {
    "type": "object",
    "required": ["name", "value"],
    "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
}
HAR_SCHEMA = {
    "type": "object",
    "required": ["log"],
    "properties": {
        "log": {
            "type": "object",
            "required": ["version", "creator", "entries"],
            "properties": {
                "version": {"const": "1.2"},
                "creator": {"type": "object", "required": ["name", "version"]},
                "pages": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["startedDateTime", "id", "title", "pageTimings"],
                    },
                },
                "entries": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": [
                            "startedDateTime",
                            "time",
                            "request",
                            "response",
                            "cache",
                            "timings",
                        ],
                        "properties": {
                            "startedDateTime": {
                                "type": "string",
                                "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$",
                            },
                            "time": {"type": "number", "minimum": 0},
                            "request": {
                                "type": "object",
                                "required": [
                                    "method",
                                    "url",
                                    "httpVersion",
                                    "cookies",
                                    "headers",
                                    "queryString",
                                    "headersSize",
                                    "bodySize",
                                ],
                                "properties": {
                                    "headers": {"type": "array", "items": _NV},
                                    "queryString": {"type": "array", "items": _NV},
                                },
                            },
                            "response": {
                                "type": "object",
                                "required": [
                                    "status",
                                    "statusText",
                                    "httpVersion",
                                    "cookies",
                                    "headers",
                                    "content",
                                    "redirectURL",
                                    "headersSize",
                                    "bodySize",
                                ],
                                "properties": {
                                    "status": {"type": "integer"},
                                    "headers": {"type": "array", "items": _NV},
                                    "content": {"type": "object", "required": ["size", "mimeType"]},
                                },
                            },
                            "timings": {
                                "type": "object",
                                "required": ["send", "wait", "receive"],
                                "properties": {
                                    k: {"type": "number", "minimum": -1}
                                    for k in (
                                        "blocked",
                                        "dns",
                                        "connect",
                                        "send",
                                        "wait",
                                        "receive",
                                        "ssl",
                                    )
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}


def test_har_validates_and_keeps_sse_events() -> None:
    har = json.loads(dumps_har(read_recording(GOLDEN / "v2-http.jsonl")))
    jsonschema.validate(har, HAR_SCHEMA)
    entries = har["log"]["entries"]
    assert len(entries) == 2
    for e in entries:
        parts = [v for k, v in e["timings"].items() if k != "ssl" and v >= 0]
        assert e["time"] == pytest.approx(sum(parts))
    sse = entries[0]
    assert [ev["data"] for ev in sse["_sseEvents"]][1].startswith('{"jsonrpc":"2.0","id":1,')
    body = sse["response"]["content"]["text"]
    assert body.count("event: message\r\ndata: ") == 2 and "hi ✓" in body
    assert sse["response"]["content"]["size"] == len(body.encode())
    assert json.loads(sse["request"]["postData"]["text"])["method"] == "tools/call"
    assert entries[1]["response"]["status"] == 202
    assert dumps_har(read_recording(GOLDEN / "v2-http.jsonl")) == dumps_har(
        read_recording(GOLDEN / "v1-http.jsonl")
    )


def test_har_refuses_stdio_sessions_clearly() -> None:
    from mcp_proxy.errors import UserError

    with pytest.raises(UserError, match="recorded over stdio"):
        to_har(read_recording(RECORDINGS / "basic-legacy.mcptape.jsonl"))
