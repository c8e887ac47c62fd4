"""Hostile input to diff, replay and mock (issue 10, defects 12 and 13): a clear result, never a
traceback.

A frame nested ~1,200 levels deep is recordable and parses, but every recursive walk over it
(normalising, comparing, matching) used to exhaust Python's stack; a line nested deeper than the
JSON parser's own limit raised out of the mock's read loop; a bad or busy ``--port`` printed a
traceback. Each test drives the real ``mcptape`` command line.
"""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from mcp_proxy.diff import diff_sessions
from mcp_proxy.normalize import MAX_DEPTH
from mcp_proxy.recording.registry import read_recording
from tests.conftest import mcptape_cmd
from tests.travel.conftest import RECORDINGS, run_cli, server

pytestmark = pytest.mark.timeout(120)

DEPTH = 1_200


def _nest(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_recording(tmp_path: Path, depth: int = DEPTH) -> Path:
    """basic-legacy with a deep value in the echo result and in the ``add`` request's params."""
    out = []
    done = {"result": False, "request": False}
    for line in (RECORDINGS / "basic-legacy.mcptape.jsonl").read_text().splitlines():
        rec = json.loads(line)
        text = rec.get("text") if rec.get("type") == "frame" else None
        if isinstance(text, str) and not done["result"] and '"text":"hello, wire"' in text:
            if rec["dir"] == "s2c":
                rec["text"] = text.replace('"result":{', f'"result":{{"deep":{_nest(depth)},', 1)
                done["result"] = True
        if isinstance(text, str) and rec["dir"] == "c2s" and '"name":"add"' in text:
            rec["text"] = text.replace('"arguments":{', f'"arguments":{{"deep":{_nest(depth)},', 1)
            done["request"] = True
        out.append(json.dumps(rec, separators=(",", ":")))
    assert all(done.values())
    path = tmp_path / "deep.mcptape.jsonl"
    path.write_text("\n".join(out) + "\n")
    return path


def test_diff_of_a_deeply_nested_recording_names_the_frame(tmp_path: Path) -> None:
    deep = _deep_recording(tmp_path)
    base = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
    text = run_cli("diff", base, str(deep))
    assert text.returncode == 1, text.stdout + text.stderr
    assert "Traceback" not in text.stderr and text.stderr == ""
    assert f"nests deeper than {MAX_DEPTH} levels" in text.stdout
    assert "~ → tools/call echo" in text.stdout and "~ → tools/call add" in text.stdout
    as_json = run_cli("diff", base, str(deep), "--format", "json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and not report["equal"]
    assert any("→ tools/call echo" in n and "deeper" in n for n in report["notes"])
    same = run_cli("diff", str(deep), str(deep))
    assert same.returncode == 0 and "no differences" in same.stdout, same.stdout + same.stderr


def test_frames_too_deep_for_the_json_parser_are_opaque_in_the_diff() -> None:
    """5,000 levels: ``json.loads`` itself gives up; the diff still answers and says where."""
    rec = read_recording(RECORDINGS / "basic-legacy.mcptape.jsonl").one()
    frames = [dict(f) for f in rec.frames]
    target = next(f for f in frames if f["direction"] == "s2c" and b"hello, wire" in f["raw"])
    target["raw"] = b'{"jsonrpc":"2.0","id":5,"result":' + _nest(5_000).encode() + b"}\n"
    hostile = type(rec)(rec.session, frames=frames)
    result = diff_sessions(rec, hostile)
    assert not result.equal
    assert any(f"frame #{target['seq']}" in n for n in result.notes), result.notes


def test_mock_serves_a_deep_recording_and_survives_deep_requests(tmp_path: Path) -> None:
    deep = _deep_recording(tmp_path)
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "hello, wire"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": json.loads(_nest(DEPTH))}},
        },
    ]
    data = "".join(json.dumps(m) + "\n" for m in lines)
    data += '{"jsonrpc":"2.0","id":3,"method":"x","params":' + _nest(5_000) + "}\n"
    data += '{"jsonrpc":"2.0","id":4,"method":"ping"}\n'
    proc = subprocess.run(
        [*mcptape_cmd(), "mock", str(deep)],
        input=data.encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    replies = {m["id"]: m for m in map(json.loads, proc.stdout.splitlines())}
    assert set(replies) == {1, 2, 4}  # the unparsable line is ignored, as the SDK server does
    assert replies[1]["result"]["deep"] == json.loads(_nest(DEPTH))  # served whole
    assert replies[2]["error"]["code"] == -32050
    assert replies[4]["result"] == {}


@pytest.mark.full  # ~30 s of a real replay; the deep-frame paths stay in the default run below
def test_replay_of_a_deep_recording_is_a_reported_difference(tmp_path: Path) -> None:
    deep = _deep_recording(tmp_path)
    proc = run_cli(
        "replay", str(deep), "--db", str(tmp_path / "r.db"), "--", *server("basic,slow,failing")
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "nests deeper than" in proc.stdout and "~ → tools/call echo" in proc.stdout


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_mock_port_out_of_range_is_one_line(port: str) -> None:
    proc = run_cli("mock", str(RECORDINGS / "basic-legacy.mcptape.jsonl"), "--port", port)
    assert proc.returncode == 2
    assert proc.stderr == f"mcptape: --port {port}: not a TCP port (0-65535; 0 picks a free one)\n"


def test_mock_on_a_port_in_use_is_one_line() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("mock", str(RECORDINGS / "basic-legacy.mcptape.jsonl"), "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr == f"mcptape: cannot serve on 127.0.0.1:{port}: address already in use\n"


def test_a_frame_too_deep_to_parse_in_a_file_is_diffed_mocked_and_replayed(
    tmp_path: Path,
) -> None:
    """5,000 levels in a recording file: every command answers, none with a traceback."""
    deep = _deep_recording(tmp_path, depth=5_000)
    base = str(RECORDINGS / "basic-legacy.mcptape.jsonl")
    diff = run_cli("diff", base, str(deep))
    assert diff.returncode == 1 and diff.stderr == "", diff.stderr
    assert "nests too deep to parse; it is one opaque step" in diff.stdout
    assert "+ ← <too deep to parse>" in diff.stdout

    ping = '{"jsonrpc":"2.0","id":4,"method":"ping"}\n'
    mock = subprocess.run(
        [*mcptape_cmd(), "mock", str(deep)], input=ping.encode(), capture_output=True, timeout=60
    )
    assert mock.returncode == 0 and b"Traceback" not in mock.stderr, mock.stderr.decode()
    assert json.loads(mock.stdout)["result"] == {}

    replay = run_cli(
        "replay", str(deep), "--db", str(tmp_path / "r.db"), "--", *server("basic,slow,failing")
    )
    assert replay.returncode == 1 and "Traceback" not in replay.stderr, replay.stderr
    assert "nests too deep to parse" in replay.stdout
