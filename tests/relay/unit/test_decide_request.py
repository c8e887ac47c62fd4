"""The one request decision both front ends share (``relay/http/response.py``:
``decide_request``; the reverse relay's ``HTTPRelay`` and the lean engine's ``Verdicts`` pass
their own answer and reset): every verdict on a request body, whole or streamed — what goes
upstream (the head's ``Content-Length`` made to fit a replacement) or what the host gets."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_proxy.relay.http.forward import build_request_head
from mcp_proxy.relay.http.front import RelayResponse
from mcp_proxy.relay.http.hooks import Act, HookExchange, Verdict
from mcp_proxy.relay.http.response import decide_request

pytestmark = pytest.mark.timeout(20)

CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}'
EDITED = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"longer name"}}'


class Hooks:
    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.seen: list[tuple[bytes, bytes]] = []

    async def request_body(self, ex: HookExchange, head: bytes, body: bytes) -> Verdict:
        self.seen.append((head, body))
        return self.verdict


class Ends:
    """The front end's part: its answer and its reset, noted."""

    def __init__(self) -> None:
        self.answered: list[Verdict] = []
        self.resets: list[str] = []

    def answer(self, v: Verdict) -> RelayResponse:
        self.answered.append(v)
        return RelayResponse(status=v.status, body=v.data or b"")

    def reset(self, why: str) -> None:
        self.resets.append(why)


def head(length: int | None) -> Any:
    pairs = [(b"Host", b"up.test"), (b"Content-Type", b"application/json")]
    if length is not None:
        pairs.append((b"Content-Length", str(length).encode()))
    return build_request_head("POST", "/mcp", pairs, b"up.test", body_exists=True)


async def decide(v: Verdict, body: bytes | None) -> tuple[Any, Ends, Hooks]:
    hooks, ends = Hooks(v), Ends()
    rh = head(len(body) if body is not None else None)
    got = await decide_request(hooks, None, rh, body, ends.answer, ends.reset)  # type: ignore[arg-type]
    return got, ends, hooks


async def test_a_pass_sends_the_body_and_head_as_they_came() -> None:
    got, ends, hooks = await decide(Verdict(Act.PASS), CALL)
    rh, out = got
    assert out is CALL and b"Content-Length: %d\r\n" % len(CALL) in rh.head
    assert hooks.seen == [(rh.head, CALL)] and not ends.answered and not ends.resets


async def test_a_replacement_goes_with_its_own_length() -> None:
    got, _, _ = await decide(Verdict(Act.REPLACE, data=EDITED), CALL)
    rh, out = got
    assert out == EDITED and b"Content-Length: %d\r\n" % len(EDITED) in rh.head
    assert b"Content-Length: %d\r\n" % len(CALL) not in rh.head


async def test_an_answer_is_the_front_ends_and_nothing_goes_upstream() -> None:
    v = Verdict(Act.ANSWER, data=b'{"jsonrpc":"2.0","id":1,"result":{}}', status=200)
    got, ends, _ = await decide(v, CALL)
    assert isinstance(got, RelayResponse) and got.status == 200 and ends.answered == [v]


@pytest.mark.parametrize("act", [Act.RESET, Act.END])
async def test_a_reset_is_the_front_ends_and_the_host_gets_nothing_more(act: Act) -> None:
    got, ends, _ = await decide(Verdict(act, why="request"), CALL)
    assert isinstance(got, RelayResponse) and ends.resets == ["request"]


async def test_a_streamed_body_is_only_delayed() -> None:
    got, _, hooks = await decide(Verdict(Act.DELAY, seconds=0.0), None)
    rh, out = got
    assert out is None and hooks.seen == [(rh.head, b"")]


async def test_a_drop_withholds_the_request_until_the_host_gives_up() -> None:
    task = asyncio.create_task(decide(Verdict(Act.DROP), CALL))
    done, _ = await asyncio.wait({task}, timeout=0.05)  # it must still be waiting
    assert not done
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
