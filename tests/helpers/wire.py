"""A scriptable raw stdio peer for byte-level relay tests (stdlib only, no SDK).

Run as ``python -m tests.helpers.wire SCRIPT`` where SCRIPT is a JSON file:
``{"capture": PATH, "write": [base64 chunks], "delay": s, "after_eof": [base64 chunks],
"exit": code, "stderr": [base64 chunks]}``. It writes the chunks to stdout (and stderr),
copies everything it reads from stdin to ``capture``, writes ``after_eof`` chunks once stdin
is closed (a reply still in flight when the host hung up), then exits with ``exit``.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import time


def main() -> int:
    with open(sys.argv[1]) as fh:
        script = json.load(fh)
    for chunk in script.get("stderr", []):
        os.write(2, base64.b64decode(chunk))
    for chunk in script.get("write", []):
        os.write(1, base64.b64decode(chunk))
        time.sleep(script.get("delay", 0))
    with open(script["capture"], "wb") as cap:
        while True:
            data = os.read(0, 65536)
            if not data:
                break
            cap.write(data)
            cap.flush()
    time.sleep(script.get("eof_delay", 0))
    for chunk in script.get("after_eof", []):
        os.write(1, base64.b64decode(chunk))
    return int(script.get("exit", 0))


if __name__ == "__main__":
    sys.exit(main())
