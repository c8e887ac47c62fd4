"""``mcptape record`` must import where fcntl, poll() and SIGHUP do not exist (Windows)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import select, signal, sys
sys.modules["fcntl"] = None  # import fcntl now raises ImportError, as on Windows
del select.poll
del signal.SIGHUP
import mcp_proxy.recorder_proc, mcp_proxy.relay.stdio, mcp_proxy.recorder.worker
from mcp_proxy.recorder_proc import RecorderClient
from mcp_proxy.recorder import Recorder
print("ok")
"""


def test_the_recorder_and_the_stdio_relay_import_without_posix_only_modules() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, timeout=60)
    assert done.stdout == b"ok\n", done.stderr.decode()
