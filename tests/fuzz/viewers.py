"""Every viewer over one recorded session: the real CLI and every dashboard page and ``.json``.

What was recorded must always be viewable: each helper returns the problems it saw (a
traceback, a 5xx, an exit status that is not the command's documented one, JSON that does not
parse, a round trip that changed bytes) as readable lines naming the command or URL, so that a
failing fuzz example says exactly what broke.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from tests.helpers import db as rdb
from tests.helpers.cli import run_mcptape

TOKEN = "fuzz-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _cli(args: list[str], ok: tuple[int, ...] = (0,)) -> tuple[list[str], str]:
    """``mcptape ARGS`` in-process through the real entry point (tests/helpers/cli.py), not a
    Python start-up each (``import`` of the exported file too: a database of its own); the relay
    that recorded the hostile bytes is the process under test."""
    done = run_mcptape(*args)
    out, err = done.stdout, done.stderr
    problems = []
    if "Traceback" in err or "Traceback" in out:
        problems.append(f"mcptape {' '.join(args)}: traceback\n{err[-1500:]}")
    elif done.returncode not in ok:
        problems.append(f"mcptape {' '.join(args)}: exit {done.returncode}: {err[-500:]}")
    return problems, out


def cli_read_problems(db: Path, sid: str, tmp: Path) -> list[str]:
    """show, show --format json, check, stats."""
    base = ["--db", str(db)]
    problems: list[str] = []
    p, _ = _cli(["show", sid, *base])
    problems += p
    p, out = _cli(["show", sid, "--format", "json", *base])
    problems += p
    if not p:
        problems += _json_problems("show --format json", out)
    for args in (["check", sid, "--fail-on", "never"], ["stats", sid]):
        p, _ = _cli([*args, *base])
        problems += p
    return problems


def cli_move_problems(db: Path, sid: str, tmp: Path) -> list[str]:
    """export → import (bytes kept), diff against the export."""
    base = ["--db", str(db)]
    problems: list[str] = []
    exported = tmp / "fuzz-export.jsonl"
    p, _ = _cli(["export", sid, "-o", str(exported), *base])
    problems += p
    if p:
        return problems
    db2 = tmp / "fuzz-imported.db"
    p, _ = _cli(["import", str(exported), "--db", str(db2)])
    problems += p
    if not p:
        problems += _round_trip_problems(db, sid, db2)
    p, _ = _cli(["diff", sid, str(exported), *base], ok=(0, 1))
    problems += p
    return problems


def move_and_page_problems(db: Path, sid: str, tmp: Path) -> list[str]:
    """:func:`cli_move_problems`, then every dashboard page (:func:`dashboard_problems`)."""
    return cli_move_problems(db, sid, tmp) + asyncio.run(dashboard_problems(db, sid))


def every_viewer_problems(db: Path, sid: str, tmp: Path) -> list[str]:
    """:func:`cli_read_problems`, :func:`cli_move_problems` and :func:`dashboard_problems`."""
    return cli_read_problems(db, sid, tmp) + move_and_page_problems(db, sid, tmp)


#: The viewers of a recorded session, one share: the reading commands run in-process
#: (``IN_PROCESS``), so the two shares the fuzz tests had (one per worker, each relaying the
#: example again) saved nothing any more; the default run relays only the explicit example of
#: every hostile kind, ``--full`` the generated corpus too (``tests/conftest.py``
#: ``corpus_phases``).
VIEWERS: dict[str, Callable[[Path, str, Path], list[str]]] = {
    "cli-and-pages": every_viewer_problems,
}


def _json_problems(what: str, out: str) -> list[str]:
    try:
        json.loads(out)
    except ValueError:
        for n, line in enumerate(out.splitlines(), 1):
            try:
                json.loads(line)
            except ValueError as exc:
                return [f"{what}: line {n} is not JSON ({exc}): {line[:200]!r}"]
    return []


def _round_trip_problems(db: Path, sid: str, db2: Path) -> list[str]:
    [imported] = rdb.sessions(db2)
    a = [(f["direction"], f["channel"], bytes(f["raw"] or b"")) for f in rdb.frames(db, sid)]
    b = [
        (f["direction"], f["channel"], bytes(f["raw"] or b""))
        for f in rdb.frames(db2, imported["id"])
    ]
    if a == b:
        return []
    first = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )
    return [
        f"export → import changed the frames: {len(a)} vs {len(b)}, first difference at"
        f" #{first + 1}: {a[first] if first < len(a) else None!r:.200} vs"
        f" {b[first] if first < len(b) else None!r:.200}"
    ]


async def dashboard_problems(db: Path, sid: str) -> list[str]:
    """Every page of the session, its ``.json`` twin, and the pages that list it: no 5xx."""
    frames = rdb.frames(db, sid)
    hids = {f["http_exchange_id"] for f in frames if f["http_exchange_id"] is not None}
    paths = ["/", "/sessions", "/sessions.json", "/stats", "/stats.json"]
    base = f"/sessions/{sid}"
    paths += [base, base + ".json", base + "/stats", base + "/stats.json"]
    paths += [f"{base}?q=ping", f"{base}.json?kind=invalid"]
    for f in frames:
        seq = f["seq"]
        paths += [f"{base}/frames/{seq}", f"{base}/frames/{seq}.json", f"{base}/frames/{seq}/raw"]
        if f["kind"] == "request":
            paths += [f"{base}/exchanges/{seq}", f"{base}/exchanges/{seq}.json"]
    for hid in sorted(hids):
        paths += [f"{base}/http/{hid}", f"{base}/http/{hid}.json"]
    paths += [f"/diff?a={sid}&b={sid}", f"/diff.json?a={sid}&b={sid}"]
    problems: list[str] = []
    app = create_app("sqlite:///" + str(db), token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as client:
        for path in paths:
            r = await client.get(path, headers=AUTH)
            body = await r.text(errors="replace")
            if r.status >= 500 or "Traceback" in body:
                problems.append(f"GET {path}: {r.status} {body[:300]!r}")
            elif path.split("?")[0].endswith(".json") and r.status == 200:
                problems += _json_problems(f"GET {path}", body)
        r = await client.post(f"{base}/analyse.json", headers=AUTH)
        if r.status >= 500:
            problems.append(f"POST {base}/analyse.json: {r.status}")
    return problems


def recording_problems(db: Path, sid: str, direction: str, sent: bytes, **kw: Any) -> list[str]:
    """Every byte sent is in the recording, or the loss is counted with a finding."""
    got = rdb.stream(db, sid, direction, **kw)
    if got == sent:
        return []
    [s] = [s for s in rdb.sessions(db) if s["id"] == sid]
    gaps = rdb.rows(
        db, "SELECT * FROM findings WHERE session_id = ? AND code = 'recorder.gap'", sid
    )
    if (s.get("gap_count") or 0) > 0 and gaps:
        return []
    return [
        f"{direction}: recorded {len(got)} of {len(sent)} bytes, gap_count"
        f" {s.get('gap_count')}, {len(gaps)} gap finding(s); first difference at byte"
        f" {next((i for i, (x, y) in enumerate(zip(got, sent, strict=False)) if x != y), min(len(got), len(sent)))}"
    ]
