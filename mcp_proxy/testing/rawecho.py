"""A minimal, non-SDK JSON-RPC line server for benchmarks.

Usage::

    python -m mcp_proxy.testing.rawecho [--burst N] [--huge-mib N]

Reads newline-delimited JSON-RPC from stdin. Every request (a message with ``method`` and
``id``) is answered at once with ``{"jsonrpc":"2.0","id":<same id>,"result":{}}`` and a flush;
notifications, responses and unparsable lines are ignored. With ``--burst N`` a request whose
method is ``burst`` is preceded by ``N`` ``notifications/message`` lines (``data`` = 1..N); with
``--huge-mib N`` a request whose method is ``huge`` gets a tool-shaped result carrying one text
of ``N`` MiB. Exits on stdin EOF.

Why it exists: a benchmark that measures the relay's overhead must not also measure the SDK
(``import mcp`` alone costs ~0.7 s and its per-message cost dwarfs a relay's). This module
imports only the standard library, starts in a few tens of milliseconds and answers in
microseconds, so the ratio proxied/direct reflects the proxy.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import BinaryIO

HUGE_PATTERN = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_"  # 64 bytes


def _huge_text(mib: float) -> bytes:
    """An ASCII payload of ``mib`` MiB, already valid inside a JSON string."""
    size = int(max(0.0, mib) * 1024 * 1024)
    reps, rest = divmod(size, len(HUGE_PATTERN))
    return HUGE_PATTERN * reps + HUGE_PATTERN[:rest]


def serve(stdin: BinaryIO, stdout: BinaryIO, *, burst: int = 0, huge_mib: float = 0.0) -> None:
    """Answer requests from ``stdin`` on ``stdout`` until EOF."""
    huge = _huge_text(huge_mib) if huge_mib > 0 else b""
    notifications = b"".join(
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":%d}}\n'
        % k
        for k in range(1, burst + 1)
    )
    for line in iter(stdin.readline, b""):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "method" not in message or "id" not in message:
            continue
        rid = json.dumps(message["id"], separators=(",", ":")).encode()
        method = message.get("method")
        if method == "huge" and huge:
            out = (
                b'{"jsonrpc":"2.0","id":'
                + rid
                + b',"result":{"content":[{"type":"text","text":"'
                + huge
                + b'"}]}}\n'
            )
        else:
            out = b'{"jsonrpc":"2.0","id":' + rid + b',"result":{}}\n'
            if method == "burst" and notifications:
                out = notifications + out
        stdout.write(out)
        stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_proxy.testing.rawecho")
    parser.add_argument("--burst", type=int, default=0, help="notifications before a 'burst' reply")
    parser.add_argument("--huge-mib", type=float, default=0.0, help="MiB of text in a 'huge' reply")
    args = parser.parse_args(argv)
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer, burst=max(0, args.burst), huge_mib=args.huge_mib)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
