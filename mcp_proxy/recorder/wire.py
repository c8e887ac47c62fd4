"""The pipe between a relay and its recorder process: record layout and control messages.

Every record is ``<B type><I length>`` then the payload:

- ``CHUNK``: ``<32s sid><B dir><B chan><q mono_ns><d wall>`` + the bytes read — the stdio hot
  path, packed by hand (no pickling per read);
- ``HTTP``: a finished HTTP exchange with its head bytes undescribed
  (:mod:`~mcp_proxy.recorder.httpraw`: the recorder decodes and redacts the headers, off the
  relay's event loop);
- ``ITEM``: one pickled :mod:`~mcp_proxy.recorder.contract` item or control message. Pickle is
  only ever read from our own relay through an anonymous pipe.

Control messages are not part of the producer contract: :class:`Watch` names the process group
of the server the relay runs (the worker ends it if the relay dies without saying
:class:`Bye`), and :class:`Bye` says the relay is closing on purpose.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from mcp_proxy.frames import Channel, Direction

HEADER = struct.Struct("<BI")
CHUNK_META = struct.Struct("<32sBBqd")
T_CHUNK = 1
T_ITEM = 2
T_HTTP = 3
DIRECTIONS = (Direction.C2S, Direction.S2C)
CHANNELS = (Channel.STDIO, Channel.STDERR, Channel.HTTP, Channel.SSE, Channel.INJECT)
DIR_CODE = {d: i for i, d in enumerate(DIRECTIONS)}
CHAN_CODE = {c: i for i, c in enumerate(CHANNELS)}
#: The module a relay runs as its recorder process (``python -m …``).
WORKER_MODULE = "mcp_proxy.recorder_process"


@dataclass(slots=True)
class Watch:
    """The relay runs a server in process group ``pgid``; end it if the relay vanishes."""

    pgid: int


@dataclass(slots=True)
class Bye:
    """The relay closes the pipe on purpose (not a crash): no watchdog action."""
