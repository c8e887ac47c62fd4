"""The lean engine's client guard: mitmproxy's ``block_global``/``block_private`` rules.

Pure: a connection is judged by its peer address alone (no socket can come from a global
address on this machine, so the rule is tested on the addresses themselves).
"""

from __future__ import annotations

from typing import Any

import pytest

from mcp_proxy.forward.lean import ClientGuard


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
