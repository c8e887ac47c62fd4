"""The relay's name for a frame on its way to the recorder process.

:class:`~mcp_proxy.frames.Frame` itself pickles as a flat tuple of plain values and a
module-level constructor (``Frame.__reduce__`` in :mod:`mcp_proxy.frames`), and a quick exchange
goes as plain tuples (:mod:`mcp_proxy.recorder.httpraw`): there is nothing left for a subclass to
do. ``WireFrame`` is the same class under the name the relay's modules import.
"""

from __future__ import annotations

from mcp_proxy.frames import Frame

__all__ = ["WireFrame"]

WireFrame = Frame
