"""A task session on the dashboard: the exchange page and its twin show the lifecycle and the
task's duration beside the handle's latency, the timeline links each poll to its task, the
waterfall's bar covers the task's whole life."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from aiohttp.test_utils import TestClient, TestServer

from dashboard.app import create_app
from tests.analysis.task_wires import legacy
from tests.dashboard.conftest import TOKEN, get_html, get_json

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def task_client(db_url: str) -> AsyncIterator[tuple[TestClient, str]]:
    sid = legacy(["working", "working", "completed"], poll_ms=300).record(db_url, name="task")
    app = create_app(db_url, token=TOKEN, poll_interval=0.05)
    async with TestClient(TestServer(app, host="127.0.0.1")) as c:
        yield c, sid


async def test_exchange_page_timeline_and_waterfall_show_the_task(
    task_client: tuple[TestClient, str],
) -> None:
    client, sid = task_client
    timeline = (await get_json(client, f"/sessions/{sid}.json"))["timeline"]
    call = next(r for r in timeline if r["method"] == "tools/call" and r["kind"] == "request")
    task = call["exchange"]["task"]
    assert task["status"] == "completed" and task["polls"] == 3
    assert task["lifecycle_text"] == "created → working → completed"
    assert task["duration_ms"] > 800 > call["exchange"]["latency_ms"]
    # The plain polls fold into the call's row (as show -x folds them); every=1 lists them.
    assert call["polls"] == 3
    assert not [r for r in timeline if r["method"] == "tasks/get"]
    every = (await get_json(client, f"/sessions/{sid}.json?every=1"))["timeline"]
    polls = [r for r in every if r["method"] == "tasks/get" and r["kind"] == "request"]
    assert [p["exchange"]["task_of"] for p in polls] == [call["seq"]] * 3

    twin = await get_json(client, f"/sessions/{sid}/exchanges/{call['seq']}.json")
    assert twin["exchange"]["task"]["ended_seq"] == task["ended_seq"]
    html = await get_html(client, f"/sessions/{sid}/exchanges/{call['seq']}")
    assert "Task <code>t-1</code>" in html and "3 polls" in html
    assert re.search(r"task\s+took", html)
    poll_html = await get_html(client, f"/sessions/{sid}/exchanges/{polls[0]['seq']}")
    assert f'about the task created by <a href="/sessions/{sid}/exchanges/{call["seq"]}"' in (
        poll_html
    )
    rows = await get_html(client, f"/sessions/{sid}")
    assert "task · created → working → completed" in rows and "+3 polls" in rows

    water = await get_json(client, f"/sessions/{sid}/waterfall.json")
    bars = {b["seq"]: b for b in water["bars"]}
    bar = bars[call["seq"]]
    assert bar["task_ms"] == task["duration_ms"]
    last_poll = bars[polls[-1]["seq"]]
    assert bar["x"] + bar["w"] >= last_poll["x"]  # the task's bar reaches its last poll

    stats = await get_json(client, f"/sessions/{sid}/stats.json")
    row = next(r for r in stats["methods"] if r["method"] == "tools/call")
    assert row["task_ms"]["max"] == task["duration_ms"] > row["latency_ms"]["max"]
    assert "↳ task duration" in await get_html(client, f"/sessions/{sid}/stats")
