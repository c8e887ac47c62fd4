"""``stats`` and ``check`` count the same exchanges, and ``stats`` holds only what is pending.

Both are consumers of the one pairing (:class:`mcp_proxy.analysis.exchanges.Pairing`):
``check`` keeps every exchange for its checks; the settle's one pass over a stored session keeps
none: its :class:`~mcp_proxy.analysis.stats.MethodTable` counts each exchange once its outcome is
known, and the pass forgets it. What each shows the
user must agree: the per-method numbers of ``stats`` are those of ``check``'s exchanges, on
every session of the finding catalogue (MRTR chains, batches and injected frames included) and
on busy sessions of both eras and every ending.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from mcp_proxy.analysis import service
from mcp_proxy.analysis.exchanges import Pairing
from mcp_proxy.analysis.facts import Decoder
from mcp_proxy.analysis.model import SessionFacts
from mcp_proxy.analysis.stats import sorted_stats
from mcp_proxy.limits import REORDER_LOOKAHEAD
from mcp_proxy.store.queries import Store
from mcp_proxy.testing.factories import Wire, envelope
from tests.analysis.cases import CASES
from tests.analysis.streamed import method_stats, pass_stats
from tests.conftest import catalogue_sample

#: The store-backed test runs on SQLite (frame_rows as stored) and PostgreSQL (the view's rows).
pytestmark = [pytest.mark.both_dialects, pytest.mark.corpus]


def _table(stats: dict[Any, Any]) -> list[dict[str, Any]]:
    return [s.as_dict() for s in sorted_stats(stats)]


def _both(w: Wire, *, by_name: bool) -> tuple[Any, Any]:
    """(``check``'s exchanges counted, ``stats``'s streaming pass) tables."""
    whole = _table(method_stats(w.analyze().exchanges, by_name=by_name))
    return whole, _table(pass_stats(w, by_name=by_name))


SHAPES = [(code, i) for code in catalogue_sample(sorted(CASES)) for i in (0, 1)]


@pytest.mark.parametrize(("code", "which"), SHAPES)
def test_every_catalogue_session_gives_the_same_numbers(code: str, which: int) -> None:
    w = CASES[code][which]()
    for by_name in (False, True):
        whole, quick = _both(w, by_name=by_name)
        assert quick == whole, code


def _busy(modern: bool, *, status: str = "ended", exit_code: int | None = 0) -> Wire:
    """Errors, tool errors, cancellations, progress, logs, stderr and unanswered requests."""
    w = Wire.modern() if modern else Wire()
    if not modern:
        w.handshake()
    for i in range(2, 60):
        meta = envelope(log_level="info") if modern else {}
        meta["progressToken"] = i
        name = f"tool{i % 3}"
        w.request("tools/call", i, {"name": name, "arguments": {"q": i}, "_meta": meta})
        w.progress(i, 1, 2, direction="s2c")
        w.log(f"working on {i}", level="info")
        if i % 7 == 0:
            w.error(i, -32602, "Unknown tool")
        elif i % 13 == 0:
            w.notify("notifications/cancelled", {"requestId": i, "reason": "user"})
        elif i % 17 == 0:
            pass  # never answered
        elif i % 19 == 0:
            w.wait(120)
            w.result(i, {"content": [], "isError": True})
        else:
            w.result(i, {"content": [{"type": "text", "text": "caf\u00e9 \\u0041"}],
                         "isError": i % 5 == 0})  # fmt: skip
        if i % 3 == 0:
            w.stderr(f"line {i}")
        if i % 11 == 0:
            w.request("resources/read", 1000 + i, {"uri": f"file:///{i}"})
            w.result(1000 + i, {"contents": []})
    w.request("ping", 999, {})
    return w.end(status, exit_code=exit_code)


@pytest.mark.parametrize("modern", [False, True])
@pytest.mark.parametrize(
    ("status", "exit_code"), [("ended", 0), ("crashed", 1), ("ended", 143), ("live", None)]
)
def test_busy_sessions_both_eras_and_every_ending(
    modern: bool, status: str, exit_code: int | None
) -> None:
    w = _busy(modern, status=status, exit_code=exit_code)
    for by_name in (False, True):
        whole, quick = _both(w, by_name=by_name)
        assert quick == whole
    outcomes = {k for row in whole for k in ("errors", "tool_errors", "cancelled") if row[k]}
    assert outcomes == {"errors", "tool_errors", "cancelled"}


def test_an_answer_stamped_before_its_request_pairs_within_the_window() -> None:
    w = Wire()
    w.handshake()
    w.result(7, {"content": []})  # stamped a little before the request it answers
    w.request("tools/call", 7, {"name": "t"})
    w.result(8, {"content": []})
    w.wait(200)  # past the window: an unknown answer
    w.request("tools/call", 8, {"name": "t"})
    w.end()
    whole, quick = _both(w, by_name=False)
    assert quick == whole
    call = next(r for r in whole if r["method"] == "tools/call")
    assert (call["ok"], call["unanswered"]) == (1, 1)


def test_stats_holds_only_the_pending_requests_and_the_look_ahead() -> None:
    """A long session through the pairing without ``keep``: no exchange list, the look-ahead
    buffer bounded, a request answered far later still paired, the unanswered one counted."""
    w = Wire()
    w.handshake()
    w.request("tools/call", 1, {"name": "slow"})
    n = 3 * REORDER_LOOKAHEAD
    for i in range(2, n):
        w.request("ping", i, {})
        w.result(i, {})
    w.result(1, {"content": []})
    w.request("ping", n, {})
    w.end()
    seen: list[int] = []
    facts = SessionFacts(status="ended")
    p = Pairing(facts, keep=False, on_final=lambda ex: seen.append(ex.index))
    peak = 0
    decoder = Decoder(p.feed)
    for f in w.frames:
        decoder.feed_frames([f])
        peak = max(peak, len(p.w.buf), sum(len(v) for v in p.pending.values()))
    paired = p.finish()
    assert paired.exchanges == [] and paired.count == len(seen) == len(set(seen)) == n + 1
    assert peak <= REORDER_LOOKAHEAD + 1100  # the look-ahead and a trimming step, not n
    assert p.done == {} and p.by_http == {}
    whole, quick = _both(w, by_name=False)
    assert quick == whole
    calls = {r["method"]: r for r in quick}
    assert calls["tools/call"]["ok"] == 1 and calls["ping"]["unanswered"] == 1


async def test_service_stats_match_the_full_analysis_on_recorded_sessions(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real recorder and store, in small batches, HTTP and stdio, both eras."""
    monkeypatch.setattr(service, "LOAD_BATCH", 7)
    wires = [
        _busy(False),
        _busy(True, status="crashed", exit_code=1),
        CASES["transport.host_disconnected"][0](),
        CASES["exchange.cancelled"][0](),
        CASES["mrtr.chain_incomplete"][0](),
    ]
    sids = [w.record(db_url, name=f"s{i}") for i, w in enumerate(wires)]
    store = await Store.open(db_url)
    try:
        sessions = [await store.get_session(sid) for sid in sids]
        for by_name in (False, True):
            got = await service.sessions_stats(store, sessions, by_name=by_name)
            parts = []
            for s in sessions:
                a = await service.session_analysis(store, s)
                parts.append(method_stats(a.exchanges, by_name=by_name))
            want = service.sorted_stats(service.merge_stats(parts))
            assert json.dumps([s.as_dict() for s in got]) == json.dumps([s.as_dict() for s in want])
            assert not any(math.isnan(s.error_rate) for s in got)
    finally:
        await store.close()


def _json_way(raw: bytes) -> Any:
    """What parse_json_bytes returned before orjson: json's value, or None."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


TRICKY = [
    b"\xef\xbb\xbf{}",
    b'{"a":1e400,"b":-1e400,"c":1e-400}',
    b'{"a":NaN,"b":Infinity}',
    b'{"a":"\\ud800","b":"\\udfff\\ud800"}',
    b'{"a":01}',
    b"{} x",
    b"{}\n",
    b" {}",
    b"{}\r\n",
    b'{"a":12345678901234567890123,"b":-9223372036854775809,"c":18446744073709551616}',
    b'{"a":1,"a":2,"b":3}',
    b"[1.5, -0.0, 1E+2, 0.1, 5e-324, 1.7976931348623157e308]",
    b'{"a":"\x01"}',
    b'{"\\u00e9":"x","\\u0000":"\\u001f"}',
    b"[" * 1100 + b"]" * 1100,
    b"[" * 1000 + b"]" * 1000,
    b'{"a":"\xff"}',
    b'{"a":tru}',
    b"[1,]",
    b'{"a":1}{"b":2}',
    b'{"a":"caf\xc3\xa9 \xe2\x80\xa8"}',
]


@pytest.mark.parametrize("raw", TRICKY, ids=range(len(TRICKY)))
def test_body_parser_gives_what_json_gives(raw: bytes) -> None:
    from mcp_proxy.analysis.model import parse_json_bytes

    got, want = parse_json_bytes(raw), _json_way(raw)
    assert repr(got) == repr(want)  # repr: NaN equals itself, -0.0 differs from 0.0


def test_body_parser_on_random_json() -> None:
    from mcp_proxy.analysis.model import parse_json_bytes
    from tests.test_render import _random_value

    rng = __import__("random").Random(7)
    for _ in range(3000):
        raw = json.dumps(_random_value(rng), ensure_ascii=rng.random() < 0.5).encode()
        assert repr(parse_json_bytes(raw)) == repr(_json_way(raw)), raw
