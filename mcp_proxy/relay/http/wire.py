"""Cheap pickling of frames on their way to the recorder process.

The relay hands every frame to the recorder worker through a pipe as a pickled call
(:class:`mcp_proxy.recorder.client.RecorderClient`). A slotted dataclass with enum fields pickles
through ``copyreg`` (state dicts, enum ``__reduce_ex__``) at several microseconds a frame — on
the relay's event loop, per SSE event. :class:`WireFrame` reduces to a flat tuple of plain
values and a module-level constructor, so the same frame costs a fraction of that; the worker
gets an ordinary :class:`~mcp_proxy.frames.Frame`. Importing this module is cheap (frames only).
"""

from __future__ import annotations

from typing import Any

from mcp_proxy.frames import Channel, Direction, Frame

__all__ = ["WireFrame", "make_frame"]

_DIRECTIONS = {d.value: d for d in Direction}
_CHANNELS = {c.value: c for c in Channel}


def make_frame(
    direction: str,
    channel: str,
    raw: bytes,
    mono_ns: int,
    wall: float,
    complete: bool,
    http_exchange: int | None,
    sse_id: str | None,
    sse_event: str | None,
    extra: dict[str, Any] | None,
) -> Frame:
    """Rebuild a :class:`Frame` in the recorder process."""
    return Frame(
        _DIRECTIONS[direction],
        _CHANNELS[channel],
        raw,
        mono_ns,
        wall,
        complete,
        http_exchange,
        sse_id,
        sse_event,
        extra or {},
    )


class WireFrame(Frame):
    """A :class:`Frame` that pickles as ``make_frame(*plain values)``."""

    __slots__ = ()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (
            make_frame,
            (
                self.direction._value_,  # the plain attribute: ``.value`` is a property
                self.channel._value_,
                self.raw,
                self.mono_ns,
                self.wall,
                self.complete,
                self.http_exchange,
                self.sse_id,
                self.sse_event,
                self.extra or None,
            ),
        )
