"""Export and import of rows, on both dialects.

``export`` streams JSON Lines straight from ``frame_rows`` (``stream_jsonl``) and ``import``
writes rows a page at a time; these tests hold the export to what the sessions read into the
model export (the same writer, fed from another reader), and the import to the file's rows, on
every committed recording plus frames chosen to hit every branch of the frame line: base64
bytes, a cut-short frame, HTTP exchanges, SSE ids, JSON-RPC errors, values the database had to
make storable, control characters and non-ASCII text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_proxy.recording.database import import_recording, read_sessions, stream_jsonl
from mcp_proxy.recording.jsonl import dumps_jsonl, loads_recording
from mcp_proxy.redact import Redactor
from tests.recording.conftest import GOLDEN, RECORDINGS, jsonl_with_frames

ODD = [
    {"text": '{"jsonrpc":"2.0","id":"\\ud800","method":"x\\udfff"}\n'},
    {"dir": "s2c", "text": '{"jsonrpc":"2.0","id":1,"error":{"code":BIG,"message":"m"}}\n'},
    {"text": '{"jsonrpc":"2.0","id":"%s","method":"long"}\n' % ("i" * 400)},
    {"base64": "//4gbm90IHV0Zi04Cg=="},
    {"text": 'caf\u00e9 \u2028 \x01\x1f "q" \\ \U0001f600 \x7f\n'},
    {"dir": "s2c", "channel": "stderr", "text": "plain stderr line\n"},
    {"text": ""},
    {"text": '{"jsonrpc":"2.0","method":"' + "m" * 250 + '"}\n'},
    {"dir": "s2c", "text": '{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"no"}}\n'},
    {"dir": "s2c", "channel": "sse", "text": '{"jsonrpc":"2.0","method":"notifications/x"}'},
    {"text": '{"jsonrpc":"2.0","id":8,"method":"cut'},
]
ODD[1]["text"] = ODD[1]["text"].replace("BIG", str(2**70))
#: Fields the helper does not set, added to the last frames (by their index in ``ODD``).
MORE = {9: {"sse_id": "ev-\u00e9 1", "sse_event": "message"}, 10: {"complete": False}}


def _odd_file(path: Path) -> Path:
    lines = jsonl_with_frames(RECORDINGS / "basic-legacy.mcptape.jsonl", ODD).split(b"\n")
    frames = [i for i, line in enumerate(lines) if line.startswith(b'{"type":"frame"')]
    for index, fields in MORE.items():
        at = frames[len(frames) - len(ODD) + index]
        rec = json.loads(lines[at])
        rec.update(fields)
        lines[at] = json.dumps(rec, separators=(",", ":"), ensure_ascii=False).encode()
    path.write_bytes(b"\n".join(lines))
    return path


def _sources(tmp: Path) -> list[Path]:
    odd = _odd_file(tmp / "odd.mcptape.jsonl")
    return [*sorted(RECORDINGS.glob("*.mcptape.jsonl")), GOLDEN / "v2-http.jsonl", odd]


@pytest.fixture(scope="module")
def imported(
    module_any_db_url: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[str]]:
    """Every source imported once (redaction off: the bytes as in the files); the new ids."""
    url = module_any_db_url
    ids: list[str] = []
    for path in _sources(tmp_path_factory.mktemp("src")):
        rec = loads_recording(path.read_bytes(), path.name)
        result = import_recording(rec, url, redactor=Redactor(enabled=False))
        ids += [new for _old, new in result.sessions]
    return url, ids


def test_streamed_export_is_the_model_export_byte_for_byte(
    imported: tuple[str, list[str]],
) -> None:
    url, ids = imported
    assert len(ids) >= 6
    for sid in ids:
        streamed = b"".join(stream_jsonl(url, [sid]))
        assert streamed == dumps_jsonl(read_sessions(url, [sid])), sid
    # Several sessions in one file: one header, one end record with the totals.
    both = b"".join(stream_jsonl(url, ids))
    assert both == dumps_jsonl(read_sessions(url, ids))
    assert both.count(b'"type":"end"') == 1


def test_streamed_export_reads_back_with_every_odd_frame(imported: tuple[str, list[str]]) -> None:
    url, ids = imported
    back = loads_recording(b"".join(stream_jsonl(url, [ids[-1]])), "back").one()
    tail = back.frames[-len(ODD) :]
    assert tail[3]["raw"] == b"\xff\xfe not utf-8\n"
    assert tail[4]["raw"] == ODD[4]["text"].encode()
    assert tail[5]["channel"] == "stderr" and tail[6]["raw"] == b""
    # From the bytes, whatever the file says: the column could not hold a code past 64 bits.
    assert tail[1]["error_code"] == 2**70 and tail[2]["method"] == "long"
    assert tail[7]["method"] == "m" * 250  # recomputed from the bytes: the column held 200
    assert tail[8]["error_code"] == -32601 and tail[8]["kind"] == "error"
    assert (tail[9]["sse_id"], tail[9]["sse_event"]) == ("ev-\u00e9 1", "message")
    assert tail[10]["complete"] is False and tail[9]["complete"] is True


SECRET = "hunter2-do-not-store"
SECRETS = [
    {"text": '{"jsonrpc":"2.0","id":5,"method":"login","params":{"password":"SECRET"}}\n'},
    {"dir": "s2c", "channel": "stderr", "text": "retrying with Bearer SECRET\n"},
]
for _f in SECRETS:
    _f["text"] = _f["text"].replace("SECRET", SECRET)


def _stored(url: str, sid: str) -> list[tuple[object, ...]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    text(
                        "SELECT f.seq, f.ts, f.mono_ns, f.direction, f.channel, f.kind, f.method,"
                        " f.msg_id, f.error_code, f.size, f.complete, f.partial_parse, f.raw,"
                        " f.sse_id, f.sse_event, f.redacted,"
                        " (SELECT COUNT(*) FROM http_exchanges AS x WHERE x.session_id = :sid"
                        "  AND x.id <= f.http_exchange_id)"
                        " FROM frames AS f WHERE f.session_id = :sid ORDER BY f.seq"
                    ),
                    {"sid": sid},
                )
            ]
    finally:
        engine.dispose()


def test_an_import_redacts_a_page_at_a_time_and_marks_what_it_changed(
    imported: tuple[str, list[str]], tmp_path: Path
) -> None:
    """``import_file`` with redaction on (the default policy): the rows of the file, secrets
    gone and those frames marked ``redacted``; a HAR file goes through the same row import."""
    from mcp_proxy.recording.database import import_file

    url, _ids = imported
    src = _odd_file(tmp_path / "odd.mcptape.jsonl")
    secret = tmp_path / "secret.mcptape.jsonl"
    secret.write_bytes(jsonl_with_frames(src, SECRETS))
    marked = []
    for path in (secret, GOLDEN / "v2-http.jsonl"):
        _rec, done = import_file(path, url, redactor=Redactor())
        model = loads_recording(path.read_bytes(), str(path))
        assert done.counts == [len(s.frames) for s in model.sessions]
        for (_a, new_id), s in zip(done.sessions, model.sessions, strict=True):
            rows = _stored(url, new_id)
            assert [r[0] for r in rows] == [f["seq"] for f in s.frames]
            assert all(SECRET.encode() not in bytes(r[12]) for r in rows)
            kept = [r[12] for r in rows if not r[15]]
            assert kept == [f["raw"] for f in s.frames if SECRET.encode() not in f["raw"]]
            marked += [r[0] for r in rows if r[15]]
    assert len(marked) == len(SECRETS)


@pytest.mark.parametrize("columns", [None, ("shape", "raw", "msg_id")])
def test_the_one_frame_stream_pages_every_frame_in_order(
    imported: tuple[str, list[str]], columns: tuple[str, ...] | None
) -> None:
    """``shaped_pages`` (``show``, ``export``, the analysis, ``read_session``): on SQLite the
    driver, on PostgreSQL keyset pages from the driver's cursor; every frame once, in ``seq``
    order, the columns asked for (``seq`` not among them: still paged by it), pages of at most
    ``batch``; the whole row's shape decoded (``mcp_proxy.store.stream.named_rows``) into the view's strings."""
    from mcp_proxy.store.stream import SHAPED_FRAME_COLUMNS, named_rows, shaped_pages

    url, ids = imported
    sid = ids[-1]
    want = _stored(url, sid)
    shapes, batches = shaped_pages(url, sid, columns or SHAPED_FRAME_COLUMNS, batch=4)
    pages = list(batches)
    assert all(0 < len(p) <= 4 for p in pages)
    if columns is None:
        got = [r for p in pages for r in named_rows(shapes, p)]
        assert [r[:12] for r in got] == [w[:12] for w in want]
        assert [bytes(r[12]) for r in got] == [bytes(w[12]) for w in want]
    else:
        got = [r for p in pages for r in p]
        assert [(shapes(r[0])[2], bytes(r[1]), r[2]) for r in got] == [
            (w[5], bytes(w[12]), w[7]) for w in want
        ]


def test_show_and_export_name_every_method_of_a_session_of_many(
    any_db_url: str, tmp_path: Path
) -> None:
    """``show`` and ``export`` read frames as stored, direction/channel/kind/method folded into
    one integer (``store.stream.shaped_pages``): a method code past 126 times 2**24 would not fit
    PostgreSQL's 32-bit arithmetic. 300 methods: each frame printed and exported with its own."""
    from tests.recording.conftest import run_cli

    methods = [f"tools/m{i}" for i in range(300)]
    extra = [{"text": json.dumps({"jsonrpc": "2.0", "method": m}) + "\n"} for m in methods]
    src = tmp_path / "many.mcptape.jsonl"
    src.write_bytes(jsonl_with_frames(RECORDINGS / "basic-legacy.mcptape.jsonl", extra))
    done = run_cli("import", str(src), "--db", any_db_url)
    assert done.returncode == 0, done.stderr
    shown = run_cli("show", "basic-legacy", "--db", any_db_url, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    printed = [json.loads(line)["method"] for line in shown.stdout.splitlines()]
    assert printed[-300:] == methods
    text = run_cli("show", "basic-legacy", "--db", any_db_url, "--no-body").stdout
    assert [line.split()[-3] for line in text.splitlines() if "tools/m" in line] == methods
    out = tmp_path / "back.mcptape.jsonl"
    exported = run_cli("export", "basic-legacy", "--db", any_db_url, "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    back = [
        rec.get("method") for rec in map(json.loads, out.read_text().splitlines())
        if rec.get("type") == "frame"
    ]  # fmt: skip
    assert back[-300:] == methods
