"""``forward.tunnel.parse_authority``: a CONNECT target is read back as it was written, and
nothing a peer sends makes it raise or let a bad host through."""

from __future__ import annotations

import ipaddress
import re

from hypothesis import given
from hypothesis import strategies as st

from mcp_proxy.forward.tunnel import parse_authority

REG_NAME = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=%-]+")
NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._~!$&'()*+,;=%-"
NAMES = st.text(alphabet=NAME_CHARS, min_size=1, max_size=30)
PORTS = st.integers(1, 65535)
V6 = st.ip_addresses(v=6).map(str)


def authority(host: str, port: int | None) -> bytes:
    shown = f"[{host}]" if ":" in host else host
    return (shown if port is None else f"{shown}:{port}").encode("ascii")


@given(NAMES | V6, PORTS)
def test_a_written_authority_is_read_back(host: str, port: int) -> None:
    assert parse_authority(authority(host, port), 443) == (host, port)


@given(NAMES | V6, st.integers(1, 65535))
def test_without_a_port_the_default_port(host: str, default: int) -> None:
    assert parse_authority(authority(host, None), default) == (host, default)


@given(V6, PORTS)
def test_an_unbracketed_v6_address_then_a_port(host: str, port: int) -> None:
    """What httpx writes in an absolute-form target (``http://::1:8080/``)."""
    assert parse_authority(f"{host}:{port}".encode(), 80) == (host, port)


@given(st.binary(max_size=80) | st.text(max_size=80).map(lambda t: t.encode("utf-8", "replace")))
def test_any_bytes_give_none_or_a_safe_target(raw: bytes) -> None:
    parsed = parse_authority(raw, 443)
    if parsed is None:
        return
    host, port = parsed
    assert 0 < port < 65536
    if ":" in host:
        ipaddress.IPv6Address(host)  # a bracketed (or bare) IPv6 address, nothing else
    else:
        assert REG_NAME.fullmatch(host), host  # no spaces, brackets, '@', '/' …
    assert parse_authority(authority(host, port), 1) == (host, port)  # and it reads back


@given(NAMES, st.integers(65536, 10**6) | st.just(0))
def test_a_port_out_of_range_is_refused(host: str, port: int) -> None:
    assert parse_authority(f"{host}:{port}".encode(), 443) is None
