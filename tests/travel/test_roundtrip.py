"""Round trips for real: record → export → import → diff → replay (same and changed) → mock.

Every step uses the real relay (``mcptape record`` launched by an SDK client, as a host does),
the real test servers, real SQLite files and PostgreSQL databases (a recording moves from one
to the other) and the ``mcptape`` command line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from mcp_proxy.recording.registry import read_recording
from mcp_proxy.testing.client import (
    SCRIPTED_PRESETS,
    CallbackRecorder,
    make_client,
    run_scripted_session,
    stdio_params,
)
from tests.conftest import crossed, mcptape_cmd
from tests.helpers.proxy import proxied
from tests.travel.conftest import PY, RECORDINGS, child_env, run_cli, server

pytestmark = pytest.mark.timeout(120)


def _through_record(
    params: StdioServerParameters, db: Path | str, name: str
) -> StdioServerParameters:
    return proxied(params, db, name, env=child_env())


def _mock_params(*args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PY, args=["-m", "mcp_proxy", "mock", *args], env=child_env()
    )


@pytest.mark.parametrize(("mode", "recorded_on", "imported_on"), crossed(["auto", "legacy"]))
async def test_record_export_import_diff_replay_mock(
    mode: str, recorded_on: str, imported_on: str, tmp_path: Path, db_factory: Any
) -> None:
    """Recorded into one dialect, imported (and replayed) into the other: both stores, both
    directions, in two runs."""
    db, db2 = db_factory(recorded_on), db_factory(imported_on)
    rec = CallbackRecorder()
    params = stdio_params(SCRIPTED_PRESETS, name="mcptape-test")
    async with make_client(_through_record(params, db, "rt"), mode=mode, recorder=rec) as client:
        direct = await run_scripted_session(client, rec)

    file = tmp_path / "rt.mcptape.jsonl"
    assert run_cli("export", "rt", "--db", str(db), "-o", str(file)).returncode == 0
    again = tmp_path / "again.jsonl"
    assert run_cli("export", "rt", "--db", str(db), "-o", str(again)).returncode == 0
    assert file.read_bytes() == again.read_bytes()

    imp = run_cli("import", str(file), "--db", str(db2))
    assert imp.returncode == 0, imp.stderr
    new_id = imp.stdout.split()[0]
    # The imported copy vs the original database session: no differences.
    d = run_cli("diff", new_id, str(file), "--db", str(db2))
    assert d.returncode == 0 and "no differences" in d.stdout, d.stdout

    same = run_cli("replay", str(file), "--db", str(db2), "--", *server("basic,slow,failing"))
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no differences" in same.stdout

    changed = run_cli(
        "replay",
        str(file),
        "--db",
        str(db2),
        "--format",
        "json",
        "--",
        *server("basic_changed,slow,failing", "mcp_proxy.testing.presets_changed"),
    )
    assert changed.returncode == 1, changed.stderr
    report = json.loads(changed.stdout)
    assert not report["equal"]
    diffs = [e for e in report["diff"]["exchanges"] if e["status"] != "same"]
    echo = next(e for e in diffs if e["title"] == "→ tools/call echo")
    assert {
        "path": "$.result.content[0].text",
        "kind": "changed",
        "a": "hello, wire",
        "b": "HELLO, WIRE",
    } in echo["changes"]
    # The replay is a session of its own, linked to the original.
    sessions = json.loads(run_cli("sessions", "--db", str(db2), "--format", "json").stdout)
    linked = [s for s in sessions if (s.get("meta") or {}).get("replay_of")]
    assert len(linked) == 2 and all(s["meta"]["replay_of"]["session_id"] for s in linked)

    # The mock serves an SDK client the recorded results, over stdio …
    rec2 = CallbackRecorder()
    async with make_client(_mock_params(str(file)), mode=mode, recorder=rec2) as client:
        mocked = await run_scripted_session(client, rec2)
    assert mocked == direct

    # … and over Streamable HTTP.
    proc = subprocess.Popen(  # noqa: ASYNC220 - started once, stopped by pid below
        [*mcptape_cmd(), "mock", str(file), "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = line.rsplit(" at ", 1)[1].strip()
        rec3 = CallbackRecorder()
        async with make_client(url, mode=mode, recorder=rec3) as client:
            over_http = await run_scripted_session(client, rec3)
        assert over_http == direct
    finally:
        proc.terminate()
        proc.wait(10)


async def test_mock_replays_nested_server_requests_and_mrtr() -> None:
    """Sampling/roots/elicitation asked of the live client; MRTR chains served round by round."""
    from mcp_proxy.testing.client import tool_text

    rec = CallbackRecorder()
    nested = _mock_params(str(RECORDINGS / "nested-legacy.mcptape.jsonl"))
    async with make_client(nested, mode="legacy", recorder=rec) as client:
        sampled = tool_text(await client.call_tool("sample", {"prompt": "Say hi"}))
        asked = tool_text(await client.call_tool("ask", {"question": "Name?"}))
    assert sampled == "sampled reply" and asked == "accept: Ada"
    assert len(rec.sampling_requests) == 1 and len(rec.elicitation_requests) == 1

    rec = CallbackRecorder()
    mrtr = _mock_params(str(RECORDINGS / "mrtr-2026.mcptape.jsonl"))
    async with make_client(mrtr, mode="auto", recorder=rec) as client:
        confirmed = tool_text(await client.call_tool("confirm", {"action": "deploy"}))
        counted = tool_text(await client.call_tool("countdown", {"rounds": 2}))
    assert confirmed == "deploy: accept: Ada" and counted == "liftoff after 2 rounds"


# --full only: the default run replays nested-legacy against its server in the fixture of
# tests/store/test_copy.py, and .ci/run's replay job replays every recording in recordings/
# (mrtr-2026 among them) against its server.
@pytest.mark.full
def test_replay_of_the_other_recordings_against_their_servers(tmp_path: Path) -> None:
    for name, presets in (("nested-legacy", "sampling,elicitation"), ("mrtr-2026", "mrtr")):
        proc = run_cli(
            "replay",
            str(RECORDINGS / f"{name}.mcptape.jsonl"),
            "--db",
            str(tmp_path / "r.db"),
            "--",
            *server(presets),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.full  # ~30 s: replay waits out the 15 s start-up grace by design
def test_replay_against_a_server_that_does_not_answer_reports_it(tmp_path: Path) -> None:
    silent = [PY, "-c", "import sys, time; sys.stdin.read()"]
    proc = run_cli(
        "replay",
        str(RECORDINGS / "basic-legacy.mcptape.jsonl"),
        "--db",
        str(tmp_path / "r.db"),
        "--timeout",
        "0.25",
        "--",
        *silent,
    )
    assert proc.returncode == 1
    assert "no answer in 0.25 s" in proc.stdout and "Traceback" not in proc.stderr
    gone = run_cli(
        "replay",
        str(RECORDINGS / "basic-legacy.mcptape.jsonl"),
        "--db",
        str(tmp_path / "r.db"),
        "--",
        PY,
        "-c",
        "pass",
    )
    assert gone.returncode == 1 and "Traceback" not in gone.stderr
    missing = run_cli(
        "replay",
        str(RECORDINGS / "basic-legacy.mcptape.jsonl"),
        "--db",
        str(tmp_path / "r.db"),
        "--",
        "no-such-server-binary",
    )
    assert missing.returncode == 127 and missing.stderr.startswith("mcptape: command not found")


def test_mock_new_episodes_forwards_misses_and_extends_the_file(tmp_path: Path) -> None:
    import asyncio

    from mcp_proxy.testing.client import tool_text

    file = tmp_path / "cassette.jsonl"
    file.write_bytes((RECORDINGS / "basic-legacy.mcptape.jsonl").read_bytes())

    async def call(*mock_args: str) -> tuple[str, str]:
        async with make_client(_mock_params(str(file), *mock_args), mode="legacy") as client:
            known = tool_text(await client.call_tool("echo", {"text": "hello, wire"}))
            try:
                new = tool_text(await client.call_tool("echo", {"text": "a new episode"}))
            except Exception as exc:  # the SDK raises MCPError for a JSON-RPC error
                new = f"error: {exc}"
        return known, new

    known, new = asyncio.run(
        call("--record-mode", "new_episodes", "--", *server("basic,slow,failing"))
    )
    assert (known, new) == ("hello, wire", "a new episode")
    assert len(read_recording(file).sessions) == 2
    # Played back without a server: the new episode is now in the recording.
    assert asyncio.run(call()) == ("hello, wire", "a new episode")


def test_mock_miss_is_a_jsonrpc_error_listing_the_nearest(tmp_path: Path) -> None:
    """Raw stdio: a request never recorded gets an error naming how it differs; no hang."""
    proc = subprocess.Popen(
        [PY, "-m", "mcp_proxy", "mock", str(RECORDINGS / "basic-legacy.mcptape.jsonl")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    req = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "other"}},
    }
    nope = {"jsonrpc": "2.0", "id": "x", "method": "no/such"}
    out, err = proc.communicate(
        (json.dumps(req) + "\n" + json.dumps(nope) + "\n").encode(), timeout=30
    )
    replies = {json.loads(line)["id"]: json.loads(line) for line in out.splitlines()}
    miss = replies[7]["error"]
    assert miss["code"] == -32050
    nearest = miss["data"]["nearest"][0]
    assert nearest["params"]["arguments"] == {"text": "hello, wire"}
    assert nearest["differences"] == [
        {"path": "$.params.arguments.text", "kind": "changed", "a": "hello, wire", "b": "other"}
    ]
    assert replies["x"]["error"]["code"] == -32601
    assert b"2 request(s) had no recorded answer" in err and proc.returncode == 0
