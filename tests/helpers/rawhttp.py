"""Reading one HTTP/1.1 answer off a raw socket, as a host would see it (tests that speak to a
relay byte by byte: hardening, the connection cap)."""

from __future__ import annotations

import socket


def read_raw(s: socket.socket) -> bytes:
    """One response as received: its head, and its Content-Length body; or whatever came
    before the peer closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        got = s.recv(65536)
        if not got:
            return data
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        got = s.recv(65536)
        if not got:
            break
        body += got
    return head + b"\r\n\r\n" + body


def read_answer(s: socket.socket) -> tuple[bytes, bytes]:
    """:func:`read_raw`, split into the head and the body."""
    head, _, body = read_raw(s).partition(b"\r\n\r\n")
    return head, body
