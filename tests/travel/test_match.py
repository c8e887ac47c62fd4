"""Pure logic without sockets: JSONPath ignores, alignment, mock matching and repeats."""

from __future__ import annotations

import pytest

from mcp_proxy.diff import Step, diff_steps
from mcp_proxy.mock import METHOD_NOT_FOUND, MISS_CODE, Entry, Miss, MockIndex
from mcp_proxy.normalize import JsonPathError, Normalizer, parse_jsonpath
from mcp_proxy.recording.registry import read_recording
from tests.travel.conftest import RECORDINGS


def test_default_normaliser_drops_meta_and_tokens_and_masks_request_state() -> None:
    doc = {
        "params": {"_meta": {"progressToken": 3}, "requestState": "sealed-1", "x": [{"_meta": 1}]},
        "notifications": [{"params": {"progressToken": 9, "progress": 1}}],
    }
    assert Normalizer.build()(doc) == {
        "params": {"requestState": "<opaque>", "x": [{}]},
        "notifications": [{"params": {"progress": 1}}],
    }
    assert Normalizer.build(["$.params.x[0]", "$..progress"])(doc)["params"] == {
        "requestState": "<opaque>",
        "x": [],
    }


@pytest.mark.parametrize("bad", ["params.x", "$", "$.a[", "$..", "$[?@.a ==]"])
def test_unreadable_jsonpaths_are_refused(bad: str) -> None:
    with pytest.raises(JsonPathError):
        parse_jsonpath(bad)


def test_filters_and_slices_name_what_to_leave_out() -> None:
    """RFC 9535 JSONPath (python-jsonpath): filters and slices, not only names and indexes."""
    doc = {
        "result": {
            "content": [
                {"type": "text", "text": "a"},
                {"type": "image", "data": "…", "mimeType": "image/png"},
                {"type": "text", "text": "b"},
            ]
        }
    }
    images = Normalizer.build(["$.result.content[?@.type == 'image']"], defaults=False)
    assert images(doc)["result"]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    firsts = Normalizer.build(["$.result.content[0:2]"], defaults=False)
    assert firsts(doc)["result"]["content"] == [{"type": "text", "text": "b"}]
    assert doc["result"]["content"][0] == {"type": "text", "text": "a"}  # the input is not changed


def _step(method: str, params: object, result: object = None) -> Step:
    return Step("c2s", method, params, "result", result=result, seqs=[1])


def test_alignment_reports_inserted_removed_and_changed_steps() -> None:
    a = [_step("tools/list", {}), _step("tools/call", {"name": "x"}, 1), _step("ping", None)]
    b = [_step("tools/list", {}), _step("prompts/list", {}), _step("tools/call", {"name": "x"}, 2)]
    result = diff_steps(a, b)
    assert [p.status for p in result.pairs] == ["same", "only_b", "changed", "only_a"]
    assert result.pairs[2].changes[0].path == "$.result"
    assert not result.equal and diff_steps(a, a).equal


def test_mock_index_matches_canonically_and_repeats_the_last() -> None:
    rec = read_recording(RECORDINGS / "basic-legacy.mcptape.jsonl").one()
    index = MockIndex([rec])
    hit = index.lookup(
        "tools/call",
        {"arguments": {"text": "hello, wire"}, "name": "echo", "_meta": {"progressToken": 5}},
    )
    assert isinstance(hit, Entry) and hit.uses == 1
    again = index.lookup("tools/call", {"name": "echo", "arguments": {"text": "hello, wire"}})
    assert again is hit and hit.uses == 2  # the last recorded answer repeats
    assert isinstance(index.lookup("initialize", {"clientInfo": {"name": "other"}}), Entry)
    strict = MockIndex([rec], repeat_last=False)
    strict.lookup("tools/call", {"name": "echo", "arguments": {"text": "hello, wire"}})
    used_up = strict.lookup("tools/call", {"name": "echo", "arguments": {"text": "hello, wire"}})
    assert isinstance(used_up, Miss) and used_up.exhausted
    assert used_up.error()["code"] == MISS_CODE and "already used" in used_up.error()["message"]
    unknown = index.lookup("server/discover", {})
    assert isinstance(unknown, Miss) and unknown.error()["code"] == METHOD_NOT_FOUND
