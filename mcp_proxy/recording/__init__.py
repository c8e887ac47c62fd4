"""Recordings: the model, the formats they travel in, and the registry that lists them.

- :mod:`~mcp_proxy.recording.model` — :class:`Recording` / :class:`SessionRecording` in the
  store's row shapes, so analysis, diff, replay and mock work the same on a file and a database.
- :mod:`~mcp_proxy.recording.jsonl` — mcptape's own JSON Lines format and its version upgrades.
- :mod:`~mcp_proxy.recording.har` / :mod:`~mcp_proxy.recording.har_read` — HAR 1.2 out and in.
- :mod:`~mcp_proxy.recording.otlp` — OpenTelemetry spans (OTLP/JSON file or OTLP/HTTP).
- :mod:`~mcp_proxy.recording.junit` — JUnit XML for CI.
- :mod:`~mcp_proxy.recording.database` — sessions from the store into the model and back.
- :mod:`~mcp_proxy.recording.registry` — the list every command and page takes formats from.

Names are imported lazily (``from mcp_proxy.recording import load_source`` loads the database
side only then): the CLI imports the registry at every start, so importing this package costs
nothing, and nothing here ever costs SQLAlchemy or protobuf before it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "ANNOTATION_FIELDS": "model",
    "EXCHANGE_FIELDS": "model",
    "FINDING_FIELDS": "model",
    "SESSION_FIELDS": "model",
    "Recording": "model",
    "RecordingFormatError": "model",
    "SessionRecording": "model",
    "frame_messages": "model",
    "raw_fields": "model",
    "write_file": "model",
    "FORMAT_NAME": "jsonl",
    "FORMAT_VERSION": "jsonl",
    "UPGRADES": "jsonl",
    "dumps_jsonl": "jsonl",
    "iter_jsonl": "jsonl",
    "loads_recording": "jsonl",
    "STATUS_TEXT": "har",
    "dumps_har": "har",
    "har_entry": "har",
    "sse_event_bytes": "har",
    "to_har": "har",
    "loads_har": "har_read",
    "ImportResult": "database",
    "export_bytes": "database",
    "import_recording": "database",
    "load_session": "database",
    "load_sessions": "database",
    "load_source": "database",
    "split_source": "database",
    "read_recording": "registry",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = list(_LAZY)
