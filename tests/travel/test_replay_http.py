"""``mcptape replay SOURCE --upstream URL`` for real.

A session is recorded over Streamable HTTP through the real relay (``mcptape record --upstream
… --port 0``, driven by an SDK client), then replayed with the ``mcptape`` command line against
the same HTTP test server (no differences, exit 0) and against the changed preset (the echo
difference reported, exit 1). The replay is itself recorded through the relay and linked to the
original with ``meta.replay_of``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.recording.registry import read_recording
from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
)
from mcp_proxy.testing.process import READY_PREFIX, start_http_server, stop_process
from tests.conftest import crossed, matrix, mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.forkserver import server_python
from tests.travel.conftest import RECORDINGS, run_cli

pytestmark = pytest.mark.timeout(120)


@contextlib.contextmanager
def _announced(argv: list[str], prefix: str, timeout: float = 30.0) -> Iterator[str]:
    """Run ``argv``; yield the word after ``prefix`` on the stderr line that starts with it."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    found: list[str] = []
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            lines.append(line)
            if not ready.is_set() and line.startswith(prefix):
                found.append(line[len(prefix) :].split()[0])
                ready.set()
        ready.set()

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        ready.wait(timeout)
        assert found, "did not start:\n" + "\n".join(lines[-20:])
        yield found[0]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the relay drains its recording on SIGINT
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                stop_process(proc)  # type: ignore[arg-type]
        t.join(5)
        if proc.stderr is not None:
            proc.stderr.close()


def _changed_server() -> list[str]:
    presets = "basic_changed,slow,failing"
    module = "mcp_proxy.testing.presets_changed"
    return [server_python(), "-m", module, "--preset", presets, "--name", "mcptape-test"]


async def _record_http(url: str, db: Path | str, name: str, mode: str = "legacy") -> None:
    """An SDK client's scripted session, through ``mcptape record --upstream URL --port 0``."""
    relay = [*mcptape_cmd(), "record", "--upstream", url, "--port", "0"]
    argv = [*relay, "--db", str(db), "--name", name]
    with _announced(argv, "mcptape: relaying ") as relayed:
        local = relayed.rstrip("/").split("/mcp")[0] + "/mcp"
        rec = CallbackRecorder()
        async with make_client(local, mode=mode, recorder=rec) as client:
            await run_scripted_session(client, rec)


# --full only: the default run records through the HTTP relay, replays against the same and the
# changed server and checks that the replays are sessions linked to the original in
# tests/replay/test_http_transports.py (stateful-2026).
@pytest.mark.full
async def test_http_record_then_replay_same_and_changed(tmp_path: Path) -> None:
    db = tmp_path / "http.db"
    with start_http_server(SCRIPTED_PRESETS, name="mcptape-test") as (url, _proc):
        await _record_http(url, db, "http-rt")
        sessions = json.loads(run_cli("sessions", "--db", str(db), "--format", "json").stdout)
        assert [s["name"] for s in sessions] == ["http-rt"]
        assert sessions[0]["transport"] != "stdio"

        started = time.monotonic()
        same = run_cli("replay", "http-rt", "--db", str(db), "--upstream", url)
        assert same.returncode == 0, same.stdout + same.stderr
        assert "no differences" in same.stdout and "Traceback" not in same.stderr
        assert time.monotonic() - started < 30

    changed_argv = [*_changed_server(), "--transport", "http", "--port", "0"]
    with _announced(changed_argv, READY_PREFIX + " ") as changed_url:
        changed = run_cli(
            "replay", "http-rt", "--db", str(db), "--upstream", changed_url, "--format", "json"
        )
    assert changed.returncode == 1, changed.stdout + changed.stderr
    report = json.loads(changed.stdout)
    assert not report["equal"] and report["notes"] == []
    diffs = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
    echo = next(e for e in diffs if e["title"] == "→ tools/call echo")
    assert {
        "path": "$.result.content[0].text",
        "kind": "changed",
        "a": "hello, wire",
        "b": "HELLO, WIRE",
    } in echo["changes"]

    # Both replays are sessions of their own, recorded by the relay and linked to the original.
    sessions = json.loads(run_cli("sessions", "--db", str(db), "--format", "json").stdout)
    original = next(s for s in sessions if s["name"] == "http-rt")
    linked = [s for s in sessions if (s.get("meta") or {}).get("replay_of")]
    assert len(linked) == 2
    assert all(s["meta"]["replay_of"]["session_id"] == original["id"] for s in linked)
    assert all(s["transport"] == original["transport"] for s in linked)


# The default run: the initialize era (a 2026-07-28 recording replays over HTTP in the default
# run in tests/replay/test_http_transports.py); --full: both eras.
@pytest.mark.parametrize("name", matrix(["basic-legacy", "basic-2026"], keep={"basic-legacy"}))
def test_stdio_recording_replays_over_http_and_unreachable_is_reported(
    name: str, tmp_path: Path
) -> None:
    """A stdio recording of either era replays against the HTTP server; a dead URL is exit 1."""
    db = str(tmp_path / "r.db")
    file = str(RECORDINGS / f"{name}.mcptape.jsonl")
    with start_http_server(SCRIPTED_PRESETS, name="mcptape-test") as (url, _proc):
        proc = run_cli("replay", file, "--db", db, "--upstream", url)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "no differences" in proc.stdout
    gone = run_cli(
        "replay",
        file,
        "--db",
        db,
        "--timeout",
        "2",
        "--upstream",
        url,  # stopped above
    )
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    assert "problem:" in gone.stdout


def _assert_sdk_headers(db: Path | str) -> None:
    """The replay's tools/call POSTs carried the 2026 routing headers as the SDK sent them."""
    rows = rdb.rows(
        db,
        "SELECT s.meta, e.request_headers FROM http_exchanges e"
        " JOIN sessions s ON s.id = e.session_id WHERE e.method = 'POST'",
    )
    seen: dict[bool, set[tuple[str, str]]] = {True: set(), False: set()}
    for meta, headers in ((r["meta"], r["request_headers"]) for r in rows):
        replay = "replay_of" in json.loads(meta or "{}")
        pairs = {(str(k).lower(), str(v)) for k, v in json.loads(headers or "[]")}
        if ("mcp-method", "tools/call") in pairs:
            seen[replay] |= {p for p in pairs if p[0] in ("mcp-name", "mcp-protocol-version")}
    assert ("mcp-name", "echo") in seen[False]
    assert seen[True] == seen[False]


@pytest.mark.parametrize(("mode", "recorded_on", "imported_on"), crossed(["legacy", "auto"]))
async def test_http_recording_exports_as_har_and_jsonl_and_reimports_equal(
    mode: str, recorded_on: str, imported_on: str, tmp_path: Path, db_factory: Any
) -> None:
    """A real HTTP recording → HAR (valid, timings add up) and JSONL → import → no diff; the
    recording and the import each on SQLite in one run and on PostgreSQL in the other."""
    import jsonschema

    from tests.travel.test_export import HAR_SCHEMA

    db, db2 = db_factory(recorded_on), db_factory(imported_on)
    with start_http_server(SCRIPTED_PRESETS, name="mcptape-test") as (url, _proc):
        await _record_http(url, db, "http-x", mode=mode)
        if mode == "auto":  # the 2026-07-28 era recorded over HTTP replays too
            same = run_cli("replay", "http-x", "--db", str(db), "--upstream", url)
            assert same.returncode == 0, same.stdout + same.stderr
            assert "no differences" in same.stdout
            _assert_sdk_headers(db)

    har_file, jsonl = tmp_path / "x.har", tmp_path / "x.mcptape.jsonl"
    har_out = run_cli("export", "http-x", "--db", str(db), "--format", "har", "-o", str(har_file))
    assert har_out.returncode == 0, har_out.stderr
    har = json.loads(har_file.read_text(encoding="utf-8"))
    jsonschema.validate(har, HAR_SCHEMA)
    entries = har["log"]["entries"]
    assert entries and all(e["request"]["url"].startswith(url.rsplit("/", 1)[0]) for e in entries)
    for e in entries:
        parts = [v for k, v in e["timings"].items() if k != "ssl" and v >= 0]
        assert e["time"] == pytest.approx(sum(parts))
    posted = [
        json.loads(e["request"]["postData"]["text"]) for e in entries if "postData" in e["request"]
    ]
    assert any(isinstance(m, dict) and m.get("method") == "tools/call" for m in posted)

    out = run_cli("export", "http-x", "--db", str(db), "-o", str(jsonl))
    assert out.returncode == 0, out.stderr
    imp = run_cli("import", str(jsonl), "--db", str(db2))
    assert imp.returncode == 0, imp.stderr
    new_id = imp.stdout.split()[0]
    d = run_cli("diff", new_id, str(jsonl), "--db", str(db2))
    assert d.returncode == 0 and "no differences" in d.stdout, d.stdout + d.stderr
    # Imported next to the original: the copy against the relay's own session.
    listed = json.loads(run_cli("sessions", "--db", str(db), "--format", "json").stdout)
    original_id = next(x["id"] for x in listed if x["name"] == "http-x")
    imp1 = run_cli("import", str(jsonl), "--db", str(db))
    assert imp1.returncode == 0, imp1.stderr
    copy_id = imp1.stdout.split()[0]
    assert copy_id != original_id
    d = run_cli("diff", original_id, copy_id, "--db", str(db))
    assert d.returncode == 0 and "no differences" in d.stdout, d.stdout + d.stderr
    again = tmp_path / "again.jsonl"
    assert run_cli("export", new_id, "--db", str(db2), "-o", str(again)).returncode == 0
    assert read_recording(again).sessions[0].frames == read_recording(jsonl).sessions[0].frames
