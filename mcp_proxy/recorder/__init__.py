"""The recorder: every producer of traffic hands typed items to one contract; a pure batch
builder turns them into rows; a runner (a thread here, or a process behind
:class:`~mcp_proxy.recorder.client.RecorderClient`) writes them through the store.

- :mod:`.contract` — the items and the producer API (``new_session``, ``put_chunk``, …);
- :mod:`.builder` — items in, :class:`~mcp_proxy.store.rows.Batch` out (pure);
- :mod:`.runner` — :class:`BatchRunner` (retries, loss accounting) and :class:`Recorder`;
- :mod:`.client` / :mod:`.worker` — the recorder in its own process, fed through a pipe.

Names are loaded on first use: a relay that imports only the contract and the client does not
pay for the builder, the classifier and the store on its start-up path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp_proxy.recorder.runner import BatchRunner, Recorder, RecorderStats
    from mcp_proxy.store.rows import GAP_CODE

__all__ = ["GAP_CODE", "BatchRunner", "Recorder", "RecorderStats"]


def __getattr__(name: str) -> Any:
    if name in ("BatchRunner", "Recorder", "RecorderStats"):
        from mcp_proxy.recorder import runner

        return getattr(runner, name)
    if name == "GAP_CODE":
        from mcp_proxy.store.rows import GAP_CODE

        return GAP_CODE
    raise AttributeError(name)
