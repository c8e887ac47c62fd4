"""The one list of a frame's columns as readers and bulk writers carry them in row tuples.

``show`` (:mod:`mcp_proxy.store.stream`), the analysis (``Store.iter_analysis_frames`` and
:mod:`mcp_proxy.analysis.facts`), ``export`` and ``import`` (:mod:`mcp_proxy.store.recordings`)
all move frames as plain tuples in this order: one definition, so that a new column is added
once and no reader unpacks a tuple in an order another module changed. Plain Python (no
SQLAlchemy), so that the analysis and the renderers can import it cheaply.

Not in the list: the database's own ``id`` and ``session_id`` (a reader asks for one session;
an import supplies the new key), and ``redacted`` (a mark the recorder writes, not part of a
frame's content).
"""

from __future__ import annotations

FRAME_COLUMNS: tuple[str, ...] = (
    "seq",
    "ts",
    "mono_ns",
    "direction",
    "channel",
    "kind",
    "method",
    "msg_id",
    "error_code",
    "size",
    "complete",
    "partial_parse",
    "raw",
    "http_exchange_id",
    "sse_id",
    "sse_event",
)

#: Positions in :data:`FRAME_COLUMNS`, for readers that pick single fields out of a row tuple.
SEQ, TS, MONO_NS, DIRECTION, CHANNEL, KIND, METHOD, MSG_ID, ERROR_CODE, SIZE = range(10)
COMPLETE, PARTIAL_PARSE, RAW, HTTP_EXCHANGE_ID, SSE_ID, SSE_EVENT = range(10, 16)

__all__ = ["FRAME_COLUMNS"]
