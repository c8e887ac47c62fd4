"""The recorder process: ``python -m mcp_proxy.recorder_process DATABASE``, fed on stdin.

:mod:`mcp_proxy.recorder.worker` (which reads the relay's pipe and writes the recording) with
what happens to a session once it ended and its rows are written: its findings are analysed
and stored (:func:`mcp_proxy.analysis.service.settle`), so that the first ``mcptape check`` is
a read and the dashboard's counts are there at once. It composes the two rooms here, at the
entry point, so that the recorder imports no analysis (docs/architecture.md, "Rooms").
"""

from __future__ import annotations

import sys


def _settle(url: str, session_id: str) -> bool:
    from mcp_proxy.analysis.service import settle

    return settle(url, session_id)


def main() -> int:
    from mcp_proxy.recorder.worker import main as worker_main

    return worker_main(on_ended=_settle)


if __name__ == "__main__":
    sys.exit(main())
