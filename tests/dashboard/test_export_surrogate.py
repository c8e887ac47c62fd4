"""The dashboard's OTLP download of a session with a lone surrogate (issue #22, defect 10).

An error message that says ``"\\ud800"`` in its JSON once made ``export.otlp`` answer 500: the
dashboard calls the same writer as ``mcptape export`` (``recording/otlp.py``), which handed
protobuf a string no UTF-8 holds. The span now says ``\\ud800`` as text.
"""

from __future__ import annotations

import json
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from tests.dashboard.conftest import AUTH, TOKEN
from tests.helpers import db as rdb
from tests.recording.test_surrogates import _imported


async def test_otlp_download_of_a_lone_surrogate_answers(tmp_path: Path) -> None:
    db, sid = _imported(tmp_path, "error-message")
    app = create_app(rdb.url_of(db), token=TOKEN)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        r = await c.get(f"/sessions/{sid}/export.otlp", headers=AUTH)
        body = await r.read()
        assert r.status == 200, body[:300]
    (line,) = body.splitlines()
    spans = [
        span
        for rs in json.loads(line.decode("utf-8"))["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    # the session span, then the exchange's CLIENT and SERVER spans
    assert [s["status"].get("message") for s in spans] == [None, "bad \\ud800", "bad \\ud800"]
