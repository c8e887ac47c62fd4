"""Who may use the lean engine when it listens beyond loopback (mitmproxy's rules)."""

from __future__ import annotations

import asyncio
import ipaddress
import sys

__all__ = ["ClientGuard"]


class ClientGuard:
    """mitmproxy's ``block_global``/``block_private``, for a proxy not bound to loopback.

    An intercepting proxy reachable from the internet is an open relay that reads TLS: as in
    mitmproxy, clients with a global address are refused by default (``block_global: false`` in
    ``config.yaml`` allows them), private ones only with ``block_private: true``. Loopback
    clients always pass. Each refusal is one stderr line (per address).
    """

    def __init__(self, block_global: bool = True, block_private: bool = False) -> None:
        self.block_global = block_global
        self.block_private = block_private
        self._said: set[str] = set()

    def __call__(self, transport: asyncio.BaseTransport) -> bool:
        peer = transport.get_extra_info("peername")
        if not peer:
            return True  # a Unix socket or a test transport: nothing to judge
        text = str(peer[0]).rsplit("%", 1)[0]
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address):
            address = address.ipv4_mapped or address
        if address.is_loopback:
            return True
        why = None
        if self.block_private and address.is_private:
            why = "block_private"
        elif self.block_global and address.is_global:
            why = "block_global"
        if why is None:
            return True
        if text not in self._said:
            self._said.add(text)
            print(
                f"mcptape: forward proxy: refused a client at {text} ({why}; see "
                "docs/forward-proxy.md)",
                file=sys.stderr,
                flush=True,
            )
        return False
