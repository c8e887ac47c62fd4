"""``mcptape db copy``: a laptop's SQLite recordings into the team's PostgreSQL, and back.

The source is built the way a user builds one — recordings imported (stdio, and HTTP with its
exchanges and headers), a replay of one of them through the real relay (linked by
``meta.replay_of``), ``mcptape check`` (stored findings) and annotations — then
copied with the real command. Equality is checked table by table, every column, with exchange
ids compared by what they point at (each database numbers its own rows), and by exporting the
same session from both stores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcp_proxy.store.engine import sync_engine
from mcp_proxy.store.schema import annotations
from tests.conftest import mcptape_cmd
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape
from tests.helpers.db import PgServer

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "recordings"
PY = sys.executable

pytestmark = pytest.mark.timeout(300)


#: Commands run in-process through the real entry point (tests/helpers/cli.py): the same parsing,
#: output and exit codes without a Python start-up each (``replay`` still starts the relay and
#: its server as processes of their own).
IN_PROCESS = frozenset({"import", "check", "stats", "show", "export", "db", "replay"})


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    if stdin is None and args[0] in IN_PROCESS:
        done = run_mcptape(*args)
        return subprocess.CompletedProcess(
            done.args, done.returncode, done.stdout.encode(), done.stderr.encode()
        )
    return subprocess.run(
        [*mcptape_cmd(), *args],
        capture_output=True,
        input=stdin,
        timeout=180,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def ok(*args: str) -> str:
    out = cli(*args)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout.decode()


def server(presets: str) -> list[str]:
    return [PY, "-m", "mcp_proxy.testing.server", "--preset", presets, "--transport", "stdio"]


def annotate(url: str, sid: str, *, tag: str | None = None, note: str | None = None, seq=None):
    engine = sync_engine(url)
    with engine.begin() as conn:
        conn.execute(
            annotations.insert(),
            [
                {
                    "session_id": sid,
                    "frame_seq": seq,
                    "tag": tag,
                    "note": note,
                    "created_at": time.time(),
                }
            ],
        )
    engine.dispose()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("copy") / "laptop.db"
    ok("import", str(RECORDINGS / "nested-legacy.mcptape.jsonl"), "--db", str(db))
    ok("import", str(RECORDINGS / "basic-2026.mcptape.jsonl"), "--db", str(db))
    replay = cli("replay", "nested-legacy", "--db", str(db), "--", *server("sampling,elicitation"))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    ok("import", str(ROOT / "tests" / "travel" / "golden" / "v2-http.jsonl"), "--db", str(db))
    names = [s["name"] for s in rdb.sessions(db)]
    checked = cli("check", *names, "--db", str(db))
    assert checked.returncode in (0, 1), checked.stderr  # 1: it found errors (it should)
    ok("stats", *names, "--db", str(db))  # (stores the imported sessions' numbers)
    first = rdb.sessions(db)[0]["id"]
    annotate("sqlite:///" + str(db), first, tag="bug-repro")
    annotate("sqlite:///" + str(db), first, note="the second answer is wrong", seq=3)
    return db


def dump(db: Path | str) -> dict[str, Any]:
    """Everything a recording is, independent of the row ids each database assigns."""
    out: dict[str, Any] = {}
    for s in rdb.sessions(db):
        sid = s["id"]
        exchanges = rdb.rows(
            db, "SELECT * FROM http_exchanges WHERE session_id = ? ORDER BY id", sid
        )
        index = {x["id"]: i for i, x in enumerate(exchanges)}
        frames = rdb.rows(db, "SELECT * FROM frames WHERE session_id = ? ORDER BY seq", sid)
        for f in frames:
            f.pop("id")
            f["http_exchange_id"] = index.get(f["http_exchange_id"])
            f["complete"], f["partial_parse"] = bool(f["complete"]), bool(f["partial_parse"])
            f["redacted"] = None if f["redacted"] is None else bool(f["redacted"])
        for x in exchanges:
            x.pop("id")
        found = rdb.rows(db, "SELECT * FROM findings WHERE session_id = ? ORDER BY id", sid)
        notes = rdb.rows(db, "SELECT * FROM annotations WHERE session_id = ? ORDER BY id", sid)
        stats = rdb.rows(db, "SELECT * FROM session_stats WHERE session_id = ?", sid)
        for r in (*found, *notes):
            r.pop("id")
        out[sid] = {
            "session": _norm(s),
            "frames": frames,
            "exchanges": [_norm(x) for x in exchanges],
            "findings": [_norm(x) for x in found],
            "annotations": notes,
            "stats": [_norm(x) for x in stats],
        }
    return out


def _norm(row: dict[str, Any]) -> dict[str, Any]:
    """JSON columns come back as text from sqlite3 and as objects from psycopg."""
    return {
        k: (json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v) for k, v in row.items()
    }


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two dumps part (a readable failure instead of two screenfuls of dicts)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'second' if k not in a else 'first'}"
            found = first_difference(a[k], b[k], f"{path}/{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} rows != {len(b)} rows"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def assert_same(a: Any, b: Any) -> None:
    diff = first_difference(a, b)
    assert diff is None, diff


@pytest.fixture
def team(pg_server: PgServer) -> Iterator[str]:
    url = pg_server.create_database(migrated=False)  # a brand-new team database
    yield url
    pg_server.drop_database(url)


def test_sqlite_to_postgresql_and_back_keeps_everything(
    source: Path, team: str, tmp_path: Path
) -> None:
    before = dump(source)
    kinds = {(v["session"]["transport"]) for v in before.values()}
    assert {"stdio", "http"} <= kinds
    assert any(v["exchanges"] for v in before.values())
    assert any(v["findings"] for v in before.values())
    assert any(v["annotations"] for v in before.values())
    assert all(v["stats"] for v in before.values())
    replays = [v for v in before.values() if (v["session"]["meta"] or {}).get("replay_of")]
    assert replays, "the source must hold a replay linked to its original"

    first = ok("db", "copy", str(source), team)
    assert f"{len(before)} session(s) copied" in first
    assert_same(dump(team), before)
    # The replay's link still leads to its original, in the team's database.
    link = replays[0]["session"]["meta"]["replay_of"]["session_id"]
    assert rdb.rows(team, "SELECT id FROM sessions WHERE id = ?", link)

    # Idempotent: nothing copied the second time, nothing doubled.
    second = ok("db", "copy", str(source), team)
    assert "0 session(s) copied, 0 updated" in second and f"{len(before)} already there" in second
    assert_same(dump(team), before)

    # And back: the team's database into a new SQLite file.
    back = tmp_path / "back.db"
    ok("db", "copy", team, str(back))
    assert_same(dump(back), before)

    # What a user reads of a session is the same from either store (exchange ids aside: each
    # database numbers its own).
    sid = next(k for k, v in before.items() if v["exchanges"])
    shown = [
        [
            {k: v for k, v in json.loads(line).items() if k != "http_exchange_id"}
            for line in ok("show", sid, "--format", "json", "--db", str(db)).splitlines()
        ]
        for db in (source, team)
    ]
    assert shown[0] == shown[1] and len(shown[0]) == len(before[sid]["frames"])


def test_a_destination_with_its_own_method_codes_gets_its_own_codes(
    source: Path, team: str
) -> None:
    """Frames are copied as stored (codes, not names), so a method's code must be translated:
    the team's database already numbered other methods first (another laptop's recording)."""
    ok("import", str(RECORDINGS / "mrtr-2026.mcptape.jsonl"), "--db", team)
    theirs = {s["id"] for s in rdb.sessions(team)}
    codes = [
        {r["name"]: r["code"] for r in rdb.rows(db, "SELECT name, code FROM methods")}
        for db in (source, team)
    ]
    shared = codes[0].keys() & codes[1].keys()
    assert any(codes[0][n] != codes[1][n] for n in shared), "the codes must differ to test this"
    ok("db", "copy", str(source), team)
    after = {k: v for k, v in dump(team).items() if k not in theirs}
    assert_same(after, dump(source))


def test_export_from_postgresql(source: Path, team: str) -> None:
    ok("db", "copy", str(source), team)
    sid = next(s["id"] for s in rdb.sessions(source) if s["transport"] == "http")
    exported = [ok("export", sid, "-o", "-", "--db", str(db)) for db in (source, team)]
    assert exported[0] == exported[1] and exported[0]


def test_a_session_copied_while_recording_is_completed_and_team_notes_are_kept(
    tmp_path: Path, team: str
) -> None:
    laptop = tmp_path / "live.db"
    proc = subprocess.Popen(
        [
            *mcptape_cmd(),
            "record",
            "--db",
            str(laptop),
            "--name",
            "live",
            "--",
            PY,
            "-m",
            "mcp_proxy.testing.rawecho",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin and proc.stdout
    try:
        for i in range(1, 4):
            proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
            proc.stdin.flush()
            proc.stdout.readline()
        assert rdb.wait_until(
            lambda: [s for s in rdb.sessions(laptop) if s["frame_count"] == 6], timeout=30
        )
        ok("db", "copy", str(laptop), team)
        sid = rdb.sessions(team)[0]["id"]
        assert rdb.sessions(team)[0]["status"] == "live"
        annotate(team, sid, tag="triaged")  # a teammate tags it in the team's dashboard
        for i in range(4, 6):
            proc.stdin.write(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}\n' % i)
            proc.stdin.flush()
            proc.stdout.readline()
    finally:
        proc.stdin.close()
        proc.wait(60)
    again = ok("db", "copy", str(laptop), team)
    assert "0 session(s) copied, 1 updated" in again
    got = dump(team)[sid]
    want = dump(laptop)[sid]
    assert got["frames"] == want["frames"] and len(got["frames"]) == 10
    # The numbers the recorder process stored when the session ended came along.
    assert got["stats"] == want["stats"] and got["stats"]
    assert got["session"]["status"] == "ended"
    assert [a["tag"] for a in got["annotations"]] == ["triaged"]
    assert ok("db", "copy", str(laptop), team).count("1 already there") == 1


def test_copy_errors_are_one_line(tmp_path: Path, source: Path) -> None:
    same = cli("db", "copy", str(source), "sqlite:///" + str(source))
    assert same.returncode == 2 and b"same database" in same.stderr
    missing = cli("db", "copy", str(tmp_path / "nope.db"), str(tmp_path / "x.db"))
    assert missing.returncode == 2 and b"no database at" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    unknown = cli("db", "copy", str(source), str(tmp_path / "y.db"), "--session", "feedface")
    assert unknown.returncode == 2 and b"no session 'feedface'" in unknown.stderr


def test_the_copied_columns_are_the_schemas() -> None:
    """``db copy`` names the annotation columns itself (its SQL goes to the driver)."""
    from mcp_proxy.store.copy import ANNOTATION_COLUMNS

    assert ANNOTATION_COLUMNS == tuple(c.name for c in annotations.columns if c.name != "id")
