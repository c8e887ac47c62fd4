"""What a person may send instead of a held message: one JSON-RPC message, on one line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.errors import BadValueError
from mcp_proxy.intercept.verdicts import answer_message, edited_message, set_path, strict_json

CALL = b'{"jsonrpc":"2.0","id":"a1","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","n":[1,2]}}}\r\n'
NOTE = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n'


def test_an_edit_is_made_compact_and_checked() -> None:
    edited = edited_message(b'{\n  "jsonrpc": "2.0",\n  "id": 1,\n  "method": "ping"\n}\n')
    assert edited == b'{"jsonrpc":"2.0","id":1,"method":"ping"}'


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"[1, 2]", "must be one JSON-RPC message (a JSON object)"),
        (b'{"id": 1, "method": "ping"}', 'must say "jsonrpc": "2.0"'),
        (b'{"jsonrpc": "2.0", "id": 1}', "needs a method, or exactly one of result and error"),
        (b'{"jsonrpc": "2.0", "id": 1, "result": 1, "error": {}}', "exactly one of result"),
        (b'{"jsonrpc": "2.0", "result": {}}', "a response needs the id of its request"),
        (b'{"jsonrpc": "2.0", "id": 1, "error": {"code": "x"}}', "integer code"),
        (b'{"jsonrpc": "2.0", "method": "x", "params": 3}', "params must be an object"),
        (b"{nope", "is not JSON"),
    ],
)
def test_an_edit_that_is_not_one_message_is_refused(text: bytes, why: str) -> None:
    with pytest.raises(BadValueError, match="edited message") as err:
        edited_message(text)
    assert why in str(err.value) and "\n" not in str(err.value)


def test_an_answer_gets_the_requests_id() -> None:
    done = answer_message(CALL, b'{"error": {"code": -32001, "message": "no"}}')
    assert json.loads(done) == {
        "jsonrpc": "2.0",
        "id": "a1",
        "error": {"code": -32001, "message": "no"},
    }
    whole = answer_message(CALL, b'{"jsonrpc": "2.0", "id": "a1", "result": {"content": []}}')
    assert json.loads(whole)["result"] == {"content": []}


@pytest.mark.parametrize(
    ("original", "answer", "why"),
    [
        (NOTE, b'{"result": {}}', "only a held request can be answered"),
        (CALL, b'{"id": "b2", "result": {}}', 'the answer\'s id "b2" is not the request\'s "a1"'),
        (CALL, b'{"method": "ping"}', "must be a response"),
        (CALL, b"[]", "a JSON object with result or error"),
        (CALL, b"{}", "exactly one of result and error"),
    ],
)
def test_a_bad_answer_is_one_line(original: bytes, answer: bytes, why: str) -> None:
    with pytest.raises(BadValueError) as err:
        answer_message(original, answer)
    assert why in str(err.value)


def test_set_replaces_one_value() -> None:
    assert json.loads(set_path(CALL, "params.arguments.text=bye"))["params"]["arguments"] == {
        "text": "bye",
        "n": [1, 2],
    }
    assert json.loads(set_path(CALL, "params.arguments.n.1=7"))["params"]["arguments"]["n"] == [
        1,
        7,
    ]
    assert json.loads(set_path(CALL, 'params.arguments={"x": null}'))["params"]["arguments"] == {
        "x": None
    }


@pytest.mark.parametrize(
    ("assignment", "why"),
    [
        ("params", "write PATH=VALUE"),
        ("=1", "write PATH=VALUE"),
        ("params.nothing.here=1", "the message has no params.nothing"),
        ("params.arguments.n.9=1", "cannot set params.arguments.n.9"),
        ("jsonrpc=1.0", 'must say "jsonrpc": "2.0"'),
    ],
)
def test_a_bad_set_is_one_line(assignment: str, why: str) -> None:
    with pytest.raises(BadValueError) as err:
        set_path(CALL, assignment)
    assert why in str(err.value)


@given(st.text(max_size=200))
def test_any_value_set_stays_one_line_and_round_trips(value: str) -> None:
    """Whatever a person types (newlines, quotes, non-ASCII) the result is one line whose
    value is what they typed — or that text's JSON when it is JSON."""
    done = set_path(CALL, "params.arguments.text=" + value)
    assert b"\n" not in done and b"\r" not in done
    got = json.loads(done)["params"]["arguments"]["text"]
    try:
        expected = strict_json(value)
    except (ValueError, RecursionError):
        expected = value
    assert got == expected
