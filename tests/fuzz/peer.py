"""A raw stdio peer for the fuzz suite: says exactly the given bytes, keeps exactly what it hears.

    python tests/fuzz/peer.py SAY_FILE HEARD_FILE

Writes the bytes of ``SAY_FILE`` to stdout at once, then copies stdin to ``HEARD_FILE`` until
EOF and exits 0. Standard library only, no framing, no parsing: whatever mcptape forwards is
what the test compares.
"""

from __future__ import annotations

import os
import sys


def main() -> int:
    say, heard = sys.argv[1], sys.argv[2]
    with open(say, "rb") as fh:
        data = fh.read()
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]
    os.close(1)
    with open(heard, "wb") as out:
        while chunk := os.read(0, 65536):
            out.write(chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
