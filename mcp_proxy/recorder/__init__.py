"""The recorder: every producer of traffic hands typed items to one contract; a pure batch
builder turns them into rows; a runner (a thread here, or a process behind
:class:`~mcp_proxy.recorder.client.RecorderClient`) writes them through the store.

- :mod:`.contract` — the items and the producer API (``new_session``, ``put_chunk``, …);
- :mod:`.builder` — items in, :class:`~mcp_proxy.store.rows.Batch` out (pure);
- :mod:`.runner` — :class:`BatchRunner` (retries, loss accounting) and :class:`Recorder`;
- :mod:`.client` / :mod:`.worker` — the recorder in its own process, fed through a pipe.
"""

from mcp_proxy.recorder.runner import BatchRunner, Recorder, RecorderStats
from mcp_proxy.store.rows import GAP_CODE

__all__ = ["GAP_CODE", "BatchRunner", "Recorder", "RecorderStats"]
