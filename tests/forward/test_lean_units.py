"""Pieces of the lean engine tested without a proxy process.

The client guard (mitmproxy's ``block_global``/``block_private`` rules: a connection is judged
by its peer address alone, and no socket can come from a global address on this machine), the
bounded certificate cache, the guard around the tape's chunk copier, and the engine's side of the
shared streaming copy (``TapeSide``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcp_proxy.forward import contexts, handler, verdicts
from mcp_proxy.forward.certs import create_ec_ca
from mcp_proxy.forward.contexts import LeafContexts
from mcp_proxy.forward.guard import ClientGuard
from mcp_proxy.relay.http.kept import Kept


class Peer:
    """What the guard asks of a transport."""

    def __init__(self, peer: Any) -> None:
        self.peer = peer

    def get_extra_info(self, name: str) -> Any:
        return self.peer if name == "peername" else None


@pytest.mark.parametrize(
    ("address", "default", "open_global", "strict_private"),
    [
        ("127.0.0.1", True, True, True),
        ("::1", True, True, True),
        ("::ffff:127.0.0.1", True, True, True),
        ("10.1.2.3", True, True, False),
        ("192.168.0.7", True, True, False),
        ("fe80::1%eth0", True, True, False),
        ("8.8.8.8", False, True, False),
        ("2001:4860:4860::8888", False, True, False),
        ("::ffff:8.8.8.8", False, True, False),
        ("not-an-address", False, False, False),
    ],
)
def test_who_may_connect(
    address: str, default: bool, open_global: bool, strict_private: bool, capsys: Any
) -> None:
    peer = Peer((address, 5000))
    assert ClientGuard()(peer) is default  # mitmproxy's defaults
    assert ClientGuard(block_global=False)(peer) is open_global
    assert ClientGuard(block_global=True, block_private=True)(peer) is strict_private


def test_one_line_per_refused_address(capsys: Any) -> None:
    guard = ClientGuard()
    for _ in range(3):
        assert not guard(Peer(("8.8.4.4", 1)))
    assert not guard(Peer(("1.1.1.1", 1)))
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "mcptape: forward proxy: refused a client at 8.8.4.4 (block_global; see "
        "docs/forward-proxy.md)",
        "mcptape: forward proxy: refused a client at 1.1.1.1 (block_global; see "
        "docs/forward-proxy.md)",
    ]


def test_a_transport_without_a_peer_passes() -> None:
    assert ClientGuard()(Peer(None))


def test_certificate_cache_is_bounded_and_leaves_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_ec_ca(tmp_path)
    monkeypatch.setattr(contexts, "LEAF_CACHE", 3)
    leaves = LeafContexts(tmp_path)
    try:
        first = leaves.context("a.test")
        for name in ("b.test", "c.test", "a.test", "d.test"):  # a.test used again: kept
            leaves.context(name)
        assert list(leaves._contexts) == ["c.test", "a.test", "d.test"]
        assert leaves.context("a.test") is first
        assert leaves.context("b.test") is not None  # made again, c.test goes
        assert list(leaves._contexts) == ["d.test", "a.test", "b.test"]
        assert not list(leaves.dir.iterdir())  # each certificate file removed once loaded
        assert "PRIVATE KEY" not in "".join(p.name for p in tmp_path.iterdir() if p.is_file())
    finally:
        leaves.close()
    assert not leaves.dir.exists()


def test_a_failing_chunk_copy_is_logged_once_and_stops(caplog: Any) -> None:
    seen: list[bytes] = []

    def tee(data: bytes) -> None:
        seen.append(data)
        if len(seen) == 2:
            raise ValueError("recording bug")

    copy = verdicts.guarded(tee)
    with caplog.at_level(logging.ERROR, logger="mcptape.forward"):
        for chunk in (b"1", b"2", b"3", b"4"):
            copy(chunk)  # never raises: the bytes already went to the host
    assert seen == [b"1", b"2"]
    assert len([r for r in caplog.records if "copying a chunk" in r.getMessage()]) == 1


class Rr:
    """The host's response as ``TapeSide`` writes it."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    async def write(self, data: bytes) -> None:
        self.out.append(data)


def test_the_tape_side_copies_each_chunk_after_it_went_or_keeps_the_body() -> None:
    rr = Rr()
    side = verdicts.TapeSide(None, rr, verdicts.Taping(), None)  # type: ignore[arg-type]
    got: list[bytes] = []
    side.copy = got.append
    assert side.before(b"a") == b"a" and side.held() is None
    side.went(b"a", 1)
    asyncio.run(side.send(b"event"))  # what a hook sends on the stream
    assert rr.out == [b"event"] and got == [b"a"]
    kept = verdicts.TapeSide(None, rr, verdicts.Taping(), None)  # type: ignore[arg-type]
    kept.kept = Kept()
    kept.went(b"xy", 2)
    assert kept.kept.take() == b"xy"


class Transport:
    def __init__(self, closing: bool) -> None:
        self.closing = closing

    def is_closing(self) -> bool:
        return self.closing


@pytest.mark.parametrize("closing", [False, True])
def test_a_connection_error_is_the_hosts_going_when_its_connection_closes(closing: bool) -> None:
    req: Any = SimpleNamespace(transport=Transport(closing))
    assert handler.host_gone(req) is closing
    assert handler.host_gone(SimpleNamespace(transport=None))  # type: ignore[arg-type]
